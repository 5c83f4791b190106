"""CanaryController and SmokeGate synthesized in a small test stack (placeholder endpoint, two
alarms, a topic), with cdk-nag's AwsSolutions pack applied to the whole app."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Annotations, Capture, Match, Template
from cdk_nag import AwsSolutionsChecks

from sizing.fit_checks import load_config
from sizing.ready_bound import rollout_waits
from sizing.rollout_plan import rollout_capacity_plan
from stacks.constructs.canary_controller import CanaryController
from stacks.constructs.endpoint_ref import EndpointRef
from stacks.constructs.smoke_gate import SmokeGate
from tests.fixtures import config_fixture
from tools.validate import run_cfn_lint, run_checkov, templates_in
from typed_config import VARIANT_NAMES, DeploymentConfig, RolloutConfig, SmokeGateConfig

REPO = Path(__file__).resolve().parents[2]
CHECKOV = REPO / ".venv-checkov" / "bin" / "checkov"
ACCOUNT, REGION = "123456789012", "us-east-1"
EXTRA_ALARM = "canary-ttft-p90"


def build(
    app: cdk.App, stack_id: str, cfg: DeploymentConfig, rollout: RolloutConfig | None = None
) -> cdk.Stack:
    """The test stack for ``cfg``; the controller's ``rollout`` section is the default one with
    an extra alarm name unless given."""
    stack = cdk.Stack(app, stack_id, env=cdk.Environment(account=ACCOUNT, region=REGION))
    endpoint = sagemaker.CfnEndpoint(
        stack, "Endpoint", endpoint_config_name="cfg-placeholder", endpoint_name=cfg.endpoint_name
    )
    ref = EndpointRef.of(stack, cfg.endpoint_name)
    alarms = [
        cloudwatch.Alarm(stack, f"Canary{name}", metric=metric, threshold=1, evaluation_periods=1)
        for name, metric in (
            ("Invocation5XXErrors", ref.metric_invocation_5xx_errors("canary")),
            ("ModelLatency", ref.metric_model_latency("canary", "p99")),
        )
    ]
    topic = sns.Topic(
        stack,
        "Alerts",
        enforce_ssl=True,
        master_key=kms.Key(stack, "TopicKey", enable_key_rotation=True),
    )
    controller_rollout = rollout or RolloutConfig(extra_alarm_names=[EXTRA_ALARM])
    CanaryController(
        stack,
        "Canary",
        endpoint=ref,
        rollout=controller_rollout,
        waits=rollout_waits(cfg, controller_rollout),
        capacity_plan=rollout_capacity_plan(cfg),
        alarms=alarms,
        topic=topic,
    )
    SmokeGate(
        stack,
        "Smoke",
        gate=cfg.smoke_gate,
        endpoint=endpoint,
        endpoint_name=cfg.endpoint_name,
        variant_names=VARIANT_NAMES,
        adapter_names=[a.name for a in cfg.adapters],
    )
    return stack


@pytest.fixture(scope="module")
def outdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cdk.out")


@pytest.fixture(scope="module")
def stacks(outdir: Path) -> dict[str, cdk.Stack]:
    prod = load_config(config_fixture("prod"), env="prod")
    dev = load_config(config_fixture("dev"), env="dev")
    dev = dev.model_copy(update={"smoke_gate": SmokeGateConfig(enabled=False)})
    app = cdk.App(outdir=str(outdir))
    built = {"prod": build(app, "Prod", prod), "dev": build(app, "DevNoGate", dev)}
    cdk.Aspects.of(app).add(AwsSolutionsChecks())
    app.synth()
    return built


@pytest.fixture(scope="module")
def prod(stacks: dict[str, cdk.Stack]) -> Template:
    return Template.from_stack(stacks["prod"])


@pytest.fixture(scope="module")
def dev(stacks: dict[str, cdk.Stack]) -> Template:
    return Template.from_stack(stacks["dev"])


EXPECTED_SIDS = {
    "Endpoint", "Alarms", "State", "StartRollout", "Notify", "TopicKey", "CanaryScalingBounds",
    "EndpointConfigs", "Evidence", "ScalableTargets",
}  # fmt: skip


def policy_of(template: Template, role_prefix: str) -> list[dict[str, Any]]:
    """The statements of the one inline policy attached to the role whose id starts with it."""
    policies = template.find_resources("AWS::IAM::Policy")
    found = [
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in policies.values()
        if any(r["Ref"].startswith(role_prefix) for r in p["Properties"]["Roles"])
    ]
    assert len(found) == 1, f"{len(found)} policies for {role_prefix}"
    return found[0]


def arn_text(value: Any) -> str:
    return json.dumps(value)


def test_canary_role_names_endpoint_alarms_table_topic_and_machine_only(prod: Template) -> None:
    by_sid = {s.get("Sid", s["Action"] if isinstance(s["Action"], str) else s["Action"][0]): s
              for s in policy_of(prod, "CanaryRole")}  # fmt: skip
    endpoint = by_sid["Endpoint"]
    assert endpoint["Action"] == [
        "sagemaker:DescribeEndpoint",
        "sagemaker:UpdateEndpointWeightsAndCapacities",
    ]
    assert ":endpoint/mangaassist-vllm-prod" in arn_text(endpoint["Resource"])
    alarms = by_sid["Alarms"]
    assert alarms["Action"] == "cloudwatch:DescribeAlarms"
    text = arn_text(alarms["Resource"])
    assert text.count("Fn::GetAtt") == 2 and f":alarm:{EXTRA_ALARM}" in text
    assert by_sid["State"]["Action"] == ["dynamodb:GetItem", "dynamodb:PutItem"]
    assert "CanaryState" in arn_text(by_sid["State"]["Resource"])
    assert ":stateMachine:mangaassist-vllm-prod-canary-rollout" in arn_text(
        by_sid["StartRollout"]["Resource"]
    )
    assert by_sid["Notify"]["Action"] == "sns:Publish"
    assert by_sid["Notify"]["Resource"]["Ref"].startswith("Alerts")
    assert by_sid["TopicKey"]["Action"] == ["kms:GenerateDataKey", "kms:Decrypt"]
    assert by_sid["TopicKey"]["Resource"]["Fn::GetAtt"][0].startswith("TopicKey")
    bounds = by_sid["CanaryScalingBounds"]
    assert bounds["Action"] == "application-autoscaling:RegisterScalableTarget"
    assert ":application-autoscaling:" in arn_text(bounds["Resource"])
    assert "scalable-target/*" in arn_text(bounds["Resource"])
    # the ARN cannot name the endpoint's targets (a generated id): the conditions keep the
    # controller to SageMaker variant counts
    assert bounds["Condition"] == {
        "StringEquals": {
            "application-autoscaling:service-namespace": "sagemaker",
            "application-autoscaling:scalable-dimension": "sagemaker:variant:DesiredInstanceCount",
        }
    }
    assert by_sid["Evidence"] == {
        "Sid": "Evidence", "Action": "cloudwatch:GetMetricData", "Effect": "Allow", "Resource": "*"
    }  # fmt: skip
    logs = [a for sid, st in by_sid.items() if sid not in EXPECTED_SIDS for a in _actions(st)]
    assert logs and all(a.startswith("logs:") for a in logs), logs


def test_smoke_gate_role_may_only_describe_and_invoke_its_endpoint(prod: Template) -> None:
    statements = policy_of(prod, "SmokeRole")
    [sm] = [s for s in statements if "sagemaker:InvokeEndpoint" in s["Action"]]
    assert sm["Action"] == [
        "sagemaker:DescribeEndpoint",
        "sagemaker:InvokeEndpoint",
        "sagemaker:InvokeEndpointWithResponseStream",  # endpoint_ref.grant_invoke says why
    ]
    assert ":endpoint/mangaassist-vllm-prod" in arn_text(sm["Resource"])
    others = [s for s in statements if s is not sm]
    assert all(a.startswith("logs:") for s in others for a in _actions(s))


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else action


def test_no_policy_in_either_stack_grants_a_wildcard_action(prod: Template, dev: Template) -> None:
    for template in (prod, dev):
        for policy in template.find_resources("AWS::IAM::Policy").values():
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                assert not any("*" in a for a in _actions(statement)), statement


def controller_env(template: Template) -> dict[str, Any]:
    """The canary controller function's environment variables."""
    [variables] = [
        f["Properties"]["Environment"]["Variables"]
        for f in template.find_resources("AWS::Lambda::Function").values()
        if "STEPS_PERCENT" in f["Properties"].get("Environment", {}).get("Variables", {})
    ]
    return dict(variables)


