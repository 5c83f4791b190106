"""Smoke gate custom resource, driven as the Provider framework drives it: ``on_event`` once, then
``is_complete`` until it answers. moto for the endpoint, botocore Stubber for the runtime answers
(tests/lambdas/smoke_gate_stubs.py)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from lambdas.smoke_gate import handler as gate
from lambdas.smoke_gate.checks import CALL_SECONDS
from tests.lambdas.conftest import ENDPOINT, set_endpoint_status
from tests.lambdas.smoke_gate_stubs import (
    ADAPTERS,
    STARTED,
    VARIANTS,
    Runtime,
    chat,
    event,
    sse,
    started,
)


@pytest.fixture
def runtime(endpoint: str) -> Any:
    with Runtime() as rt:
        yield rt


def test_on_event_starts_the_check_and_makes_no_aws_call() -> None:
    # No moto, no stub: any AWS call would fail for want of credentials or an endpoint.
    answer = gate.on_event(event(), None, clients={"clock": lambda: STARTED})
    assert answer == {
        "PhysicalResourceId": f"smoke-gate-{ENDPOINT}",
        "Data": {"StartedAt": str(int(STARTED))},
    }


def test_every_adapter_and_streaming_answer_completes(runtime: Runtime) -> None:
    for variant in VARIANTS:
        runtime.happy(variant)
    assert runtime.run(event()) == {"IsComplete": True, "Data": {"Calls": "8"}}


def test_update_keeps_the_physical_id(runtime: Runtime) -> None:
    for variant in VARIANTS:
        runtime.happy(variant)
    ev = event("Update")
    ev["PhysicalResourceId"] = "smoke-gate-existing"
    assert started(ev)["PhysicalResourceId"] == "smoke-gate-existing"
    assert runtime.run(ev)["IsComplete"] is True


def test_not_yet_in_service_polls_again_then_completes(runtime: Runtime) -> None:
    set_endpoint_status("Updating")
    # No stubbed runtime answer yet: a smoke call now would raise.
    assert runtime.run(event(), clock=lambda: STARTED + 30) == {"IsComplete": False}
    set_endpoint_status("InService")
    for variant in VARIANTS:
        runtime.happy(variant)
    assert runtime.run(event(), clock=lambda: STARTED + 45)["IsComplete"] is True


def test_still_updating_when_the_next_poll_would_pass_the_timeout_fails(runtime: Runtime) -> None:
    set_endpoint_status("Updating")
    # TimeoutSeconds 60, query interval 15: at 46 s the next poll would come after 60 s.
    with pytest.raises(gate.SmokeGateError) as err:
        runtime.run(event(TimeoutSeconds="60"), clock=lambda: STARTED + 46)
    assert f"endpoint {ENDPOINT} is Updating, not InService on cfg-1, after 46 s" in str(err.value)
    assert runtime.run(event(TimeoutSeconds="60"), clock=lambda: STARTED + 45) == {
        "IsComplete": False
    }


def describe_failing(code: str, times: int = 1) -> Any:
    """A SageMaker client whose DescribeEndpoint answers ``code`` (the error injected into the
    AWS call itself), ``times`` times."""
    sm = boto3.client("sagemaker", region_name="us-east-1")
    stub = Stubber(sm)
    for _ in range(times):
        stub.add_client_error("describe_endpoint", service_error_code=code, http_status_code=400)
    stub.activate()
    return sm


def test_throttled_describe_endpoint_polls_again_until_the_last_poll(runtime: Runtime) -> None:
    sm = describe_failing("ThrottlingException", times=2)
    assert runtime.run(event(TimeoutSeconds="60"), sagemaker=sm, clock=lambda: STARTED + 30) == {
        "IsComplete": False
    }
    with pytest.raises(gate.SmokeGateError, match=r"DescribeEndpoint .* failed after 46 s"):
        runtime.run(event(TimeoutSeconds="60"), sagemaker=sm, clock=lambda: STARTED + 46)


def test_describe_endpoint_refused_fails_the_gate_at_once_naming_the_error(
    runtime: Runtime,
) -> None:
    sm = describe_failing("ValidationException")
    with pytest.raises(gate.SmokeGateError, match="ValidationException"):
        runtime.run(event(), sagemaker=sm, clock=lambda: STARTED + 5)


@pytest.mark.parametrize("status", ["Failed", "OutOfService", "UpdateRollbackFailed"])
def test_endpoint_that_cannot_recover_fails_before_any_call(runtime: Runtime, status: str) -> None:
    set_endpoint_status(status)
    with pytest.raises(gate.SmokeGateError, match=f"is {status}, not InService on cfg-1"):
        runtime.run(event())


def test_endpoint_back_on_the_previous_config_fails_the_deploy(runtime: Runtime) -> None:
    # moto's endpoint serves cfg-1; the deploy asked for cfg-2 and SageMaker rolled it back.
    with pytest.raises(gate.SmokeGateError) as err:
        runtime.run(event(EndpointConfigName="cfg-2"))
    assert "InService on cfg-1, not on the deployed cfg-2" in str(err.value)
    assert "rolled the deployment back" in str(err.value)


def test_failing_adapter_fails_the_deployment_naming_variant_and_adapter(runtime: Runtime) -> None:
    runtime.happy("primary")
    runtime.expect("canary", ADAPTERS[0], chat("ok", ADAPTERS[0]))
    runtime.expect("canary", ADAPTERS[1], Exception("ModelError", 400))
    runtime.expect("canary", ADAPTERS[2], chat("ok", ADAPTERS[2]))
    runtime.expect("canary", ADAPTERS[0], sse("ok"), stream=True)
    with pytest.raises(gate.SmokeGateError) as err:
        runtime.run(event())
    msg = str(err.value)
    assert msg.startswith(f"smoke gate failed 1 of 8 calls on {ENDPOINT}")
    assert "variant canary, adapter general_support: ModelError: model answered HTTP 400" in msg


def test_answer_from_the_base_model_instead_of_the_adapter_fails(runtime: Runtime) -> None:
    runtime.expect("primary", ADAPTERS[0], chat("ok", "base"))
    with pytest.raises(gate.SmokeGateError, match="answered by model 'base', not adapter"):
        runtime.run(event(Variants=["primary"], Adapters=[ADAPTERS[0]]))


def test_empty_answer_fails(runtime: Runtime) -> None:
    runtime.expect("primary", ADAPTERS[0], chat("   ", ADAPTERS[0]))
    runtime.expect("primary", ADAPTERS[0], sse("fine"), stream=True)
    with pytest.raises(gate.SmokeGateError, match="adapter manga_domain: answer is empty"):
        runtime.run(event(Variants=["primary"], Adapters=[ADAPTERS[0]]))


def test_streaming_error_event_fails(runtime: Runtime) -> None:
    runtime.expect("primary", None, chat("hello", "base"))
    err = {"ModelStreamError": {"Message": "CUDA error: out of memory", "ErrorCode": "500"}}
    runtime.expect("primary", None, sse("partial", error=err), stream=True)
    with pytest.raises(gate.SmokeGateError) as exc:
        runtime.run(event(Variants=["primary"], Adapters=[]))
    assert "variant primary, streaming, adapter base model: stream error ModelStreamError" in str(
        exc.value
    )
    assert "out of memory" in str(exc.value)


def test_stream_without_text_fails(runtime: Runtime) -> None:
    runtime.expect("primary", None, chat("hello", "base"))
    runtime.expect("primary", None, sse(), stream=True)
    with pytest.raises(gate.SmokeGateError, match="stream ended without generated text"):
        runtime.run(event(Variants=["primary"], Adapters=[]))


def test_streaming_call_rejected_fails(runtime: Runtime) -> None:
    runtime.expect("primary", None, chat("hello", "base"))
    runtime.expect("primary", None, Exception("ModelError", 503), stream=True)
    with pytest.raises(gate.SmokeGateError, match="streaming, adapter base model: ModelError: mod"):
        runtime.run(event(Variants=["primary"], Adapters=[]))


def test_delete_succeeds_at_once_without_any_aws_call() -> None:
    # No moto, no stub, no endpoint: any AWS call would fail.
    ev = event("Delete", EndpointName="does-not-exist")
    ev["PhysicalResourceId"] = "smoke-gate-x"
    answer = gate.on_event(ev)
    assert answer == {"PhysicalResourceId": "smoke-gate-x"}
    # The framework starts its waiter for a Delete too; is_complete ends it at once.
    assert gate.is_complete({**ev, **answer}) == {"IsComplete": True}


@pytest.mark.parametrize(
    ("ev", "message"),
    [
        ({"RequestType": "Create"}, "ResourceProperties missing"),
        ({"ResourceProperties": {}}, "RequestType missing"),
        (event(Variants=[]), "Variants must be a non-empty list"),
        (event(Adapters="a,b"), "Adapters must be a list"),
        (event(MaxTokens="many"), "MaxTokens and TimeoutSeconds must be integers"),
        (
            {"RequestType": "Create", "ResourceProperties": {"EndpointName": "x"}},
            "missing EndpointConfigName, Variants",
        ),
    ],
)
@pytest.mark.parametrize("step", [gate.on_event, gate.is_complete])
def test_malformed_events_are_rejected(ev: Any, message: str, step: Any) -> None:
    with pytest.raises(ValueError, match=message):
        step(ev)


def test_is_complete_without_on_event_start_is_rejected(runtime: Runtime) -> None:
    with runtime.stub, pytest.raises(ValueError, match=r"Data\.StartedAt missing"):
        gate.is_complete(event(), None, clients=runtime.clients())


class SlowRuntime:
    """Each call takes ``seconds`` on the fake clock, then answers through the stub."""

    def __init__(self, rt: Runtime, clock: list[float], seconds: float) -> None:
        self.rt, self.clock, self.seconds = rt, clock, seconds

    def invoke_endpoint(self, **kw: Any) -> Any:
        self.clock[0] += self.seconds
        return self.rt.client.invoke_endpoint(**kw)

    def invoke_endpoint_with_response_stream(self, **kw: Any) -> Any:
        self.clock[0] += self.seconds
        return self.rt.client.invoke_endpoint_with_response_stream(**kw)


def test_one_deadline_covers_every_call(runtime: Runtime) -> None:
    now = [STARTED]
    for adapter in ADAPTERS[:3]:
        runtime.expect("primary", adapter, chat("ok", adapter))
    slow = SlowRuntime(runtime, now, 25)
    with pytest.raises(gate.SmokeGateError) as err:
        runtime.run(
            event(TimeoutSeconds="60"), **{"sagemaker-runtime": slow, "clock": lambda: now[0]}
        )
    msg = str(err.value)
    # Calls at t=0, 25, 50 ran; at t=75 the 60 s deadline had passed: the other five never ran.
    assert msg.startswith(f"smoke gate failed 5 of 8 calls on {ENDPOINT}")
    assert (
        "variant primary, streaming, adapter manga_domain: not run, the gate's deadline (60 s)"
        in msg
    )
    assert "variant canary, adapter manga_domain: not run" in msg


class Context:
    def __init__(self, remaining_ms: int) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def test_a_round_never_outlives_its_lambda() -> None:
    assert gate.round_deadline(0, 840, None, 0) == 840
    # 100 s left in this invocation: the round stops starting calls one call's time before.
    assert gate.round_deadline(0, 840, Context(100_000), 0) == 100 - CALL_SECONDS


@pytest.mark.parametrize("calls", [2, 8, 13, 40])
def test_round_timeout_covers_every_call_up_to_the_lambda_maximum(calls: int) -> None:
    timeout = gate.round_timeout_seconds(calls)
    # Below the Provider framework's own 900 s, which waits for this function synchronously.
    assert timeout <= gate.HANDLER_MAX_TIMEOUT_SECONDS < 900
    assert timeout == gate.HANDLER_MAX_TIMEOUT_SECONDS or timeout > calls * CALL_SECONDS


@pytest.mark.parametrize(
    ("timeout", "interval"), [(300, 15), (840, 15), (60, 15), (10, 10), (37, 1)]
)
def test_query_interval_divides_the_gate_timeout(timeout: int, interval: int) -> None:
    # The Provider framework refuses a total timeout its query interval does not divide.
    assert gate.query_interval_seconds(timeout) == interval
