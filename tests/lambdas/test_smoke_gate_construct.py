"""SmokeGate construct: an asynchronous Provider whose waiter polls is_complete for exactly the
configured timeout, and whose functions each stop inside their own Lambda timeout.

Built from the construct's narrow props alone (a SmokeGateConfig, names), no DeploymentConfig.
"""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk.assertions import Template

from lambdas.smoke_gate.checks import CALL_SECONDS
from lambdas.smoke_gate.handler import HANDLER_MAX_TIMEOUT_SECONDS
from stacks.constructs.smoke_gate import SmokeGate
from typed_config import SmokeGateConfig

ADAPTERS = ["manga_domain", "general_support", "jp_style"]
#: The two functions' handlers (the package, its module, the function).
ON_EVENT, IS_COMPLETE = "smoke_gate.handler.handler", "smoke_gate.handler.is_complete"


def synth(timeout: int, adapters: list[str] = ADAPTERS) -> tuple[SmokeGate, Template]:
    app = cdk.App()
    stack = cdk.Stack(app, "Gate", env=cdk.Environment(account="123456789012", region="us-east-1"))
    endpoint = sagemaker.CfnEndpoint(stack, "Endpoint", endpoint_config_name="cfg")
    gate = SmokeGate(
        stack,
        "Smoke",
        gate=SmokeGateConfig(timeout_seconds=timeout),
        endpoint=endpoint,
        endpoint_name="mangaassist-vllm-test",
        variant_names=("primary", "canary"),
        adapter_names=adapters,
    )
    return gate, Template.from_stack(stack)


def functions_by_handler(template: Template) -> dict[str, dict[str, Any]]:
    return {
        f["Properties"]["Handler"]: f["Properties"]
        for f in template.find_resources("AWS::Lambda::Function").values()
    }


def waiter_task(template: Template) -> dict[str, Any]:
    """The waiter's is_complete Task, read from the definition (tokens replaced by a marker)."""
    [machine] = template.find_resources("AWS::StepFunctions::StateMachine").values()
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    definition = json.loads("".join(p if isinstance(p, str) else "TOKEN" for p in parts))
    task: dict[str, Any] = definition["States"]["framework-isComplete-task"]
    return task


@pytest.mark.parametrize("timeout", [10, 37, 300, 840, 3000])
def test_the_waiter_polls_is_complete_for_the_configured_timeout(timeout: int) -> None:
    gate, template = synth(timeout)
    assert gate.provider is not None
    assert gate.provider.is_complete_handler is gate.is_complete_function
    [retry] = waiter_task(template)["Retry"]
    assert retry["BackoffRate"] == 1 and retry["IntervalSeconds"] <= 15
    # total_timeout: the framework waits MaxAttempts intervals before answering "timed out".
    assert retry["IntervalSeconds"] * retry["MaxAttempts"] == timeout


def test_is_complete_runs_its_own_handler_with_a_timeout_for_one_round() -> None:
    _, template = synth(300)
    fns = functions_by_handler(template)
    on_event, is_complete = fns[ON_EVENT], fns[IS_COMPLETE]
    # on_event (the entry point every product function has) and is_complete share one asset.
    assert on_event["Code"] == is_complete["Code"]
    assert on_event["Timeout"] <= 60
    round_timeout = is_complete["Timeout"]
    # Two variants x (three adapters + one streaming) = 8 calls, each at its longest.
    assert 8 * CALL_SECONDS < round_timeout < HANDLER_MAX_TIMEOUT_SECONDS
    # Both are given to the Provider: its framework functions invoke exactly these two.
    framework_env = [
        f["Environment"]["Variables"] for h, f in fns.items() if h.startswith("framework.")
    ]
    assert len(framework_env) == 3
    for env in framework_env:
        for key in ("USER_ON_EVENT_FUNCTION_ARN", "USER_IS_COMPLETE_FUNCTION_ARN"):
            [logical_id, _] = env[key]["Fn::GetAtt"]
            handler = template.to_json()["Resources"][logical_id]["Properties"]["Handler"]
            assert (
                handler
                == {
                    "USER_ON_EVENT_FUNCTION_ARN": ON_EVENT,
                    "USER_IS_COMPLETE_FUNCTION_ARN": IS_COMPLETE,
                }[key]
            )


def test_a_round_too_long_for_one_lambda_is_capped_at_the_lambda_maximum() -> None:
    _, template = synth(300, adapters=[f"adapter_{i}" for i in range(12)])
    assert functions_by_handler(template)[IS_COMPLETE]["Timeout"] == HANDLER_MAX_TIMEOUT_SECONDS
