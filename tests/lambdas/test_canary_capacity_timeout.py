"""Issue 20 item 3.1: a canary short of instances (capacity or quota) no longer waits forever.

AWS behaviour relied on: UpdateEndpointWeightsAndCapacities asks SageMaker for a variant's
``DesiredInstanceCount``; the endpoint is Updating while it provisions them and InService after,
and DescribeEndpoint's ``CurrentInstanceCount`` is what serves (SageMaker API reference,
UpdateEndpointWeightsAndCapacities, DescribeEndpoint ProductionVariantSummary). An account without
the instance quota or a Region without the capacity does not provide them: the canary's
``CurrentInstanceCount`` stays below what the step asked for. Before this change the controller
asked again every check interval, holding the lock with no deadline and telling nobody.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from lambdas.canary_controller import rules as r
from lambdas.canary_controller.settings import Settings
from sizing.fit_checks import load_config, parse_config
from sizing.ready_bound import ready_bound, rollout_waits
from tests.fixtures import config_fixture
from tests.lambdas.canary_lifecycle import record, record_sent, set_rules
from tests.lambdas.conftest import (
    BAKE,
    CHECK,
    RULES,
    World,
    advance,
    canary_bounds,
    instances,
    refuse_while_updating,
    set_endpoint_status,
    to_percent,
    weights,
)
from typed_config import ConfigError, RolloutConfig
from typed_config.operations import CAPACITY_WAIT_INSTANCE_STARTS

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 1800


def never_place_instances(world: World) -> None:
    """SageMaker takes the desired count but never places the instances (no capacity, no quota):
    the canary's CurrentInstanceCount stays where it is."""
    real = world.controller.sm.update_endpoint_weights_and_capacities

    def update(**kw: Any) -> Any:
        if any("DesiredInstanceCount" in v for v in kw["DesiredWeightsAndCapacities"]):
            return {"EndpointArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint/x"}
        return real(**kw)

    world.controller.sm.update_endpoint_weights_and_capacities = update


def test_canary_short_of_capacity_rolls_back_at_the_timeout_and_names_the_shortfall(
    world: World,
) -> None:
    set_rules(world, capacity_timeout_seconds=TIMEOUT)
    sent = record_sent(world)
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    never_place_instances(world)
    world.clock.now += BAKE
    world.traffic()
    scale = world.tick("r1", result["seq"])
    assert scale["last_decision"] == "scale" and scale["target_instances"] == 2
    began = record(world)["scaling_started_at"]
    assert began == int(world.clock.now)
    seen = []
    while not scale["done"]:
        scale = advance(world, scale)
        seen.append(scale["last_decision"])
        if not scale["done"]:
            # A re-request of the same step does not move the phase's start.
            assert record(world)["scaling_started_at"] == began
            assert "capacity requested again (rollback in" in scale["last_reason"]
    assert set(seen[:-1]) == {"scale"} and world.clock.now - began >= TIMEOUT
    assert world.clock.now - began < TIMEOUT + CHECK
    end = record(world)
    assert end["status"] == "ROLLED_BACK" and end["last_decision"] == "restore"
    assert (
        "capacity shortfall: the canary has 1 of the 2 instances 25% needs"
        in end["rollback_reason"]
    )
    assert weights() == {"canary": 0.0, "primary": 100.0} and canary_bounds() == (1, 2)
    [note] = sent
    assert note["subject"].startswith(
        "[mangaassist-vllm-test] canary rolled back: capacity shortfall"
    )
    assert (
        note["status"] == "ROLLED_BACK"
        and "instance capacity or the account's quota" in (note["last_reason"])
    )
    assert world.start("r2")["status"] == "RUNNING"  # the lock is released


def test_capacity_that_comes_before_the_timeout_moves_the_weight(world: World) -> None:
    set_rules(world, capacity_timeout_seconds=TIMEOUT)
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    real = world.controller.sm.update_endpoint_weights_and_capacities
    never_place_instances(world)
    world.clock.now += BAKE
    world.traffic()
    scale = world.tick("r1", result["seq"])
    scale = advance(world, advance(world, scale))
    assert scale["last_decision"] == "scale" and scale["status"] == "RUNNING"
    world.controller.sm.update_endpoint_weights_and_capacities = real
    shifted = advance(world, advance(world, scale))
    assert shifted["last_decision"] == "shift" and weights()["canary"] == 25.0
    assert instances()["canary"] == 2 and record(world)["held_since"] is None


