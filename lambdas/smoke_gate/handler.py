"""Deploy smoke gate: a CloudFormation custom resource behind the CDK Provider framework, as an
asynchronous provider (``on_event`` starts the check, ``is_complete`` is polled until it ends).

What it proves before ``cdk deploy`` reports success, on Create and Update: DescribeEndpoint shows
the endpoint InService on the ``EndpointConfigName`` this deploy created, then every variant
answers through every adapter and once with response streaming (checks.py). Any failed call
fails the resource with one reason listing every failed call, so CloudFormation rolls the
deployment back. On Delete it does nothing (nothing to undo; a gate must never block a teardown).

InService alone is not enough: after a blue/green auto-rollback the endpoint returns to InService
on the *previous* EndpointConfig (SageMaker developer guide, "Auto-Rollback Configuration and
Monitoring"; DescribeEndpoint's EndpointConfigName tells which config is live; terraform-provider-
aws #48997 has the same blind spot), so that case is a failure, not a pass.

How the Provider framework drives these two functions (AWS CDK ``aws-cdk-lib.custom_resources``
README, "Asynchronous Providers: isComplete" and "When there are errors", and the framework's own
code in aws-cdk-lib 2.275.0, ``custom-resources/lib/provider-framework``):

- :func:`on_event` runs once per request; what it returns (``PhysicalResourceId``, ``Data``) is
  merged into the request, and that merged event is what :func:`is_complete` receives. Here it
  validates the properties and records ``Data.StartedAt``, when the gate's timeout began.
- The framework then starts its waiter state machine (Step Functions) for *every* request type,
  Delete included: one Task calling ``is_complete`` with ``Retry`` ``IntervalSeconds`` =
  ``query_interval``, ``MaxAttempts`` = ``total_timeout / query_interval`` (synth fails unless
  that divides exactly), ``BackoffRate`` 1, and a ``Catch`` that answers CloudFormation FAILED
  "Operation timed out" when the attempts run out.
- ``{"IsComplete": False}`` asks to be called again after ``query_interval`` (``Data`` is not
  allowed then); ``{"IsComplete": True, "Data": ...}`` answers SUCCESS with ``Data`` merged with
  on_event's; raising (or the function timing out) answers FAILED at once with the error message,
  which CloudFormation shows as the reason and which rolls the deployment back.
- ``total_timeout`` is at most 1 hour (``ProviderProps.totalTimeout``), and a custom resource
  waits at most ``ServiceTimeout`` (1 to 3600 s, default 3600; ``CfnCustomResource``).

So the gate's timeout (``TimeoutSeconds``, the config's ``smoke_gate.timeout_seconds``) is no
longer tied to one Lambda's 900 s: each ``is_complete`` call does one bounded round (one
DescribeEndpoint, then, once in service, every smoke call with its own connect/read timeout and
no retry), and its Lambda timeout (:func:`round_timeout_seconds`) covers one round. The gate keeps
one deadline, ``StartedAt + TimeoutSeconds``: it reports an endpoint still not in service when
the next poll would pass it, with the endpoint's status (clearer than the framework's "Operation
timed out", which stays the backstop), and a call not started before it as a failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from .checks import CALL_SECONDS, RUNTIME_CONFIG, call_count, run_round

REQUIRED = (
    "EndpointName",
    "EndpointConfigName",
    "Variants",
    "Prompt",
    "MaxTokens",
    "TimeoutSeconds",
)
#: The longest wait between two ``is_complete`` calls (the waiter's query interval).
POLL_SECONDS = 15
#: One ``is_complete`` call beyond its smoke calls: cold start, DescribeEndpoint, the answer.
ROUND_MARGIN_SECONDS = 30
#: A user handler's longest timeout: the framework's functions invoke it synchronously and stop
#: at Lambda's 900 s maximum, so the CDK README ("Timeouts") says to stay within 14 minutes.
HANDLER_MAX_TIMEOUT_SECONDS = 840
#: DescribeEndpoint ``EndpointStatus`` values from which the endpoint will not reach InService on
#: its own (DescribeEndpoint API reference, EndpointStatus).
DEAD_STATUSES = ("Failed", "OutOfService", "Deleting", "UpdateRollbackFailed")
#: DescribeEndpoint errors worth another poll: throttling and service-side faults, which the SDK
#: already retried. The boto3 guide "Retries" (docs.aws.amazon.com/boto3/latest/guide/retries.html)
#: lists Throttling, ThrottlingException and RequestLimitExceeded among the throttling errors its
#: standard mode retries, and HTTP 500/502/503/504 as transient (InternalFailure and
#: ServiceUnavailable are the 500 and 503 codes). Anything else (e.g. a ValidationException for an
#: endpoint that does not exist) fails the gate at once.
TRANSIENT_ERRORS = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "InternalFailure",
        "ServiceUnavailable",
    }
)


class SmokeGateError(RuntimeError):
    """The endpoint failed the smoke test; the message is CloudFormation's failure reason."""


