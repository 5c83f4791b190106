"""The controller's moto world with a shadow stage: the shadow config beside the canary config,
UpdateEndpoint (which moto does not serve) applied to the moto endpoint after botocore validated
the request, and both variants' data capture in S3 as SageMaker writes it."""

from __future__ import annotations

import io
import json
import threading
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import boto3
from botocore.exceptions import ClientError
from botocore.response import StreamingBody
from botocore.validate import validate_parameters

from lambdas.canary_controller import capture
from lambdas.canary_controller.shadow_compare import Answer, Thresholds
from lambdas.canary_controller.shadow_stage import ShadowRules, is_shadow_config
from tests.lambdas.conftest import ENDPOINT, REGION, World, _backend, validation_error
from tests.lambdas.test_shadow_compare import answers as compare_answers
from tests.sagemaker_refusals import count_refusal, move_refusal

SHADOW_CONFIG = "cfg-shadow"
CANARY_CONFIG = "cfg-1"
BUCKET = "capture-bucket"
CAPTURE_URI = f"s3://{BUCKET}/datacapture"
COMPARE = 1800
MIN_SECONDS = 3600
MAX_SECONDS = 3 * 3600
STAGE_UPDATE_TIMEOUT = 4200
SHADOW = ShadowRules(
    config_name=SHADOW_CONFIG,
    shadow_variant="shadow",
    capture_uri=CAPTURE_URI,
    sample_percent=10,
    min_seconds=MIN_SECONDS,
    max_seconds=MAX_SECONDS,
    compare_seconds=COMPARE,
    stage_update_timeout_seconds=STAGE_UPDATE_TIMEOUT,
    thresholds=Thresholds(min_requests_per_adapter=100),
)


def shadow_world(world: World) -> World:
    """``world`` with the shadow stage configured: the canary at weight 0 on the canary config,
    without a scalable target (the deploy suspended its scaling), the shadow config beside it,
    the capture bucket, and UpdateEndpoint served."""
    sm = boto3.client("sagemaker", region_name=REGION)
    sm.create_model(
        ModelName="m-shadow",
        ExecutionRoleArn="arn:aws:iam::123456789012:role/sm",
        PrimaryContainer={"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm:2"},
    )
    sm.create_endpoint_config(
        EndpointConfigName=SHADOW_CONFIG,
        ProductionVariants=[
            {"VariantName": "primary", "ModelName": "m-primary", "InitialInstanceCount": 4,
             "InstanceType": "ml.g4dn.xlarge", "InitialVariantWeight": 1.0},
        ],
        ShadowProductionVariants=[
            {"VariantName": "shadow", "ModelName": "m-shadow", "InitialInstanceCount": 1,
             "InstanceType": "ml.g4dn.xlarge", "InitialVariantWeight": 0.1},
        ],
    )  # fmt: skip
    # a config with a shadow stage holds the canary's initial weight at 0 (typed_config)
    for variant in _backend().endpoint_configs[CANARY_CONFIG].production_variants:
        if variant["VariantName"] == "canary":
            variant["InitialVariantWeight"] = 0.0
    for variant in _backend().endpoints[ENDPOINT].production_variants:
        if variant["VariantName"] == "canary":
            variant["CurrentWeight"] = variant["DesiredWeight"] = 0.0
        else:
            variant["CurrentWeight"] = variant["DesiredWeight"] = 100.0
    boto3.client("application-autoscaling", region_name=REGION).deregister_scalable_target(
        ServiceNamespace="sagemaker", ResourceId=f"endpoint/{ENDPOINT}/variant/canary",
        ScalableDimension="sagemaker:variant:DesiredInstanceCount",
    )  # fmt: skip
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    ctl = world.controller
    ctl.s = replace(ctl.s, shadow=SHADOW)
    ctl.s3 = boto3.client("s3", region_name=REGION)
    serve_update_endpoint(ctl.sm)
    world.shadow_ground = Ground(world)
    world.runtime = Runtime(world)
    serve_shadow_minutes(world)
    return world