def test_the_deadline_also_runs_while_the_endpoint_stays_updating(world: World) -> None:
    """Instances that never arrive may keep the endpoint Updating: the deadline still applies,
    the rollback is recorded at once and retried until SageMaker takes the weight change."""
    set_rules(world, capacity_timeout_seconds=TIMEOUT)
    refuse_while_updating(world.controller.sm)
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    never_place_instances(world)
    world.clock.now += BAKE
    world.traffic()
    scale = world.tick("r1", result["seq"])
    set_endpoint_status("Updating")
    while scale["status"] == "RUNNING":
        scale = advance(world, scale)
        assert scale["last_decision"] in ("wait", "rollback")
    assert scale["status"] == "ROLLING_BACK" and "capacity shortfall" in scale["rollback_reason"]
    set_endpoint_status("InService")
    while not scale["done"]:
        scale = advance(world, scale)
    assert scale["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0


def test_without_a_timeout_setting_the_wait_has_no_deadline_as_before() -> None:
    state = {"status": "RUNNING", "phase": "scaling", "target_index": 1, "target_instances": 2,
             "scaling_started_at": 0, "step_index": 0}  # fmt: skip
    obs = r.Observation("InService", canary_instances=1, canary_weight=5, primary_weight=95)
    assert RULES.capacity_timeout_seconds is None
    later = r.decide(state, obs, RULES, 10**6, lambda a, b: r.Evidence(0, 0, 0, 0))
    assert later.kind == "scale"


# ------------------------------------------------------------------ the setting


def test_the_default_is_three_instance_starts_and_one_check() -> None:
    """Three starts at the config's per-start bound (sizing.ready_bound: the measured new-tag
    start plus a margin), each at least the slowest variant's planned new-tag start."""
    cfg = load_config(config_fixture("prod"), env="prod")
    prod = cfg.rollout
    assert prod.capacity_timeout_minutes is None  # prod.yaml leaves it to the default
    bound = ready_bound(cfg)
    assert bound.seconds >= max(s.seconds for s in bound.starts)
    starts = CAPACITY_WAIT_INSTANCE_STARTS * bound.seconds / 60
    expected = math.ceil(starts + prod.check_interval_minutes)
    assert rollout_waits(cfg).capacity_timeout_seconds == expected * 60
    set_explicitly = RolloutConfig(capacity_timeout_minutes=45)
    assert set_explicitly.capacity_timeout_seconds_for(bound.seconds) == 45 * 60


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (12, "12 is shorter than one instance start plus one check (13 min)"),
        (0, "greater than or equal to 1"),
        ("soon", "valid integer"),
    ],
)
def test_a_capacity_timeout_is_validated_naming_the_field(value: Any, says: str) -> None:
    raw = yaml.safe_load((config_fixture("prod")).read_text())
    raw["rollout"]["capacity_timeout_minutes"] = value
    with pytest.raises(ConfigError, match=r"rollout\.capacity_timeout_minutes: ") as err:
        parse_config(raw, env="prod", source=Path("prod.yaml"), base_dir=REPO / "config")
    assert says in str(err.value)


def test_the_lambda_reads_the_timeout_from_its_environment() -> None:
    env = {"ENDPOINT_NAME": "e", "TABLE_NAME": "t", "TOPIC_ARN": "arn:aws:sns:us-east-1:1:t",
           "ALARM_NAMES": "[]", "STEPS_PERCENT": "[5, 100]", "BAKE_SECONDS": "60",
           "CHECK_SECONDS": "60", "MIN_CANARY_INVOCATIONS": "1",
           "MAX_ERROR_RATE_INCREASE_PERCENT": "0.5", "EVIDENCE_TIMEOUT_SECONDS": "60",
           "CAPACITY_PLAN": RULES.plan.to_json(), "CAPACITY_TIMEOUT_SECONDS": "1740"}  # fmt: skip
    assert Settings.from_env(env).rules.capacity_timeout_seconds == 1740