def query_interval_seconds(timeout_seconds: int) -> int:
    """The longest interval up to :data:`POLL_SECONDS` that divides the gate's timeout exactly:
    the Provider framework refuses a total timeout its query interval does not divide."""
    return max(d for d in range(1, POLL_SECONDS + 1) if timeout_seconds % d == 0)


def round_timeout_seconds(calls: int) -> int:
    """The ``is_complete`` Lambda's timeout: one round of ``calls`` smoke calls at their longest,
    plus a margin, within :data:`HANDLER_MAX_TIMEOUT_SECONDS` (the round's deadline then stops
    starting calls early enough for the last one to finish, see :func:`round_deadline`)."""
    return min(calls * CALL_SECONDS + ROUND_MARGIN_SECONDS, HANDLER_MAX_TIMEOUT_SECONDS)


def parse_properties(event: Any) -> dict[str, Any]:
    """Validate the custom resource event; CloudFormation passes every scalar as a string."""
    if not isinstance(event, dict) or event.get("RequestType") not in (
        "Create",
        "Update",
        "Delete",
    ):
        raise ValueError("not a CloudFormation custom resource event (RequestType missing)")
    props = event.get("ResourceProperties")
    if not isinstance(props, dict):
        raise ValueError("ResourceProperties missing")
    missing = [k for k in REQUIRED if k not in props]
    if missing:
        raise ValueError(f"ResourceProperties missing {', '.join(missing)}")
    variants, adapters = props["Variants"], props.get("Adapters", [])
    if (
        not isinstance(variants, list)
        or not variants
        or not all(isinstance(v, str) for v in variants)
    ):
        raise ValueError(f"Variants must be a non-empty list of names; got {variants!r}")
    if not isinstance(adapters, list) or not all(isinstance(a, str) for a in adapters):
        raise ValueError(f"Adapters must be a list of names; got {adapters!r}")
    try:
        max_tokens, timeout = int(props["MaxTokens"]), int(props["TimeoutSeconds"])
    except (TypeError, ValueError):
        raise ValueError("MaxTokens and TimeoutSeconds must be integers") from None
    return {
        "endpoint": str(props["EndpointName"]),
        "config": str(props["EndpointConfigName"]),
        "variants": variants,
        "adapters": adapters,
        "prompt": str(props["Prompt"]),
        "max_tokens": max_tokens,
        "timeout": timeout,
    }