def rollout_states(template: Template) -> dict[str, Any]:
    """The rollout state machine's states, ARNs replaced by "ARN"."""
    definition = Capture()
    template.has_resource_properties(
        "AWS::StepFunctions::StateMachine", {"DefinitionString": definition}
    )
    parts = definition.as_object()["Fn::Join"][1]
    states: dict[str, Any] = json.loads("".join(p if isinstance(p, str) else "ARN" for p in parts))[
        "States"
    ]
    return states


def test_functions_run_the_handlers_on_a_current_python(prod: Template) -> None:
    handlers = ["canary_controller.handler.handler", "smoke_gate.handler.handler"]
    functions = [
        f["Properties"]
        for f in prod.find_resources("AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] in handlers
    ]
    assert sorted(f["Handler"] for f in functions) == handlers
    assert {f["Runtime"] for f in functions} == {"python3.14"}
    env = controller_env(prod)
    assert json.loads(env["STEPS_PERCENT"]) == [5, 25, 50, 75, 100]
    assert (env["ENDPOINT_NAME"], env["BAKE_SECONDS"], env["CHECK_SECONDS"]) == (
        "mangaassist-vllm-prod", "3600", "300"
    )  # fmt: skip


def test_capacity_plan_and_evidence_rules_reach_the_controller(prod: Template) -> None:
    env = controller_env(prod)
    plan = json.loads(env["CAPACITY_PLAN"])
    # prod: primary 2..54 and canary 3..54 on the same instance type (same per-instance
    # capacity); the canary's own ceiling is the primary's, so no step needs more than it has
    assert plan["canary_per_primary"] == 1.0 and (plan["canary_min"], plan["canary_max"]) == (3, 54)
    assert plan["primary_max"] == 54
    assert [(s["percent"], s["min_capacity"], s["max_capacity"]) for s in plan["steps"]] == [
        (5, 3, 54), (25, 3, 54), (50, 3, 54), (75, 3, 54), (100, 3, 54)
    ]  # fmt: skip
    evidence = (
        "MIN_CANARY_INVOCATIONS",
        "MAX_ERROR_RATE_INCREASE_PERCENT",
        "EVIDENCE_TIMEOUT_SECONDS",
    )
    assert [env[k] for k in evidence] == ["100", "0.5", "3600"]


def test_state_machine_rollback_names_its_rollout_and_keeps_looping(prod: Template) -> None:
    states = rollout_states(prod)
    rollback = states["RollbackOnError"]
    assert rollback["Parameters"]["rollout_id.$"] == "$.rollout_id"
    # After the rollback call the loop goes on (its ticks finish the rollback), not to Fail.
    assert rollback["Next"] == "Done?" and rollback["Catch"][0]["Next"] == "ControllerFailed"
    assert states["Tick"]["Catch"][0]["Next"] == "RollbackOnError"


def test_state_machine_ends_on_the_statuses_the_controller_writes(prod: Template) -> None:
    from lambdas.canary_controller.rules import COMPLETED, ROLLED_BACK
    from lambdas.canary_controller.store import SUPERSEDED

    choices = rollout_states(prod)["Done?"]["Choices"]
    ends = {c["Next"]: c["StringEquals"] for c in choices if "StringEquals" in c}
    assert ends == {"Completed": COMPLETED, "Superseded": SUPERSEDED, "RolledBack": ROLLED_BACK}


def test_state_machine_loops_tick_and_bake_and_rolls_back_on_error(prod: Template) -> None:
    definition = Capture()
    prod.has_resource_properties(
        "AWS::StepFunctions::StateMachine",
        {
            "StateMachineName": "mangaassist-vllm-prod-canary-rollout",
            "DefinitionString": definition,
        },
    )
    text = arn_text(definition.as_object())
    states = ("Tick", "Bake", "RollbackOnError", "RolledBack", "Superseded", "Abandoned")
    for state in (f'\\"{name}\\"' for name in states):
        assert state in text
    assert '\\"SecondsPath\\":\\"$.wait_seconds\\"' in text
    assert '\\"ErrorEquals\\":[\\"States.TaskFailed\\",\\"States.Timeout\\"]' in text
    prod.resource_count_is("AWS::DynamoDB::Table", 1)
    prod.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "KeySchema": [{"AttributeName": "endpoint_name", "KeyType": "HASH"}],
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
        },
    )


