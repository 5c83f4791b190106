"""SmokeGate construct: an asynchronous Provider whose waiter polls is_complete for exactly the
configured timeout, and whose functions each stop inside their own Lambda timeout.

Built from the construct's narrow props alone (a SmokeGateConfig, names), no DeploymentConfig.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk.assertions import Template

from lambdas.smoke_gate.checks import CALL_SECONDS
from lambdas.smoke_gate.handler import HANDLER_MAX_TIMEOUT_SECONDS
from stacks.constructs.smoke_gate import LAMBDA_DIR, SmokeGate
from typed_config import SmokeGateConfig

ADAPTERS = ["manga_domain", "general_support", "jp_style"]


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
    # on_event (the entry point every product function has) and is_complete share one asset.
    assert fns["handler.handler"]["Code"] == fns["handler.is_complete"]["Code"]
    assert fns["handler.handler"]["Timeout"] <= 60
    round_timeout = fns["handler.is_complete"]["Timeout"]
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
                    "USER_ON_EVENT_FUNCTION_ARN": "handler.handler",
                    "USER_IS_COMPLETE_FUNCTION_ARN": "handler.is_complete",
                }[key]
            )


def test_a_round_too_long_for_one_lambda_is_capped_at_the_lambda_maximum() -> None:
    _, template = synth(300, adapters=[f"adapter_{i}" for i in range(12)])
    assert functions_by_handler(template)["handler.is_complete"]["Timeout"] == (
        HANDLER_MAX_TIMEOUT_SECONDS
    )


def test_both_entry_points_import_with_only_the_asset_directory_on_the_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As Lambda loads the asset: its directory is the only root, no ``lambdas`` package."""
    installed = [p for p in sys.path if p.startswith(sys.base_prefix) or "site-packages" in p]
    monkeypatch.setattr(sys, "path", [str(LAMBDA_DIR), *installed])
    for name in [m for m in sys.modules if m == "lambdas" or m.startswith("lambdas.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delitem(sys.modules, "checks", raising=False)
    spec = importlib.util.spec_from_file_location("asset_handler", LAMBDA_DIR / "handler.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop("checks", None)
    assert module.handler is module.on_event and callable(module.is_complete)
    assert module.run_round.__module__ == "checks"