def on_event(
    event: Any, context: Any = None, clients: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Start the check: validate the event, keep the physical id, record when the timeout began.
    Makes no AWS call; the Provider framework calls :func:`is_complete` next."""
    props = parse_properties(event)
    physical_id = event.get("PhysicalResourceId") or f"smoke-gate-{props['endpoint']}"
    if event["RequestType"] == "Delete":
        print(f"Delete: nothing to do for {physical_id}")
        return {"PhysicalResourceId": physical_id}
    clock = (clients or {}).get("clock") or time.time
    print(f"{event['RequestType']}: checking {props['endpoint']} on {props['config']}")
    return {"PhysicalResourceId": physical_id, "Data": {"StartedAt": str(int(clock()))}}


#: The Lambda entry point (``smoke_gate.handler.handler``: each product function runs its
#: package's ``handler.handler``, stacks/constructs/python_lambda.py).
handler = on_event


def started_at(event: dict[str, Any]) -> float:
    """``Data.StartedAt`` from :func:`on_event`, merged into this event by the framework."""
    try:
        return float(event["Data"]["StartedAt"])
    except (KeyError, TypeError, ValueError):
        raise ValueError("Data.StartedAt missing: on_event did not start this check") from None


def endpoint_in_service(sm: Any, props: dict[str, Any], waited: float) -> bool:
    """One DescribeEndpoint: True when InService on the deployed config, False while it may still
    get there within the timeout; raises when it cannot (another config live, a dead status,
    or the timeout reached)."""
    endpoint, wanted = props["endpoint"], props["config"]
    last_poll = waited + query_interval_seconds(props["timeout"]) > props["timeout"]
    try:
        desc = sm.describe_endpoint(EndpointName=endpoint)
    except (ClientError, BotoCoreError) as exc:
        code = exc.response["Error"]["Code"] if isinstance(exc, ClientError) else ""
        if code in TRANSIENT_ERRORS and not last_poll:
            print(f"DescribeEndpoint {endpoint}: {exc}; polling again")
            return False
        raise SmokeGateError(
            f"DescribeEndpoint {endpoint} failed after {int(waited)} s of the gate's "
            f"{props['timeout']} s: {exc}"
        ) from None
    status, live = desc["EndpointStatus"], desc.get("EndpointConfigName")
    if status == "InService" and live != wanted:
        raise SmokeGateError(
            f"endpoint {endpoint} is InService on {live}, not on the deployed {wanted}: "
            "SageMaker rolled the deployment back (an auto-rollback alarm fired during the "
            "blue/green update); see the endpoint's events and the rollback alarms"
        )
    if status == "InService":
        return True
    if status in DEAD_STATUSES or last_poll:
        reason = desc.get("FailureReason", "")
        raise SmokeGateError(
            f"endpoint {endpoint} is {status}, not InService on {wanted}, after {int(waited)} s "
            f"of the gate's {props['timeout']} s. {reason}".strip()
        )
    print(f"endpoint {endpoint} is {status} after {int(waited)} s; polling again")
    return False


def round_deadline(started: float, timeout: int, context: Any, now: float) -> float:
    """The gate's deadline, but never past this Lambda's remaining time minus one call."""
    deadline = started + timeout
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):
        remaining = context.get_remaining_time_in_millis() / 1000
        deadline = min(deadline, now + remaining - CALL_SECONDS)
    return deadline


def is_complete(
    event: Any, context: Any = None, clients: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One bounded round: not in service yet -> ``IsComplete`` False; in service on the deployed
    config and every call answered -> True with ``Data.Calls``; anything definite -> raise."""
    props = parse_properties(event)
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    clients = clients or {}
    clock: Callable[[], float] = clients.get("clock") or time.time
    started = started_at(event)
    sm = clients.get("sagemaker") or boto3.client("sagemaker")
    if not endpoint_in_service(sm, props, clock() - started):
        return {"IsComplete": False}
    runtime = clients.get("sagemaker-runtime") or boto3.client(
        "sagemaker-runtime", config=RUNTIME_CONFIG
    )
    deadline = round_deadline(started, props["timeout"], context, clock())
    failures = run_round(props, runtime, deadline=deadline, clock=clock)
    calls = call_count(len(props["variants"]), len(props["adapters"]))
    if failures:
        reason = (
            f"smoke gate failed {len(failures)} of {calls} calls on {props['endpoint']}: "
            + " | ".join(failures)
        )
        print(reason)
        raise SmokeGateError(reason[:3500])
    print(f"smoke gate passed: {calls} calls on {props['endpoint']}")
    return {"IsComplete": True, "Data": {"Calls": str(calls)}}
