"""The canary controller's environment, round trip: what the construct sets for a real config
(dev, prod) is what ``Settings.from_env`` reads back as that config; ``settings.EnvVar`` is the
one list of its variables, both sides use it, and ``from_env`` needs exactly the ones it calls
required.

The smoke gate's functions have no environment: their inputs are the custom resource's
properties (stacks/constructs/smoke_gate.py), so there is no contract of this kind for them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Template

from lambdas.canary_controller import rules as r
from lambdas.canary_controller.names import state_machine_name
from lambdas.canary_controller.settings import (
    ENV_DEFAULTS,
    ENV_OPTIONAL_DEADLINES,
    ENV_REQUIRED,
    EnvVar,
    Settings,
    lambda_environment,
)
from sizing.fit_checks import load_config
from sizing.ready_bound import rollout_waits
from sizing.rollout_plan import rollout_capacity_plan
from stacks.constructs.canary_controller import CanaryController
from tests.fixtures import config_fixture
from tests.lambdas.test_constructs import ACCOUNT, EXTRA_ALARM, REGION, build
from typed_config import VARIANT_NAMES, DeploymentConfig, RolloutConfig

REPO = Path(__file__).resolve().parents[2]
#: The pseudo parameters' values in the test stack's account and region.
PSEUDO = {"AWS::AccountId": ACCOUNT, "AWS::Region": REGION, "AWS::Partition": "aws"}


def deployed(value: Any) -> str:
    """An environment value as the function sees it once deployed: CloudFormation's ``Ref`` and
    ``Fn::Join`` resolved, a resource's ``Ref`` (a name only the deploy knows) as
    ``ref:<logical id>``."""
    if isinstance(value, str):
        return value
    [(function, argument)] = value.items()
    if function == "Ref":
        return PSEUDO.get(argument, f"ref:{argument}")
    if function == "Fn::Join":
        separator, parts = argument
        return str(separator).join(deployed(p) for p in parts)
    raise AssertionError(f"{function} in the controller's environment: {value}")


class Built:
    """The test stack (tests/lambdas/test_constructs.py) for one config, synthesized."""

    def __init__(self, cfg: DeploymentConfig, rollout: RolloutConfig) -> None:
        self.cfg, self.rollout = cfg, rollout
        self.stack = build(cdk.App(), "Env", cfg, rollout=rollout)
        controller = self.stack.node.find_child("Canary")
        assert isinstance(controller, CanaryController)
        self.controller = controller
        functions = Template.from_stack(self.stack).find_resources("AWS::Lambda::Function")
        [function] = [
            f["Properties"]
            for f in functions.values()
            if f["Properties"].get("FunctionName") == f"{cfg.endpoint_name}-canary-controller"
        ]
        #: The function's environment as the template sets it, in its order.
        self.variables: dict[str, Any] = function["Environment"]["Variables"]
        #: ... and as the deployed function reads it.
        self.env = {k: deployed(v) for k, v in self.variables.items()}

    def resolved(self, value: str) -> str:
        """A value of the construct's (a token, or a plain string) as deployed."""
        return deployed(self.stack.resolve(value))


def config(env: str) -> DeploymentConfig:
    return load_config(config_fixture(env), env=env)


@pytest.fixture(scope="module", params=["dev", "prod", "prod-extra-alarm"])
def built(request: pytest.FixtureRequest) -> Built:
    """dev and prod as configured; prod with an extra alarm name (both configs have none)."""
    cfg = config(str(request.param).split("-")[0])
    rollout = cfg.rollout
    if request.param == "prod-extra-alarm":
        rollout = rollout.model_copy(update={"extra_alarm_names": [EXTRA_ALARM]})
    return Built(cfg, rollout)


