"""The controller's AWS reads and writes (SageMaker, Application Auto Scaling, CloudWatch).

AWS behaviour relied on, with its source:

- UpdateEndpointWeightsAndCapacities is refused with ValidationException while the endpoint is
  Updating (autoscaling, a deploy, our own previous change) (the API reference,
  UpdateEndpointWeightsAndCapacities: "SageMaker sets the endpoint status to Updating. After
  updating the endpoint, it sets the status to InService"; a second call meanwhile is refused);
  :func:`refused` recognises it so the caller retries on a later tick. Each
  ``DesiredWeightAndCapacity`` may carry only ``DesiredInstanceCount`` or only ``DesiredWeight``
  (SageMaker API reference, DesiredWeightAndCapacity: both optional), so a capacity change never
  rewrites a weight another actor (an operator's rollback) just set.
- RegisterScalableTarget on an existing target updates it, and for an active resource "changes
  the resource's current capacity to a value that is inside of this range" (Application Auto
  Scaling API reference, RegisterScalableTarget): raising MinCapacity scales the canary (or, in a
  rollback, the primary) out, lowering MaxCapacity scales it in, and no scaling policy leaves the
  range. On a resource without a target it registers a new one, so the primary's bounds are read
  first (DescribeScalableTargets) and only an existing target's are raised.
- DescribeEndpoint's ProductionVariants carry CurrentWeight/DesiredWeight and
  CurrentInstanceCount/DesiredInstanceCount per variant (SageMaker API reference), and its
  ``ShadowProductionVariants`` the same ProductionVariantSummary for the shadow variant ("one for
  each model that you want to host at this endpoint in shadow mode", SageMaker API reference,
  DescribeEndpoint, https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DescribeEndpoint.html).
- DescribeEndpoint's ``EndpointConfigName`` names the config the endpoint runs; an UpdateEndpoint
  (a deploy, the console) replaces it (SageMaker API reference, DescribeEndpoint, UpdateEndpoint).
- AWS/SageMaker ``Invocations`` and ``Invocation5XXErrors`` per EndpointName/VariantName, one-minute
  Sum (SageMaker developer guide, "Metrics for monitoring Amazon SageMaker AI"); GetMetricData
  periods are multiples of 60 s.

Failures. A boto3 call raises ClientError when AWS answered with an error, and a BotoCoreError
when no answer came (botocore.exceptions: EndpointConnectionError and ConnectTimeoutError are
``ConnectionError`` subclasses, ReadTimeoutError and ConnectionClosedError ``HTTPClientError``
ones; NoCredentialsError and the like are neither). :data:`AWS_ERRORS` is both; every caller in the
controller handles both (:func:`retry_later` says which mean "not now"). A call that got no answer
may still have been applied (a read timeout after SageMaker took the weight change): the callers
allow for it (the record's ``intent``, written before the call: ``rules.intent_landed`` and
``rules.endpoint_changed``; StartExecution's name-idempotency).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from . import rules as r
from .shadow_compare import MinuteLatency
from .state import RolloutState

SCALABLE_DIMENSION = "sagemaker:variant:DesiredInstanceCount"


#: Every failure of a boto3 call: an error answer, or no answer (module docstring).
AWS_ERRORS: tuple[type[Exception], ...] = (ClientError, BotoCoreError)
#: Answers that mean "not now": SageMaker's refusal while Updating, throttling, and Application
#: Auto Scaling's ConcurrentUpdateException (another update of the same target is in progress).
RETRY_LATER = ("ValidationException", "ThrottlingException", "ConcurrentUpdateException")
#: DynamoDB's answers to a write that are worth sending again (Amazon DynamoDB Developer Guide,
#: "Error handling with DynamoDB", the "OK to retry?" column: ProvisionedThroughputExceeded,
#: RequestLimitExceeded, ThrottlingException and the HTTP 5xx InternalServerError and
#: ServiceUnavailable are; ConditionalCheckFailed, ValidationException (an item over 400 KB),
#: AccessDenied and ResourceNotFound are not). DynamoDB's ValidationException is not SageMaker's
#: "not now": it is not in :data:`RETRY_LATER`'s place here.
WRITE_AGAIN = (
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "ThrottlingException",
    "InternalServerError",
    "ServiceUnavailable",
)


def error_code(exc: Exception) -> str:
    """The AWS error code of an answer, or the class of a failure without one."""
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code") or "ClientError")
    return type(exc).__name__


def answered(exc: Exception) -> bool:
    """AWS answered (with an error); False: no answer came, the call may have been applied."""
    return isinstance(exc, ClientError)


def describe_error(exc: Exception) -> str:
    """``Code: message`` for a log line, a record's reason or a notification."""
    if isinstance(exc, ValueError):  # a capture that cannot be read (capture.CaptureError)
        return f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ClientError):
        return f"{error_code(exc)}: {exc.response.get('Error', {}).get('Message', '')}"
    return f"{error_code(exc)}: {exc}"