class Runtime:
    """SageMaker Runtime on the shadow config, as far as the stage's probes see it, which moto
    does not serve (its InvokeEndpoint has canned bodies, it streams nothing): each request
    validated against botocore's sagemaker-runtime model, answered (a chat completion, whole or
    as a stream of PayloadPart events), and captured as data capture writes it: on the primary
    always, on the shadow when ``copied(kind)`` (the sample SageMaker copies; default every
    one). Captured lines are written to S3 on the next DescribeEndpoint (capture writes
    "periodically"), one object per variant, stamped with the world's clock. A streamed probe's
    line carries no ``inferenceId`` (InvokeEndpointWithResponseStream's InferenceId is not
    documented to reach capture): it is found by the id in its body.

    Faults: ``refuse[kind]`` is the error answer every request of that kind gets (SageMaker's
    wording for such a refusal is not published: these are the tests' own); ``raises`` is raised
    by every request (no answer: a connection that failed)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.copied: dict[str, bool] = {"whole": True, "streamed": True}
        self.refuse: dict[str, ClientError] = {}
        self.raises: Exception | None = None
        #: Every request, in order: (kind, InferenceId).
        self.calls: list[tuple[str, str]] = []
        self._lines: dict[str, list[str]] = {"primary": [], "shadow": []}
        self._lock = threading.Lock()
        self._flushes = 0
        runtime = boto3.client("sagemaker-runtime", region_name=REGION)
        model = runtime.meta.service_model
        whole, streamed = (
            model.operation_model(op).input_shape
            for op in ("InvokeEndpoint", "InvokeEndpointWithResponseStream")
        )

        def invoke_endpoint(**params: Any) -> Any:
            validate_parameters(params, whole)
            text = self._served("whole", params)
            body = json.dumps(_completion(text)).encode()
            return {"Body": StreamingBody(io.BytesIO(body), len(body)),
                    "ContentType": "application/json"}  # fmt: skip

        def invoke_endpoint_with_response_stream(**params: Any) -> Any:
            validate_parameters(params, streamed)
            text = self._served("streamed", params)
            events = [_sse({"choices": [{"index": 0, "delta": {"content": text}}]}), b"[DONE]"]
            return {"Body": [{"PayloadPart": {"Bytes": b"data: " + e + b"\n\n"}} for e in events],
                    "ContentType": "text/event-stream"}  # fmt: skip

        runtime.invoke_endpoint = invoke_endpoint
        runtime.invoke_endpoint_with_response_stream = invoke_endpoint_with_response_stream
        world.controller.runtime = runtime
        sm = world.controller.sm
        describe = sm.describe_endpoint

        def describe_endpoint(**params: Any) -> Any:
            self.flush()
            return describe(**params)

        sm.describe_endpoint = describe_endpoint

    def _served(self, kind: str, params: dict[str, Any]) -> str:
        assert params["EndpointName"] == ENDPOINT
        inference_id = params["InferenceId"]
        request = json.loads(params["Body"])
        assert inference_id in request["messages"][0]["content"], request
        assert request.get("stream", False) is (kind == "streamed"), request
        with self._lock:
            self.calls.append((kind, inference_id))
        if self.raises is not None:
            raise self.raises
        if kind in self.refuse:
            raise self.refuse[kind]
        answer = _completion("OK")
        at = f"{datetime.fromtimestamp(self.world.clock.now, UTC):%Y-%m-%dT%H:%M:%SZ}"
        marked = inference_id if kind == "whole" else None
        line = capture.capture_line(request, answer, at=at, inference_id=marked)
        with self._lock:
            self._lines["primary"].append(line)
            if self.copied[kind]:
                self._lines["shadow"].append(line)
        return "OK"

    def flush(self) -> None:
        """The captured lines written, one object per variant, at the world's clock: into moto's
        S3 backend, as SageMaker writes them (not a call of the controller's, which a client
        call made inside its DescribeEndpoint would be recorded as)."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        with self._lock:
            pending, self._lines = self._lines, {"primary": [], "shadow": []}
        now = datetime.fromtimestamp(self.world.clock.now, UTC)
        backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
        with mock.patch("moto.s3.models.utcnow", lambda: now.replace(tzinfo=None)):
            for variant, lines in pending.items():
                if not lines:
                    continue
                self._flushes += 1
                bucket, prefix = capture.variant_prefix(CAPTURE_URI, ENDPOINT, variant)
                (hour,) = capture.hour_prefixes(prefix, int(now.timestamp()), int(now.timestamp()))
                body = ("\n".join(lines) + "\n").encode()
                backend.put_object(bucket, f"{hour}probes-{self._flushes}.jsonl", body)


def _completion(text: str) -> dict[str, Any]:
    return {"object": "chat.completion", "usage": {"completion_tokens": 1},
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "length"}]}  # fmt: skip


