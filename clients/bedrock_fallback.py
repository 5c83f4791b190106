"""The fallback route a client (the platform's gateway) takes to the Bedrock copy of the model when
the SageMaker endpoint answers 5xx or 429: the same chat request, sent to the imported model of
the same adapter through Bedrock Runtime's InvokeModel, answered in the same OpenAI chat form.

    route = FallbackRoute(sagemaker_runtime, bedrock_runtime, endpoint_name="mangaassist-vllm-prod",
                          bedrock_models=imported_models(s3, "s3://bucket/models/bedrock-v1/m-..."))
    answer = route.chat([{"role": "user", "content": "..."}], adapter="manga_domain",
                        max_tokens=256)
    answer.body["choices"][0]["message"]["content"], answer.served_by   # "sagemaker" | "bedrock"

    # the component shape (issue 45): one inference component per adapter, dev at zero copies
    route = FallbackRoute(sagemaker_runtime, bedrock_runtime, endpoint_name="mangaassist-vllm-dev",
                          bedrock_models=..., inference_components={
                              "base": "mangaassist-dev-base",
                              "manga_domain": "mangaassist-dev-lora-manga-domain"},
                          cold_start=ColdStart(max_wait_seconds=600))

When it falls back, and why only then (each from AWS's InvokeEndpoint API reference,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_InvokeEndpoint.html):

- ``ModelError`` (HTTP 424: "Model (owned by the customer in the container) returned 4xx or 5xx
  error code") carrying ``OriginalStatusCode`` 429 or 5xx: the product's admission hook answers
  429 when saturated and 503 while the engine restarts (container/serving/hooks.py);
- ``ServiceUnavailable`` (503), ``InternalFailure`` (500), ``ThrottlingException`` (SageMaker's
  own throttling) and ``ModelNotReadyException`` (no instance ready to serve);
- a connection or read timeout (botocore's ``ReadTimeoutError``/``ConnectTimeoutError``): the
  endpoint did not answer at all.

A client error is never retried elsewhere: ``ValidationError`` (but the cold component's,
below) and a ``ModelError`` with a 4xx
other than 429 (a bad body, an unknown adapter: 400, an over-long prompt: 413) would fail on
Bedrock too, and sending them there would only double the load of a broken client. An adapter
without a Bedrock copy (``bedrock.models`` names the imported ones) is not fallen back either:
the base model answering for an adapter would be a silent wrong answer.

Imported models take the OpenAI chat-completion body through InvokeModel (models imported after
2025-11-11: seeds 002 section 12; a public measurement found that imports refuse Converse, so
Converse is not used here). A Bedrock copy nobody calls is unloaded after a while and answers
``ModelNotReadyException`` until restored (AWS re:Post, "ModelNotReadyException" with imported
models; ~96 s measured publicly): the fallback reports that as its own failure, naming it, so a
caller knows the fallback was cold (docs/bedrock.md: keeping it warm, and what that costs).

**A cold inference component** (the component shape of issue 45, where dev scales to zero): with
``inference_components`` the route invokes one component per adapter (``InferenceComponentName``,
the adapter named by the component, not the body). AWS: "after scaling in to zero instances, your
endpoint can't respond to any incoming inference requests until it provisions at least one
instance ... the provisioning process takes several minutes. During that time, any attempts to
invoke the endpoint will produce an error"; a failed invocation counts in the
``NoCapacityInvocationFailures`` metric, whose CloudWatch alarm drives the step scaling policy that
adds the first copy (https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html).
The error is InvokeEndpoint's ``ValidationError`` (HTTP 400 in botocore's sagemaker-runtime
model) with the message "Inference Component has no capacity to process this request.
ApplicationAutoScaling may be in-progress (if configured) or try to increase the capacity by
invoking UpdateInferenceComponentRuntimeConfig API." (AWS Machine Learning Blog, "Unlock cost
savings with the new scale down to zero feature in SageMaker Inference", 2024-12). Unlike any
other ValidationError it is not the request's fault: the route (:class:`ColdStart`) retries it
with exponential backoff until the first copy serves, within a bound, then takes the Bedrock
fallback naming the cold component (or takes it at once: the default, and ``max_wait_seconds=0``).
Each retry is one more NoCapacityInvocationFailures, so the wait never holds the scale-out back.

Standard library and botocore only: it runs in whatever process calls the endpoint.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError, ConnectTimeoutError, ReadTimeoutError

#: SageMaker Runtime errors that mean "the endpoint could not serve this now" (module docstring).
UNAVAILABLE_CODES = frozenset(
    {"ServiceUnavailable", "InternalFailure", "ThrottlingException", "ModelNotReadyException"}
)
#: Where make bedrock-import records each imported model, under the release's package
#: (``<package uri>/imports/<model>.json``): written by tools/bedrock_import.py, read here.
IMPORTS_DIR = "imports"


def record_name(model: str) -> str:
    return f"{IMPORTS_DIR}/{model}.json"


#: The container answers that SageMaker wraps in ModelError: saturated, or failing.
FALLBACK_STATUSES = frozenset({429}) | frozenset(range(500, 600))


#: InvokeEndpoint's answer while an inference component has no copy (module docstring): this code
#: with a message holding :data:`NO_CAPACITY_TEXT`.
NO_CAPACITY_CODE = "ValidationError"
NO_CAPACITY_TEXT = "has no capacity to process this request"


class FallbackFailed(Exception):
    """Neither target answered; the message names why each did not. ``attempts``: the calls made
    to SageMaker; ``waited_seconds``: the backoff slept for a cold component's first copy."""

    def __init__(self, message: str, *, attempts: int = 1, waited_seconds: float = 0.0) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.waited_seconds = waited_seconds