def retry_later(exc: Exception, codes: tuple[str, ...] = RETRY_LATER) -> bool:
    """AWS would not take the change now, or its answer did not come: retry on a later tick.

    Refusals (``codes``: :data:`RETRY_LATER`, or :data:`WRITE_AGAIN` for a DynamoDB write), a
    server-side error (HTTP 5xx: InternalFailure, ServiceUnavailable) once botocore's own retries
    are spent, and no answer at all (a connection that failed or dropped, a connect or read
    timeout). AccessDenied, a missing resource or no credentials are not: they do not pass by
    waiting a check interval.
    """
    if isinstance(exc, ClientError):
        return error_code(exc) in codes or http_status(exc) >= 500
    return isinstance(exc, BotoConnectionError | HTTPClientError)


def http_status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def maybe_applied(exc: Exception) -> bool:
    """The call may have been applied though it failed: no answer came (a read timeout, a
    dropped connection) or the server failed (HTTP 5xx: it may have failed after applying it).
    A 4xx answer (throttling, a refusal, a lost condition) applied nothing."""
    return not isinstance(exc, ClientError) or http_status(exc) >= 500


def describe(sm: Any, endpoint: str) -> tuple[str, str | None, dict[str, dict[str, Any]]]:
    """(EndpointStatus, EndpointConfigName, variants by name); ``NotFound`` when the endpoint is
    gone. Any other failure raises: a tick that cannot see the endpoint changes nothing (the state
    machine retries it, then rolls back; see the handler's docstring)."""
    try:
        desc = sm.describe_endpoint(EndpointName=endpoint)
    except ClientError as exc:
        if exc.response["Error"]["Code"] in ("ValidationException", "ResourceNotFound"):
            return "NotFound", None, {}
        raise
    # variant names are unique on an endpoint, shadow variants included
    listed = [*desc.get("ProductionVariants", []), *desc.get("ShadowProductionVariants", [])]
    variants = {v["VariantName"]: v for v in listed}
    return str(desc["EndpointStatus"]), desc.get("EndpointConfigName"), variants