def test_smoke_gate_runs_after_the_endpoint_with_every_adapter(prod: Template) -> None:
    [(_, resource)] = prod.find_resources("Custom::EndpointSmokeGate").items()
    endpoint_id = next(iter(prod.find_resources("AWS::SageMaker::Endpoint")))
    assert endpoint_id in resource["DependsOn"]
    props = resource["Properties"]
    assert props["EndpointName"] == "mangaassist-vllm-prod"
    assert props["EndpointConfigName"] == "cfg-placeholder"
    assert props["Variants"] == ["primary", "canary"]
    assert props["Adapters"] == ["manga_domain", "general_support", "jp_style"]
    assert props["MaxTokens"] == 16 and props["TimeoutSeconds"] == 300


def test_smoke_gate_switched_off_creates_nothing(dev: Template) -> None:
    assert dev.find_resources("Custom::EndpointSmokeGate") == {}
    functions = dev.find_resources("AWS::Lambda::Function")
    assert len(functions) == 1  # only the canary controller


def test_every_lambda_and_state_machine_log_group_keeps_a_month_with_its_checkov_reason(
    prod: Template,
) -> None:
    groups = prod.find_resources("AWS::Logs::LogGroup")
    assert len(groups) == 3  # controller, state machine, smoke gate (its Provider logs there)
    for group in groups.values():
        assert (group["Properties"]["RetentionInDays"], group["DeletionPolicy"]) == (30, "Delete")
        assert [s["id"] for s in group["Metadata"]["checkov"]["skip"]] == ["CKV_AWS_158"]