def _sse(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode()


class Ground:
    """What the shadow stage stands on (shadow_stage.Ground), as SageMaker and CloudWatch show it,
    which moto does not: DescribeEndpoint's ``DataCaptureConfig`` while the endpoint runs a shadow
    config (``capture_status``; None leaves it out) and its ``ShadowProductionVariants``
    (``shadow_instances`` in service), and GetMetricData's Invocations and
    Invocation5XXErrors of both variants (``invocations``: per variant, (calls, errors) a
    minute; None leaves the variant's series empty), each request validated against
    CloudWatch's model. The capture objects are the world's S3 (:func:`ground_capture`)."""

    def __init__(self, world: World) -> None:
        self.capture_status: str | None = "Started"
        #: The shadow's instances in service where no other fake shows them (ShadowVariant does).
        self.shadow_instances = 1
        self.invocations: dict[str, tuple[float, float] | None] = {
            "primary": (400.0, 0.0), "shadow": (40.0, 0.0),
        }  # fmt: skip
        sm, cw = world.controller.sm, world.controller.cw
        describe, metric_data = sm.describe_endpoint, cw.get_metric_data
        model = cw.meta.service_model.operation_model("GetMetricData")

        def describe_endpoint(**params: Any) -> Any:
            out = describe(**params)
            live = out.get("EndpointConfigName")
            if not is_shadow_config(live, ENDPOINT, SHADOW_CONFIG):
                return out
            count = {"CurrentInstanceCount": self.shadow_instances,
                     "DesiredInstanceCount": self.shadow_instances}  # fmt: skip
            out.setdefault("ShadowProductionVariants", [
                {"VariantName": "shadow", "CurrentWeight": 0.1, "DesiredWeight": 0.1, **count}
            ])  # fmt: skip
            if self.capture_status is not None:
                out["DataCaptureConfig"] = {
                    "EnableCapture": True, "CaptureStatus": self.capture_status,
                    "CurrentSamplingPercentage": 100, "DestinationS3Uri": CAPTURE_URI,
                }  # fmt: skip
            return out

        def get_metric_data(**params: Any) -> Any:
            queries = params["MetricDataQueries"]
            dims = [{d["Name"]: d["Value"] for d in q["MetricStat"]["Metric"]["Dimensions"]}
                    for q in queries]  # fmt: skip
            metrics = {q["MetricStat"]["Metric"]["MetricName"] for q in queries}
            shadow = any(d.get("VariantName") == "shadow" for d in dims)
            if not shadow or not metrics <= {"Invocations", "Invocation5XXErrors"}:
                return metric_data(**params)
            validate_parameters(params, model.input_shape)
            results = []
            for q, d in zip(queries, dims, strict=True):
                figures = self.invocations.get(d["VariantName"])
                i = 0 if q["MetricStat"]["Metric"]["MetricName"] == "Invocations" else 1
                minutes = int((params["EndTime"] - params["StartTime"]).total_seconds() // 60)
                value = None if figures is None else figures[i] * max(1, minutes)
                results.append({
                    "Id": q["Id"], "StatusCode": "Complete",
                    "Timestamps": [] if value is None else [params["StartTime"]],
                    "Values": [] if value is None else [value],
                })  # fmt: skip
            return {"MetricDataResults": results}

        sm.describe_endpoint = describe_endpoint
        cw.get_metric_data = get_metric_data


def ground_capture(world: World, variants: tuple[str, ...] = ("primary", "shadow")) -> None:
    """A capture object of each of ``variants`` in the clock's hour, holding no answer (what the
    stage's ground check counts, without adding to the comparison's answers)."""
    for variant in variants:
        put_capture(world, variant, [], key="ground.jsonl", body="\n")


def serve_shadow_minutes(
    world: World,
    *,
    primary_ms: float = 2000.0,
    shadow_ms: float = 2000.0,
    primary_load: float = 10.0,
    shadow_load: float = 10.0,
) -> list[dict[str, Any]]:
    """``cw.get_metric_data`` answering the shadow comparison's per-minute read as CloudWatch
    would (moto computes no percentiles): the request validated against CloudWatch's model, then
    one datapoint a minute of the window for each query (ModelLatency p95 in microseconds,
    InvocationsPerInstance Sum), ``None`` figures leaving a series empty; every other query is
    moto's. Returns the requests answered. Default: like loads, like latencies (a pass)."""
    cw = world.controller.cw
    real = cw.get_metric_data
    model = cw.meta.service_model.operation_model("GetMetricData")
    asked: list[dict[str, Any]] = []
    figures = {
        ("primary", "ModelLatency"): primary_ms * 1000,
        ("shadow", "ModelLatency"): shadow_ms * 1000,
        ("primary", "InvocationsPerInstance"): primary_load,
        ("shadow", "InvocationsPerInstance"): shadow_load,
    }

    def get_metric_data(**params: Any) -> Any:
        queries = params["MetricDataQueries"]
        names = {q["MetricStat"]["Metric"]["MetricName"] for q in queries}
        if names != {"ModelLatency", "InvocationsPerInstance"}:
            return real(**params)
        validate_parameters(params, model.input_shape)
        asked.append(params)
        start, end = params["StartTime"], params["EndTime"]
        first = int(start.timestamp()) // 60 * 60
        stamps = [datetime.fromtimestamp(t, UTC) for t in range(first, int(end.timestamp()), 60)]
        results = []
        for q in queries:
            stat = q["MetricStat"]
            variant = stat["Metric"]["Dimensions"][1]["Value"]
            value = figures[(variant, stat["Metric"]["MetricName"])]
            assert stat["Period"] == 60
            results.append({
                "Id": q["Id"], "Label": stat["Metric"]["MetricName"], "StatusCode": "Complete",
                "Timestamps": [] if value is None else stamps,
                "Values": [] if value is None else [value] * len(stamps),
            })  # fmt: skip
        return {"MetricDataResults": results}

    cw.get_metric_data = get_metric_data
    return asked


def variant_names(config: str) -> set[str]:
    """The variant names of the moto endpoint config ``config``, its shadow's too (moto keeps no
    ShadowProductionVariants: the shadow configs are the stack's and those sized from it)."""
    names = {v["VariantName"] for v in _backend().endpoint_configs[config].production_variants}
    return names | ({"shadow"} if is_shadow_config(config, ENDPOINT, SHADOW_CONFIG) else set())


def serve_update_endpoint(client: Any, calls: list[str] | None = None) -> list[str]:
    """``client.update_endpoint``: the request validated against SageMaker's model, refused as
    SageMaker refuses a blue/green move that renames variants (tests/sagemaker_refusals.py), then
    the moto endpoint moved to the config, each variant of the same name keeping its live weight
    and count (RetainAllVariantProperties), a new one at the config's initial values. Returns the
    configs asked for, in order."""
    asked = [] if calls is None else calls
    model = client.meta.service_model.operation_model("UpdateEndpoint")

    def update_endpoint(**params: Any) -> dict[str, Any]:
        validate_parameters(params, model.input_shape)
        assert params.get("RetainAllVariantProperties") is True
        endpoint = _backend().endpoints[params["EndpointName"]]
        live, new = endpoint.endpoint_config_name, params["EndpointConfigName"]
        refused = move_refusal(params, variant_names(live), variant_names(new))
        if refused:
            raise validation_error(refused)
        config = _backend().endpoint_configs[params["EndpointConfigName"]]
        live = {v["VariantName"]: v for v in endpoint.production_variants}
        fresh = endpoint._process_production_variants(config.production_variants)
        for v in fresh:  # moto leaves a weight of 0 out; SageMaker answers it
            v.setdefault("CurrentWeight", 0.0)
            v.setdefault("DesiredWeight", 0.0)
        endpoint.production_variants = [live.get(v["VariantName"], v) for v in fresh]
        endpoint.endpoint_config_name = params["EndpointConfigName"]
        asked.append(params["EndpointConfigName"])
        return {"EndpointArn": endpoint.arn}

    client.update_endpoint = update_endpoint
    return asked


def answers(adapter: str, n: int, *, seed: int, fail_every: int = 0, length: int = 120) -> list:
    """``n`` answers of ``adapter`` as the comparison's own tests build them; the ok ones carry
    their times as the container writes them (about 1 s end to end, 0.1 s to the first token)."""
    return compare_answers(adapter, n, seed=seed, fail_every=fail_every, length=length)


def put_capture(
    world: World, variant: str, items: list[Answer], *, key: str = "part.jsonl", body: str = ""
) -> None:
    """One captured object of ``variant`` in the hour partition of the world's clock, each answer
    captured in the clock's minute (its ``eventMetadata.inferenceTime``)."""
    bucket, prefix = capture.variant_prefix(CAPTURE_URI, ENDPOINT, variant)
    (hour,) = capture.hour_prefixes(prefix, int(world.clock.now), int(world.clock.now))
    now = [replace(a, minute=int(world.clock.now) // 60) for a in items]
    boto3.client("s3", region_name=REGION).put_object(
        Bucket=bucket, Key=f"{hour}{key}", Body=(body or capture.lines(now)).encode()
    )


def capture_both(world: World, *, shadow_fail_every: int = 0, n: int = 150, key: str = "a") -> None:
    for adapter in ("manga_domain", "general_support"):
        put_capture(world, "primary", answers(adapter, n, seed=1), key=f"{key}-{adapter}.jsonl")
        put_capture(
            world, "shadow", answers(adapter, n, seed=2, fail_every=shadow_fail_every),
            key=f"{key}-{adapter}.jsonl",
        )  # fmt: skip


class ShadowVariant:
    """The shadow variant as SageMaker shows it, which moto does not: DescribeEndpoint's
    ``ShadowProductionVariants`` while the endpoint is on a shadow config (its counts the config's),
    DescribeEndpointConfig's for the stack's shadow config (``peak`` instances) and the configs
    the controller sizes from it, CreateEndpointConfig (validated against SageMaker's model, then
    moto's; ``created``: the requests), and UpdateEndpointWeightsAndCapacities for the shadow
    variant refused (tests/sagemaker_refusals.py; ``calls``: every request that named it)."""

    def __init__(self, world: World, peak: int) -> None:
        self.peak = peak
        #: The shadow's InitialInstanceCount by shadow config.
        self.configs: dict[str, int] = {SHADOW_CONFIG: peak}
        self.current: int | None = None
        self.calls: list[dict[str, Any]] = []
        self.created: list[dict[str, Any]] = []
        sm = world.controller.sm
        describe, describe_config = sm.describe_endpoint, sm.describe_endpoint_config
        update, create = sm.update_endpoint_weights_and_capacities, sm.create_endpoint_config
        model = sm.meta.service_model

        def describe_endpoint(**params: Any) -> Any:
            out = describe(**params)
            self.current = self.configs.get(out.get("EndpointConfigName", ""))
            if self.current is None:
                return out
            count = {"CurrentInstanceCount": self.current, "DesiredInstanceCount": self.current}
            out["ShadowProductionVariants"] = [
                {"VariantName": "shadow", "CurrentWeight": 0.1, "DesiredWeight": 0.1, **count}
            ]
            return out

        def describe_endpoint_config(**params: Any) -> Any:
            out = describe_config(**params)
            if not out.get("DataCaptureConfig"):
                out.pop("DataCaptureConfig", None)  # moto answers {}, SageMaker leaves it out
            count = self.configs.get(params["EndpointConfigName"])
            if count is not None:
                out["ShadowProductionVariants"] = [
                    {"VariantName": "shadow", "ModelName": "m-shadow",
                     "InitialInstanceCount": count, "InstanceType": "ml.g4dn.xlarge",
                     "InitialVariantWeight": 0.1},
                ]  # fmt: skip
            return out

        def create_endpoint_config(**params: Any) -> Any:
            validate_parameters(params, model.operation_model("CreateEndpointConfig").input_shape)
            self.created.append(params)
            (shadow,) = params["ShadowProductionVariants"]
            self.configs[params["EndpointConfigName"]] = shadow["InitialInstanceCount"]
            return create(**params)

        def update_weights(**params: Any) -> Any:
            items = params["DesiredWeightsAndCapacities"]
            if all(i["VariantName"] != "shadow" for i in items):
                return update(**params)
            validate_parameters(
                params, model.operation_model("UpdateEndpointWeightsAndCapacities").input_shape
            )
            self.calls.append(params)
            live = _backend().endpoints[params["EndpointName"]].endpoint_config_name
            raise validation_error(count_refusal("shadow", live))

        sm.describe_endpoint = describe_endpoint
        sm.describe_endpoint_config = describe_endpoint_config
        sm.create_endpoint_config = create_endpoint_config
        sm.update_endpoint_weights_and_capacities = update_weights


def set_primary_count(count: int) -> None:
    """The primary scaled (its autoscaling) to ``count`` instances in service."""
    for variant in _backend().endpoints[ENDPOINT].production_variants:
        if variant["VariantName"] == "primary":
            variant["CurrentInstanceCount"] = variant["DesiredInstanceCount"] = count