def alarm_states(cw: Any, names: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """``{name: (state, reason)}``; an alarm that does not exist is reported as ``MISSING``."""
    found: dict[str, tuple[str, str]] = {}
    listed = list(names)
    for i in range(0, len(listed), 100):
        pages = cw.get_paginator("describe_alarms").paginate(
            AlarmNames=listed[i : i + 100], AlarmTypes=["MetricAlarm", "CompositeAlarm"]
        )
        for page in pages:
            for alarm in page.get("MetricAlarms", []) + page.get("CompositeAlarms", []):
                found[alarm["AlarmName"]] = (alarm["StateValue"], alarm.get("StateReason", ""))
    return {
        n: found.get(n, ("MISSING", "alarm not found: cannot verify canary health")) for n in listed
    }


def set_weights(sm: Any, endpoint: str, weights: dict[str, float]) -> None:
    sm.update_endpoint_weights_and_capacities(
        EndpointName=endpoint,
        DesiredWeightsAndCapacities=[
            {"VariantName": name, "DesiredWeight": float(w)} for name, w in weights.items()
        ],
    )


def update_endpoint(sm: Any, endpoint: str, config_name: str) -> None:
    """Move the endpoint to ``config_name`` (the shadow stage's way in and out), as a plain update.

    Every stage move changes the variant names ({primary, canary} <-> {primary + shadow}), and
    "When doing a blue/green or rolling deployment, your new endpoint configuration must have the
    same variant name as the old endpoint configuration" (SageMaker developer guide, deployment
    guardrails, "Exclusions",
    https://docs.aws.amazon.com/sagemaker/latest/dg/deployment-guardrails-exclusions.html). So
    the move carries no ``DeploymentConfig`` and does not set ``RetainDeploymentConfig`` (which
    "specifies whether to reuse the last deployment configuration. The default value is false":
    the stack's blue/green CANARY policy is not re-applied to it); without an update policy
    "SageMaker uses a blue/green deployment strategy with all at once traffic shifting by
    default" (API reference, DeploymentConfig,
    https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DeploymentConfig.html). No
    guardrail rule (CanarySize, auto-rollback alarms) applies to a config the controller moves
    to; the stack's own deploys (CloudFormation, same variant names) keep theirs
    (``typed_config.loader.guardrail_step_errors``).

    ``RetainAllVariantProperties``: a variant of the same name keeps its live instance count and
    weight (the primary: what autoscaling gave it), a new one takes the config's initial values
    (the shadow: the count :func:`create_sized_config` gave it) (API reference, UpdateEndpoint,
    https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_UpdateEndpoint.html). A
    ValidationException while the endpoint is Updating is retried on the next tick; any other
    (:func:`refused_for_good`) ends the stage at once (``decisions``)."""
    sm.update_endpoint(
        EndpointName=endpoint,
        EndpointConfigName=config_name,
        RetainAllVariantProperties=True,
    )


#: What a copy of an endpoint config carries over: every member CreateEndpointConfig takes that
#: DescribeEndpointConfig answers, of the same shape in both (botocore's SageMaker model; a test
#: checks it). Not the tags: DescribeEndpointConfig does not answer them.
CONFIG_COPIED = (
    "AsyncInferenceConfig", "CrossRegionTrafficConfig", "DataCaptureConfig",
    "EnableNetworkIsolation", "ExecutionRoleArn", "ExplainerConfig", "KmsKeyId", "MetricsConfig",
    "ProductionVariants", "ShadowProductionVariants", "TracingConfig", "VpcConfig",
)  # fmt: skip


def create_sized_config(sm: Any, base: str, name: str, variant: str, count: int) -> None:
    """Endpoint config ``name``: the config ``base`` (the stack's shadow config) as
    DescribeEndpointConfig answers it, its shadow ``variant``'s InitialInstanceCount ``count``.

    Why a config and not a count change: UpdateEndpointWeightsAndCapacities'
    DesiredWeightAndCapacity "specifies weight and capacity values for a production variant"
    (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DesiredWeightAndCapacity.html)
    and nothing documents it for a shadow variant; a shadow test's shadow variant, once the test
    has started, takes changes to "the traffic sampling percentage" only ("Edit a shadow test",
    https://docs.aws.amazon.com/sagemaker/latest/dg/shadow-tests-view-monitor-edit-individual.html).
    An endpoint config is immutable and its variants' counts are initial values, so the shadow is
    sized once, when the stage starts, in the config the move goes to (``shadow_fleet``).

    ``name`` is derived from ``base`` and ``count`` (``names.sized_shadow_config``): a config
    of that name already there is the same copy (a tick that stopped after creating it) and is
    used as it is. DescribeEndpointConfig of a config that does not exist answers
    ValidationException ("Could not find endpoint configuration")."""
    try:
        sm.describe_endpoint_config(EndpointConfigName=name)
        return
    except ClientError as exc:
        if error_code(exc) != "ValidationException":
            raise
    described = sm.describe_endpoint_config(EndpointConfigName=base)
    copy = {k: described[k] for k in CONFIG_COPIED if k in described}
    copy["ShadowProductionVariants"] = [
        {**v, "InitialInstanceCount": count} if v["VariantName"] == variant else v
        for v in described.get("ShadowProductionVariants") or []
    ]
    sm.create_endpoint_config(EndpointConfigName=name, **copy)


def initial_weight(sm: Any, config_name: str | None, variant: str) -> float:
    """``variant``'s InitialVariantWeight in the endpoint config ``config_name``
    (DescribeEndpointConfig): the weight a variant that comes back with an UpdateEndpoint takes
    (:func:`update_endpoint`). 0 when the config has no such variant."""
    if config_name is None:
        return 0.0
    described = sm.describe_endpoint_config(EndpointConfigName=config_name)
    for v in described.get("ProductionVariants", []):
        if v["VariantName"] == variant:
            return float(v.get("InitialVariantWeight") or 0.0)
    return 0.0


def set_instances(sm: Any, endpoint: str, variant: str, count: int) -> None:
    """``variant``'s DesiredInstanceCount only, never a weight (module docstring): production
    variants only (the canary, the primary); the shadow is sized in its config
    (:func:`create_sized_config`)."""
    sm.update_endpoint_weights_and_capacities(
        EndpointName=endpoint,
        DesiredWeightsAndCapacities=[{"VariantName": variant, "DesiredInstanceCount": count}],
    )


def shadow_config_count(sm: Any, config_name: str, variant: str) -> int | None:
    """``variant``'s InitialInstanceCount among the ``ShadowProductionVariants`` of the endpoint
    config ``config_name`` (DescribeEndpointConfig): the count the stack gave the shadow, sized
    for the peak; None when the config has no such shadow variant."""
    described = sm.describe_endpoint_config(EndpointConfigName=config_name)
    for v in described.get("ShadowProductionVariants") or []:
        if v["VariantName"] == variant and v.get("InitialInstanceCount") is not None:
            return int(v["InitialInstanceCount"])
    return None


#: What SageMaker says when it refuses a change because the endpoint is being updated (FACTS.md:
#: UpdateEndpointWeightsAndCapacities is refused with ValidationException while Updating).
IN_PROGRESS = "in-progress"


def refused_for_good(exc: Exception) -> bool:
    """A ValidationException that is not "the endpoint is Updating" (:data:`IN_PROGRESS`): the
    request itself is refused (a stage move SageMaker will not take, a config it will not
    create), so asking again will not help: the stage ends at once naming AWS's message
    (``decisions``) instead of being asked again until ``rules.MAX_REFUSALS``."""
    return error_code(exc) == "ValidationException" and IN_PROGRESS not in describe_error(exc)


def scalable_bounds(aas: Any, endpoint: str, variant: str) -> tuple[int, int] | None:
    """``(MinCapacity, MaxCapacity)`` of the variant's scalable target, None when it has none
    (DescribeScalableTargets, Application Auto Scaling API reference)."""
    found = aas.describe_scalable_targets(
        ServiceNamespace="sagemaker",
        ResourceIds=[f"endpoint/{endpoint}/variant/{variant}"],
        ScalableDimension=SCALABLE_DIMENSION,
    )["ScalableTargets"]
    return (int(found[0]["MinCapacity"]), int(found[0]["MaxCapacity"])) if found else None


def set_bounds(aas: Any, endpoint: str, variant: str, low: int, high: int) -> None:
    aas.register_scalable_target(
        ServiceNamespace="sagemaker",
        ResourceId=f"endpoint/{endpoint}/variant/{variant}",
        ScalableDimension=SCALABLE_DIMENSION,
        MinCapacity=low,
        MaxCapacity=high,
    )


def variant_query(
    qid: str, endpoint: str, variant: str, metric: str, period: int, stat: str
) -> dict[str, Any]:
    """One GetMetricData query: ``stat`` of an AWS/SageMaker metric of one variant."""
    dimensions = [
        {"Name": "EndpointName", "Value": endpoint},
        {"Name": "VariantName", "Value": variant},
    ]
    return {
        "Id": qid,
        "MetricStat": {
            "Metric": {
                "Namespace": "AWS/SageMaker",
                "MetricName": metric,
                "Dimensions": dimensions,
            },
            "Period": period,
            "Stat": stat,
        },
        "ReturnData": True,
    }


def invocation_sums(
    cw: Any, endpoint: str, variants: tuple[str, ...], start: int, end: int
) -> dict[tuple[str, str], float]:
    """Sum of Invocations and Invocation5XXErrors per variant over [start, end) (epoch s)."""
    period = max(60, -(-(end - start) // 60) * 60)
    queries, keys = [], {}
    for i, variant in enumerate(variants):
        for j, metric in enumerate(("Invocations", "Invocation5XXErrors")):
            qid = f"m{i}_{j}"
            keys[qid] = (variant, metric)
            queries.append(variant_query(qid, endpoint, variant, metric, period, "Sum"))
    sums = dict.fromkeys(keys.values(), 0.0)
    for result in metric_data_results(cw, queries, start, end):
        sums[keys[result["Id"]]] += float(sum(result.get("Values", [])))
    return sums


def metric_data_results(
    cw: Any, queries: list[dict[str, Any]], start: int, end: int
) -> Iterator[dict[str, Any]]:
    """Every ``MetricDataResults`` entry of one GetMetricData request over [start, end) (epoch
    s), its pages followed (``NextToken``)."""
    kwargs: dict[str, Any] = {
        "MetricDataQueries": queries,
        "StartTime": datetime.fromtimestamp(start, UTC),
        "EndTime": datetime.fromtimestamp(end, UTC),
    }
    while True:
        page = cw.get_metric_data(**kwargs)
        yield from page.get("MetricDataResults", [])
        token = page.get("NextToken")
        if not token:
            return
        kwargs["NextToken"] = token


#: What the shadow comparison reads per minute and variant: (metric, statistic).
SHADOW_MINUTE_METRICS = (("ModelLatency", "p95"), ("InvocationsPerInstance", "Sum"))


def shadow_minutes(
    cw: Any, endpoint: str, primary: str, shadow: str, start: int, end: int
) -> dict[int, MinuteLatency]:
    """Both variants' ModelLatency p95 (ms) and InvocationsPerInstance (Sum) for each minute of
    ``[start, end]``, keyed by epoch minute; a minute missing any of the four is left out (no
    like-load judgement on it). One GetMetricData request (its pages followed), one-minute
    periods.

    ModelLatency is published per EndpointName and VariantName in microseconds (SageMaker
    developer guide, "Metrics for monitoring Amazon SageMaker AI",
    https://docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html);
    InvocationsPerInstance is "the number of invocations sent to a model, normalized by
    InstanceCount in each ProductionVariant. 1/numberOfInstances is sent as the value on each
    request" (API reference, ScalingPolicyMetric,
    https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ScalingPolicyMetric.html), so
    its one-minute Sum is the minute's requests per instance. The shadow variant has both ("Monitor
    a shadow test" charts Invocations, InvocationsPerInstance and ModelLatency for the production
    and the shadow variant,
    https://docs.aws.amazon.com/sagemaker/latest/dg/shadow-tests-view-monitor-edit-dashboard.html).
    """
    queries, keys = [], {}
    for i, variant in enumerate((primary, shadow)):
        for j, (metric, stat) in enumerate(SHADOW_MINUTE_METRICS):
            qid = f"s{i}_{j}"
            keys[qid] = (i, j)
            queries.append(variant_query(qid, endpoint, variant, metric, 60, stat))
    # per minute: [primary p95, primary per instance, shadow p95, shadow per instance]
    rows: dict[int, list[float | None]] = {}
    for result in metric_data_results(cw, queries, start, end):
        i, j = keys[result["Id"]]
        stamps, values = result.get("Timestamps", []), result.get("Values", [])
        for at, value in zip(stamps, values, strict=True):
            row = rows.setdefault(int(at.timestamp()) // 60, [None] * 4)
            row[2 * i + j] = float(value) / 1000.0 if j == 0 else float(value)
    found = {}
    for minute, row in sorted(rows.items()):
        p95_p, load_p, p95_s, load_s = row
        if p95_p is None or load_p is None or p95_s is None or load_s is None:
            continue
        found[minute] = MinuteLatency(p95_p, p95_s, load_p, load_s)
    return found


def observe(
    sm: Any,
    cw: Any,
    endpoint: str,
    alarms: tuple[str, ...],
    *,
    primary: str,
    canary: str,
) -> r.Observation:
    """One tick's view: endpoint status and config, the variants' weights and counts, the alarms
    (none read when ``alarms`` is empty: a rollback does not consult them)."""
    status, config, variants = describe(sm, endpoint)
    states = alarm_states(cw, alarms) if alarms else {}
    c, p = variants.get(canary, {}), variants.get(primary, {})
    return r.Observation(
        endpoint_status=status,
        firing=tuple(
            f"{n} ({why or 'in ALARM'})"
            for n, (st, why) in states.items()
            if st in ("ALARM", "MISSING")
        ),
        no_data=tuple(n for n, (st, _) in states.items() if st == "INSUFFICIENT_DATA"),
        canary_instances=int(c.get("CurrentInstanceCount") or 0),
        canary_weight=float(c.get("CurrentWeight") or 0.0),
        # The larger of current and desired: a primary scaling out already needs that many.
        primary_instances=max(
            int(p.get("CurrentInstanceCount") or 0), int(p.get("DesiredInstanceCount") or 0)
        ),
        primary_weight=float(p.get("CurrentWeight") or 0.0),
        endpoint_config_name=config,
        primary_in_service=int(p.get("CurrentInstanceCount") or 0),
    )


def evidence(
    cw: Any, endpoint: str, start: int, end: int, *, primary: str, canary: str
) -> r.Evidence:
    sums = invocation_sums(cw, endpoint, (canary, primary), start, end)
    return r.Evidence(
        canary_invocations=sums[(canary, "Invocations")],
        canary_errors=sums[(canary, "Invocation5XXErrors")],
        primary_invocations=sums[(primary, "Invocations")],
        primary_errors=sums[(primary, "Invocation5XXErrors")],
    )


def start_execution(sfn: Any, state_machine_arn: str, name: str, state: RolloutState) -> None:
    """Start the rollout loop at ``state``'s seq, its iteration count at 0.

    Step Functions API reference, StartExecution ``name``: a second call with the same name and
    identical input while that execution is open returns success without a new execution (so a
    retried start whose first response was lost is safe); with different input, or once it has
    closed, ExecutionAlreadyExists. Names are unique per state machine for 90 days, hence the
    rollout id as the name and timestamped or seq-numbered names for the executions that take
    over (rollback drivers, continuations)."""
    loop = {k: state[k] for k in ("endpoint_name", "rollout_id", "seq")}
    sfn.start_execution(
        stateMachineArn=state_machine_arn,
        name=name,
        input=json.dumps({**loop, "iteration": 0}, separators=(",", ":")),
    )