@pytest.mark.parametrize("which", ["prod", "dev"])
def test_cdk_nag_reports_nothing_unsuppressed(stacks: dict[str, cdk.Stack], which: str) -> None:
    annotations = Annotations.from_stack(stacks[which])
    findings = [
        f"{m.id}: {m.entry.data}"
        for m in annotations.find_error("*", Match.string_like_regexp("AwsSolutions-.*"))
        + annotations.find_warning("*", Match.string_like_regexp("AwsSolutions-.*"))
    ]
    assert findings == []


def test_cfn_lint_finds_nothing(stacks: dict[str, cdk.Stack], outdir: Path) -> None:
    assert run_cfn_lint(templates_in(outdir), REGION) == []


@pytest.mark.skipif(not CHECKOV.exists(), reason="run `make checkov-venv` (make test does)")
def test_checkov_finds_nothing(stacks: dict[str, cdk.Stack], outdir: Path) -> None:
    passed, failed = run_checkov(CHECKOV, templates_in(outdir))
    assert failed == [] and passed > 50


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("min_canary_invocations_per_step", 0),
        ("max_error_rate_increase_percent", -1),
        ("evidence_timeout_minutes", "soon"),
    ],
)
def test_evidence_settings_are_validated_naming_the_field(field: str, value: Any) -> None:
    import yaml

    from sizing.fit_checks import parse_config
    from typed_config import ConfigError

    raw = yaml.safe_load((config_fixture("prod")).read_text())
    raw["rollout"][field] = value
    with pytest.raises(ConfigError, match=rf"rollout\.{field}: "):
        parse_config(raw, env="prod", source=Path("prod.yaml"), base_dir=REPO / "config")