def test_from_env_reads_back_the_config_the_construct_was_built_for(built: Built) -> None:
    settings = Settings.from_env(built.env)
    cfg, rollout, controller = built.cfg, built.rollout, built.controller
    waits = rollout_waits(cfg, rollout)  # at the config's per-start bound (sizing.ready_bound)
    assert settings.endpoint_name == cfg.endpoint_name
    assert settings.table_name == built.resolved(controller.table.table_name)
    assert settings.table_name.startswith("ref:CanaryState")
    topic = built.stack.node.find_child("Alerts")
    assert isinstance(topic, sns.Topic)
    assert settings.topic_arn == built.resolved(topic.topic_arn)
    assert settings.topic_arn.startswith("ref:Alerts")
    assert settings.state_machine_arn == (
        f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{state_machine_name(cfg.endpoint_name)}"
    )
    alarms = tuple(built.resolved(name) for name in controller.alarm_names)
    assert settings.alarm_names == alarms
    assert len(alarms) == 2 + len(rollout.extra_alarm_names)
    assert alarms[2:] == tuple(rollout.extra_alarm_names)
    assert settings.rules == r.Rules(
        steps=tuple(rollout.steps_percent),
        bake_seconds=rollout.bake_minutes * 60,
        check_seconds=rollout.check_interval_minutes * 60,
        evidence=r.EvidenceRules(
            min_canary_invocations=rollout.min_canary_invocations_per_step,
            max_error_rate_increase_percent=rollout.max_error_rate_increase_percent,
        ),
        evidence_timeout_seconds=rollout.evidence_timeout_minutes * 60,
        plan=rollout_capacity_plan(cfg),
        capacity_timeout_seconds=waits.capacity_timeout_seconds,
        rollback_capacity_timeout_seconds=waits.rollback_capacity_timeout_seconds,
        updating_timeout_seconds=waits.updating_timeout_seconds,
    )
    # every deadline is configured: none of them falls back to "no deadline"
    assert None not in (
        settings.rules.capacity_timeout_seconds,
        settings.rules.rollback_capacity_timeout_seconds,
        settings.rules.updating_timeout_seconds,
    )
    assert (settings.primary_variant, settings.canary_variant) == VARIANT_NAMES


def test_the_construct_sets_every_variable_in_the_registrys_order(built: Built) -> None:
    assert list(built.variables) == [key.value for key in EnvVar]


def test_the_registry_splits_the_variables_into_required_and_optional() -> None:
    optional = [*ENV_DEFAULTS, *ENV_OPTIONAL_DEADLINES]
    assert len(set(optional)) == len(optional) and not set(optional) & set(ENV_REQUIRED)
    assert set(ENV_REQUIRED) | set(optional) == set(EnvVar)


def test_from_env_runs_on_the_required_variables_alone_with_the_registrys_defaults() -> None:
    env = Built(config("prod"), config("prod").rollout).env
    settings = Settings.from_env({key: env[key] for key in ENV_REQUIRED})
    assert settings.state_machine_arn == ENV_DEFAULTS[EnvVar.STATE_MACHINE_ARN] == ""
    assert (settings.primary_variant, settings.canary_variant) == (
        ENV_DEFAULTS[EnvVar.PRIMARY_VARIANT],
        ENV_DEFAULTS[EnvVar.CANARY_VARIANT],
    )
    assert settings.rules.capacity_timeout_seconds is None
    assert settings.rules.rollback_capacity_timeout_seconds is None
    assert settings.rules.updating_timeout_seconds is None
    for key in ENV_REQUIRED:
        with pytest.raises(KeyError) as missing:
            Settings.from_env({k: v for k, v in env.items() if k != key})
        assert missing.value.args == (key.value,)


def test_the_construct_cannot_leave_a_variable_out() -> None:
    values = {key: "x" for key in EnvVar if key is not EnvVar.CHECK_SECONDS}
    with pytest.raises(ValueError, match=r"lacks CHECK_SECONDS$"):
        lambda_environment(values)
    assert lambda_environment({**values, EnvVar.CHECK_SECONDS: "1"})["CHECK_SECONDS"] == "1"