@dataclass(frozen=True)
class Answer:
    """An OpenAI chat-completion answer and the target that served it (and why the fallback
    was taken, when it was), with the calls made to SageMaker and the backoff slept waiting for
    a cold component's first copy."""

    body: dict[str, Any]
    served_by: str
    fallback_reason: str | None = None
    attempts: int = 1
    waited_seconds: float = 0.0


@dataclass(frozen=True)
class ColdStart:
    """How long a request waits for a scaled-to-zero inference component's first copy: retries
    after ``first_delay_seconds``, each delay ``multiplier`` times the last up to
    ``max_delay_seconds``, while the delays add up to at most ``max_wait_seconds`` (the last one
    trimmed to land on it); then the fallback. ``max_wait_seconds=0``: the fallback at once.

    AWS gives no figure beyond "several minutes" for the first instance; the plan prints the
    scale-from-zero time the product assumes: set the bound from it, or from what a caller can
    wait."""

    max_wait_seconds: float
    first_delay_seconds: float = 5.0
    max_delay_seconds: float = 60.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.max_wait_seconds < 0 or self.first_delay_seconds <= 0 or self.multiplier < 1:
            raise ValueError(
                f"ColdStart needs max_wait_seconds >= 0, first_delay_seconds > 0 and "
                f"multiplier >= 1; got {self}"
            )

    def delays(self) -> Iterator[float]:
        """The sleeps between attempts; they add up to at most ``max_wait_seconds``."""
        left, delay = self.max_wait_seconds, self.first_delay_seconds
        while left > 0:
            step = min(delay, self.max_delay_seconds, left)
            yield step
            left -= step
            delay *= self.multiplier


def no_capacity(exc: Exception) -> bool:
    """True when ``exc`` is InvokeEndpoint's answer for an inference component with no copy."""
    if not isinstance(exc, ClientError):
        return False
    error = exc.response.get("Error", {})
    return error.get("Code") == NO_CAPACITY_CODE and NO_CAPACITY_TEXT in str(
        error.get("Message", "")
    )


def unavailable(exc: Exception) -> str | None:
    """Why ``exc`` from InvokeEndpoint means the endpoint cannot serve now (fall back), or None
    when it is the request's own fault (do not)."""
    if isinstance(exc, (ReadTimeoutError, ConnectTimeoutError)):
        return f"no answer from the endpoint ({type(exc).__name__})"
    if not isinstance(exc, ClientError):
        return None
    code = str(exc.response.get("Error", {}).get("Code", ""))
    if code in UNAVAILABLE_CODES:
        return f"SageMaker answered {code}"
    if code == "ModelError":
        status = exc.response.get("OriginalStatusCode")
        if isinstance(status, int) and status in FALLBACK_STATUSES:
            return f"the container answered HTTP {status}"
    return None


def chat_request(
    messages: Sequence[Mapping[str, Any]], *, max_tokens: int, temperature: float
) -> dict[str, Any]:
    return {"messages": list(messages), "max_tokens": max_tokens, "temperature": temperature}


class FallbackRoute:
    """SageMaker first; Bedrock's imported model of the same adapter on 5xx or 429, and when a
    cold inference component has no copy past the :class:`ColdStart` bound. ``sleep`` is the
    backoff's clock (injected by tests)."""

    def __init__(
        self,
        sagemaker_runtime: Any,
        bedrock_runtime: Any,
        *,
        endpoint_name: str,
        bedrock_models: Mapping[str, str],
        inference_components: Mapping[str, str] | None = None,
        cold_start: ColdStart | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.sagemaker = sagemaker_runtime
        self.bedrock = bedrock_runtime
        self.endpoint_name = endpoint_name
        #: package model name (an adapter, or "base") -> imported model ARN
        self.bedrock_models = dict(bedrock_models)
        #: the component shape: package model name (an adapter, or "base") -> its inference
        #: component (typed_config.generated_names); None: the variant shape
        self.inference_components = (
            dict(inference_components) if inference_components is not None else None
        )
        self.cold_start = cold_start or ColdStart(max_wait_seconds=0)
        self.sleep = sleep

    def _invoke(self, body: dict[str, Any], component: str | None) -> Any:
        target = {"InferenceComponentName": component} if component else {}
        return self.sagemaker.invoke_endpoint(
            EndpointName=self.endpoint_name,
            ContentType="application/json",
            Accept="application/json",
            Body=json.dumps(body).encode(),
            **target,
        )

    def _component(self, adapter: str | None) -> str | None:
        if self.inference_components is None:
            return None
        name = self.inference_components.get(adapter or "base")
        if name is None:
            raise ValueError(
                f"adapter {adapter or 'base'!r} has no inference component on endpoint "
                f"{self.endpoint_name} (components: {sorted(self.inference_components)})"
            )
        return name

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        adapter: str | None,
        max_tokens: int,
        temperature: float = 0.0,
    ) -> Answer:
        request = chat_request(messages, max_tokens=max_tokens, temperature=temperature)
        component = self._component(adapter)
        # The component names the adapter (SageMaker sends its header); the variant shape's
        # body names it.
        body = {"model": adapter, **request} if adapter and component is None else request
        delays = self.cold_start.delays()
        attempts, waited = 0, 0.0
        while True:
            attempts += 1
            try:
                resp = self._invoke(body, component)
                answer = json.loads(resp["Body"].read())
                return Answer(answer, "sagemaker", attempts=attempts, waited_seconds=waited)
            except (ClientError, ReadTimeoutError, ConnectTimeoutError) as exc:
                if no_capacity(exc):
                    delay = next(delays, None)
                    if delay is not None:
                        self.sleep(delay)
                        waited += delay
                        continue
                    reason = (
                        f"inference component {component or self.endpoint_name!r} has no copy "
                        f"(scaled to zero; SageMaker answered {NO_CAPACITY_CODE} 'no capacity')"
                        f" after {attempts} attempt(s) over {waited:g} s of backoff"
                    )
                else:
                    reason = unavailable(exc) or ""
                    if not reason:
                        raise
                arn = self.bedrock_models.get(adapter or "base")
                if arn is None:
                    raise FallbackFailed(
                        f"{reason}, and adapter {adapter or 'base'!r} has no Bedrock copy "
                        f"(imported: {sorted(self.bedrock_models)})",
                        attempts=attempts,
                        waited_seconds=waited,
                    ) from exc
                break
        try:
            resp = self.bedrock.invoke_model(
                modelId=arn,
                body=json.dumps(request).encode(),
                contentType="application/json",
                accept="application/json",
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            cold = (
                " (the Bedrock copy is cold: restoring)" if code == "ModelNotReadyException" else ""
            )
            raise FallbackFailed(
                f"{reason}; the Bedrock fallback answered {code}{cold}",
                attempts=attempts,
                waited_seconds=waited,
            ) from exc
        answer = json.loads(resp["body"].read())
        return Answer(answer, "bedrock", reason, attempts=attempts, waited_seconds=waited)


def imported_models(s3: Any, package_uri: str) -> dict[str, str]:
    """The Bedrock copies make bedrock-import recorded for one release's package
    (``<package uri>/imports/<model>.json``): package model name -> imported model ARN."""
    bucket, _, prefix = package_uri.removeprefix("s3://").partition("/")
    base = f"{prefix.rstrip('/')}/{IMPORTS_DIR}/"
    out: dict[str, str] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=base):
        for obj in page.get("Contents", []):
            if obj["Key"].endswith(".json"):
                record = json.loads(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
                out[str(record["model"])] = str(record["imported_model_arn"])
    return out
