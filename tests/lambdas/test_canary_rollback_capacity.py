"""Issue 20 item 4: a rollback gives the primary its capacity back before the canary's weight moves.

While the canary carried 75-100 % of the traffic, the primary's autoscaling sized it to its small
share. Before this change a rollback set the canary's weight to 0 at once: all the traffic on a
primary with a fraction of the instances it needs, exactly during an incident.

AWS behaviour relied on: RegisterScalableTarget on an existing target "changes the resource's
current capacity to a value that is inside of this range", and on a resource without one it
registers a new target (Application Auto Scaling API reference, RegisterScalableTarget), hence the
DescribeScalableTargets first; UpdateEndpointWeightsAndCapacities asks SageMaker for a variant's
``DesiredInstanceCount``, the endpoint is Updating while it provisions them and InService after,
and DescribeEndpoint's ``CurrentInstanceCount`` is what serves (SageMaker API reference).
SageMaker refuses a weight change while the endpoint is Updating (ValidationException).

Each test runs the controller against moto and asserts the end state: the record's status and
last decision, the weights and both variants' bounds, and the SNS subject and body.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import boto3
import pytest
from aws_cdk.assertions import Template
from botocore.exceptions import ClientError, EndpointConnectionError

from lambdas.canary_controller import rules as r
from lambdas.canary_controller.settings import Settings
from sizing.fit_checks import load_config
from sizing.ready_bound import ready_seconds, rollout_waits
from sizing.rollout_plan import build_plan
from tests.fixtures import config_fixture
from tests.lambdas.canary_lifecycle import record, record_sent, set_rules
from tests.lambdas.conftest import (
    CHECK,
    ENDPOINT,
    PLAN,
    REGION,
    RULES,
    World,
    _backend,
    advance,
    canary_bounds,
    instances,
    race,
    set_alarm,
    to_percent,
    validation_error,
    weights,
)
from tests.lambdas.test_constructs import build, controller_env, policy_of
from typed_config.operations import ROLLBACK_CAPACITY_WAIT_INSTANCE_STARTS

REPO = Path(__file__).resolve().parents[2]
#: A rollback capacity timeout for the rule tests (13 min: one 465 s start plus a 5-minute check).
#: What a config gets is checked against its per-start bound below (sizing.ready_bound).
TIMEOUT = 780
PRIMARY = f"endpoint/{ENDPOINT}/variant/primary"
#: The primary's configured bounds in the test world's plan (primary 2..8).
PRIMARY_BOUNDS = (2, 8)


# ------------------------------------------------------------------ the world around it


def primary_bounds() -> tuple[int, int] | None:
    aas = boto3.client("application-autoscaling", region_name=REGION)
    found = aas.describe_scalable_targets(ServiceNamespace="sagemaker", ResourceIds=[PRIMARY])[
        "ScalableTargets"
    ]
    return (found[0]["MinCapacity"], found[0]["MaxCapacity"]) if found else None


def register_primary(low: int, high: int) -> None:
    """The primary's scalable target, as the stack (or a scheduled action) sets it."""
    boto3.client("application-autoscaling", region_name=REGION).register_scalable_target(
        ServiceNamespace="sagemaker", ResourceId=PRIMARY,
        ScalableDimension="sagemaker:variant:DesiredInstanceCount",
        MinCapacity=low, MaxCapacity=high,
    )  # fmt: skip


def scale_primary_in(count: int) -> None:
    """The primary's autoscaling took it down to ``count`` while the canary carried the traffic."""
    boto3.client("sagemaker", region_name=REGION).update_endpoint_weights_and_capacities(
        EndpointName=ENDPOINT,
        DesiredWeightsAndCapacities=[{"VariantName": "primary", "DesiredInstanceCount": count}],
    )


class SlowPrimary:
    """SageMaker as it provisions the primary: it takes the desired count (DesiredInstanceCount
    moves, the endpoint is Updating) and the instances serve (CurrentInstanceCount, InService)
    only at :meth:`place`. ``updating=False``: the instances never come and the endpoint stays
    InService (capacity or quota: SageMaker cannot place them). A weight change while Updating is
    refused, as SageMaker does; each accepted one records the primary's instances in service."""

    def __init__(self, world: World, *, updating: bool = True) -> None:
        self.requests: list[int] = []
        self.weights_at: list[tuple[dict[str, float], int, str]] = []
        self.updating = updating
        sm = world.controller.sm
        real = sm.update_endpoint_weights_and_capacities

        def update(**kw: Any) -> Any:
            endpoint = _backend().endpoints[ENDPOINT]
            if endpoint.endpoint_status != "InService":
                raise validation_error()
            items = kw["DesiredWeightsAndCapacities"]
            asked = [
                v for v in items if v["VariantName"] == "primary" and "DesiredInstanceCount" in v
            ]
            if asked:
                self.requests.append(asked[0]["DesiredInstanceCount"])
                self._variant()["DesiredInstanceCount"] = asked[0]["DesiredInstanceCount"]
                if self.updating:
                    endpoint.endpoint_status = "Updating"
                return {"EndpointArn": endpoint.arn}
            if any("DesiredWeight" in v for v in items):
                moved = {v["VariantName"]: v["DesiredWeight"] for v in items}
                self.weights_at.append((moved, instances()["primary"], endpoint.endpoint_status))
            return real(**kw)

        sm.update_endpoint_weights_and_capacities = update

    @staticmethod
    def _variant() -> dict[str, Any]:
        endpoint = _backend().endpoints[ENDPOINT]
        [variant] = [v for v in endpoint.production_variants if v["VariantName"] == "primary"]
        return variant  # type: ignore[no-any-return]

    def place(self) -> None:
        """The instances are up: they serve, the endpoint is InService."""
        variant = self._variant()
        variant["CurrentInstanceCount"] = variant["DesiredInstanceCount"]
        _backend().endpoints[ENDPOINT].endpoint_status = "InService"


def at_full_canary(world: World) -> dict[str, Any]:
    """A rollout at 100 % (canary 8), the primary scaled in to 2 of its 2..8."""
    set_rules(world, rollback_capacity_timeout_seconds=TIMEOUT)
    register_primary(*PRIMARY_BOUNDS)
    world.start()
    result = to_percent(world, world.tick("r1", 0), 100)
    scale_primary_in(2)
    assert instances() == {"primary": 2, "canary": 8}
    assert weights() == {"canary": 100.0, "primary": 0.0}
    return result


def operator_rollback(world: World) -> dict[str, Any]:
    return world.run(
        {"action": "rollback", "endpoint_name": ENDPOINT, "reason": "bad answers",
         "requested_by": "bob"}
    )  # fmt: skip


# ------------------------------------------------------------------ the controller


def test_a_rollback_at_100_raises_the_scaled_in_primary_first_and_moves_the_weight_once_it_serves(
    world: World,
) -> None:
    at_full_canary(world)
    sent = record_sent(world)
    slow = SlowPrimary(world)
    rolling = operator_rollback(world)
    began = int(world.clock.now)
    # Capacity first: the primary's minimum raised to its full share's 8, its count asked for.
    assert rolling["status"] == "ROLLING_BACK" and rolling["last_decision"] == "raise-primary"
    assert "the primary has 2 of the 8 instances its full share needs" in rolling["last_reason"]
    assert primary_bounds() == (8, 8) and slow.requests == [8]
    assert weights() == {"canary": 100.0, "primary": 0.0} and slow.weights_at == []
    state = record(world)
    assert state["primary_need"] == 8 and state["primary_requested_at"] == began
    assert state["primary_bounds"] == {"before": [2, 8], "set": [8, 8]}
    assert rolling["execution"].startswith("r1-rb-")  # an operator's rollback gets its driver
    # The instances are provisioning: the endpoint is Updating, the weight stays.
    for _ in range(2):
        rolling = advance(world, rolling)
        assert rolling["status"] == "ROLLING_BACK" and rolling["last_decision"] == "raise-primary"
        assert weights() == {"canary": 100.0, "primary": 0.0} and instances()["primary"] == 2
        assert "at the latest in" in rolling["last_reason"]
    assert slow.requests == [8]  # the desired count already covers the need: not asked again
    assert record(world)["primary_requested_at"] == began
    slow.place()
    moved = advance(world, rolling)
    assert moved["status"] == "ROLLING_BACK" and moved["last_decision"] == "reapply"
    assert weights() == {"canary": 0.0, "primary": 100.0}
    # The weight moved once, with the primary's 8 instances InService.
    assert slow.weights_at == [({"canary": 0.0, "primary": 100.0}, 8, "InService")]
    done = advance(world, moved)
    end = record(world)
    assert done["status"] == end["status"] == "ROLLED_BACK" and end["last_decision"] == "restore"
    assert end["primary_shortfall"] is None
    assert canary_bounds() == (PLAN.canary_min, PLAN.canary_max)
    assert primary_bounds() == PRIMARY_BOUNDS  # the raised minimum restored
    assert "the primary's bounds back to 2..8" in end["last_reason"]
    [note] = sent
    assert note["subject"] == f"[{ENDPOINT}] canary rolled back: bad answers (by bob)"
    assert note["status"] == "ROLLED_BACK"
    assert (
        "the primary is InService with 8 of the 8 instances it needed" in (note["primary_capacity"])
    )
    assert world.start("r2")["status"] == "RUNNING"  # the lock is released


def test_primary_capacity_that_never_comes_moves_the_weight_at_the_timeout_and_says_so(
    world: World,
) -> None:
    result = at_full_canary(world)
    sent = record_sent(world)
    slow = SlowPrimary(world, updating=False)
    set_alarm("canary-5xx", "ALARM", "5XX burst")
    rolling = advance(world, result)  # an alarm rollback takes the same path
    began = int(world.clock.now)
    assert rolling["status"] == "ROLLING_BACK" and rolling["last_decision"] == "raise-primary"
    assert primary_bounds() == (8, 8) and weights()["canary"] == 100.0
    seen = []
    while rolling["last_decision"] == "raise-primary":
        assert weights()["canary"] == 100.0
        rolling = advance(world, rolling)
        seen.append(int(world.clock.now) - began)
    # Ticks every check, the last one at the deadline itself: the weight moves then.
    assert seen == [CHECK, 2 * CHECK, TIMEOUT] and rolling["last_decision"] == "reapply"
    assert weights() == {"canary": 0.0, "primary": 100.0} and instances()["primary"] == 2
    # SageMaker took the desired count: it is not asked for again.
    assert slow.requests == [8]
    while not rolling["done"]:
        rolling = advance(world, rolling)
    end = record(world)
    assert end["status"] == "ROLLED_BACK" and end["last_decision"] == "restore"
    assert end["primary_shortfall"] == [2, 8]
    assert canary_bounds() == (PLAN.canary_min, PLAN.canary_max)
    assert primary_bounds() == PRIMARY_BOUNDS
    [note] = sent
    assert note["subject"].startswith(
        f"[{ENDPOINT}] canary rolled back, primary had 2 of 8 needed: alarm: canary-5xx"
    )
    assert len(note["subject"]) <= 100
    assert (
        f"the primary had 2 of the 8 instances it needed {TIMEOUT}s after they were requested "
        f"(rollback capacity timeout {TIMEOUT}s): the canary's weight moves anyway"
        in note["primary_capacity"]
    )
    assert "alarm: canary-5xx (5XX burst)" in note["rollback_reason"]


def test_a_primary_that_already_has_its_instances_moves_the_weight_at_once(world: World) -> None:
    set_rules(world, rollback_capacity_timeout_seconds=TIMEOUT)
    register_primary(*PRIMARY_BOUNDS)
    sent = record_sent(world)
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    assert instances() == {"primary": 4, "canary": 1}
    slow = SlowPrimary(world)
    aas, registered = world.controller.aas, []
    real = aas.register_scalable_target
    aas.register_scalable_target = lambda **kw: (registered.append(kw["ResourceId"]), real(**kw))[1]
    set_alarm("canary-5xx", "ALARM", "5XX burst")
    world.clock.now += CHECK
    rolled = world.tick("r1", result["seq"])
    # Primary 4 at 95 %: its full share is 4.2 instances, within its headroom: no wait.
    end = record(world)
    assert rolled["status"] == end["status"] == "ROLLED_BACK" and end["last_decision"] == "restore"
    assert weights() == {"canary": 0.0, "primary": 100.0}
    assert slow.requests == [] and registered == [f"endpoint/{ENDPOINT}/variant/canary"]
    assert primary_bounds() == PRIMARY_BOUNDS and "primary_need" not in end
    assert end["primary_shortfall"] is None
    [note] = sent
    assert note["subject"].startswith(f"[{ENDPOINT}] canary rolled back: alarm: canary-5xx")
    assert (
        "the primary already had 4 instances, 4 needed for its full share"
        in (note["primary_capacity"])
    )


def _refused(code: str, status: int) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": "not now"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "RegisterScalableTarget",
    )


@pytest.mark.parametrize(
    ("call", "failure", "says"),
    [
        ("register_scalable_target", _refused("AccessDeniedException", 400), "AccessDenied"),
        ("register_scalable_target", _refused("ConcurrentUpdateException", 400), "Concurrent"),
        (
            "describe_scalable_targets",
            EndpointConnectionError(endpoint_url="https://application-autoscaling.amazonaws.com"),
            "EndpointConnectionError",
        ),
    ],
    ids=["denied", "refused", "no-answer"],
)
def test_a_failed_primary_capacity_call_moves_the_weight_at_once_and_says_so(
    world: World, call: str, failure: Exception, says: str
) -> None:
    at_full_canary(world)
    sent = record_sent(world)
    slow = SlowPrimary(world)
    aas = world.controller.aas
    real = getattr(aas, call)

    def fails(**kw: Any) -> Any:
        if PRIMARY in (kw.get("ResourceId"), *kw.get("ResourceIds", [])):
            raise failure
        return real(**kw)

    setattr(aas, call, fails)
    rolled = operator_rollback(world)
    end = record(world)
    # Availability first: the weight moved in the same call, the primary as it was.
    assert rolled["status"] == end["status"] == "ROLLED_BACK" and end["last_decision"] == "restore"
    assert weights() == {"canary": 0.0, "primary": 100.0} and instances()["primary"] == 2
    assert slow.requests == [] and primary_bounds() == PRIMARY_BOUNDS
    assert canary_bounds() == (PLAN.canary_min, PLAN.canary_max)
    assert says in end["primary_raise_failed"] and end["primary_shortfall"] == [2, 8]
    [note] = sent
    assert note["subject"] == (
        f"[{ENDPOINT}] canary rolled back, primary had 2 of 8 needed: bad answers (by bob)"
    )
    assert "the primary's capacity could not be raised" in note["primary_capacity"]
    assert says in note["primary_capacity"]
    assert "the primary had 2 of the 8 instances it needed" in note["primary_capacity"]


def test_bounds_a_schedule_set_during_the_wait_are_left_as_it_set_them(world: World) -> None:
    at_full_canary(world)
    slow = SlowPrimary(world)
    rolling = operator_rollback(world)
    assert primary_bounds() == (8, 8)
    register_primary(5, 8)  # the evening's scheduled action fires while the rollback waits
    slow.place()
    while not rolling["done"]:
        rolling = advance(world, rolling)
    end = record(world)
    assert end["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0
    assert primary_bounds() == (5, 8)
    assert (
        "the primary's bounds left at 5..8: changed since the rollback set 8..8"
        in (end["last_reason"])
    )


def test_a_raise_racing_a_concurrent_tick_is_recorded_before_it_is_made(world: World) -> None:
    """The operator's rollback and the rollout's tick on the same record: the raise is written
    before RegisterScalableTarget, so the one whose write is lost raises nothing, and the bounds
    recorded as found are the ones from before any raise (put back at the end)."""
    at_full_canary(world)
    slow = SlowPrimary(world)
    # Just before the rollback's second write (its raise): the rollout's tick, on the
    # ROLLING_BACK record the rollback wrote first.
    race(world, 2, lambda: world.tick("r1", record(world)["seq"]))
    rolling = operator_rollback(world)
    state = record(world)
    assert state["primary_bounds"] == {"before": [2, 8], "set": [8, 8]}
    assert primary_bounds() == (8, 8) and slow.requests == [8]
    slow.place()
    while not rolling["done"]:
        rolling = advance(world, rolling)
    assert record(world)["status"] == "ROLLED_BACK" and primary_bounds() == PRIMARY_BOUNDS


def test_a_refused_desired_count_is_asked_for_again_and_the_raised_minimum_holds(
    world: World,
) -> None:
    """The primary's count refused while Updating (autoscaling busy): the next tick asks again."""
    at_full_canary(world)
    slow = SlowPrimary(world)
    _backend().endpoints[ENDPOINT].endpoint_status = "Updating"
    rolling = operator_rollback(world)
    assert rolling["last_decision"] == "raise-primary" and slow.requests == []
    assert "desired count not set (ValidationException" in rolling["last_reason"]
    assert primary_bounds() == (8, 8)  # RegisterScalableTarget is not refused while Updating
    _backend().endpoints[ENDPOINT].endpoint_status = "InService"
    rolling = advance(world, rolling)
    assert rolling["last_decision"] == "raise-primary" and slow.requests == [8]
    slow.place()
    while not rolling["done"]:
        rolling = advance(world, rolling)
    assert rolling["status"] == "ROLLED_BACK" and slow.weights_at[0][1:] == (8, "InService")


def test_without_the_setting_the_weight_moves_at_once_as_before(world: World) -> None:
    """Settings that predate it (no ROLLBACK_CAPACITY_TIMEOUT_SECONDS): no capacity step."""
    register_primary(*PRIMARY_BOUNDS)
    world.start()
    to_percent(world, world.tick("r1", 0), 100)
    scale_primary_in(2)
    assert world.controller.s.rules.rollback_capacity_timeout_seconds is None
    rolled = operator_rollback(world)
    assert rolled["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0
    assert primary_bounds() == PRIMARY_BOUNDS and "primary_capacity" not in record(world)


# ------------------------------------------------------------------ the rules


@pytest.mark.parametrize(
    ("primary", "weights_", "canary", "expected"),
    [
        (2, (0, 100), 8, 8),  # 2 + 8 = 10, the primary's configured maximum 8
        (2, (25, 75), 6, 8),  # 2 + 6 = 8 (= 2 / 25 %)
        (4, (50, 50), 3, 7),  # 4 + 3 = 7, below 4 / 50 % = 8
        (4, (95, 5), 1, 4),  # 4 / 95 % = 4.2: the canary's floor is not demand; nearest, not up
        (3, (75, 25), 2, 4),  # 3 / 75 % = 4, below 3 + 2
        (2, (0, 100), 0, 2),  # nothing to add
    ],
)
def test_the_primarys_need_is_the_demand_of_its_full_share(
    primary: int, weights_: tuple[float, float], canary: int, expected: int
) -> None:
    got = r.primary_instances_needed(
        PLAN, primary_instances=primary, primary_weight=weights_[0],
        canary_instances=canary, canary_weight=weights_[1],
    )  # fmt: skip
    assert got == expected


def test_a_canary_of_another_type_converts_back_to_primary_instances() -> None:
    plan = build_plan(
        [5, 100], primary_min=2, primary_max=8, canary_min=1, canary_max=2,
        primary_concurrency=80, canary_concurrency=40,
    )  # fmt: skip
    # 6 canary instances serve what 3 primary ones do.
    got = r.primary_instances_needed(
        plan, primary_instances=2, primary_weight=0, canary_instances=6, canary_weight=100
    )
    assert got == 5


@pytest.mark.parametrize(
    ("need", "live", "expected"),
    [
        (8, (2, 8), (8, 8)),
        (8, (2, 6), (8, 8)),  # MaxCapacity at least the need
        (4, (5, 8), None),  # a minimum already that high is never lowered
        (8, None, None),  # no target: registering would create one
    ],
)
def test_the_primarys_raised_bounds(
    need: int, live: tuple[int, int] | None, expected: tuple[int, int] | None
) -> None:
    assert r.primary_raise_bounds(need, live) == expected


def test_the_primarys_bounds_come_back_only_if_still_the_rollbacks() -> None:
    recorded = {"before": [2, 6], "set": [8, 8]}
    assert r.primary_restore_bounds(recorded, (8, 8))[0] == (2, 6)
    assert r.primary_restore_bounds(recorded, (5, 8))[0] is None
    assert r.primary_restore_bounds({"before": None, "set": None}, None) == (None, "")
    assert r.primary_restore_bounds(None, (2, 8)) == (None, "")


def test_the_wait_ticks_no_later_than_the_deadline() -> None:
    rules = dataclasses.replace(RULES, rollback_capacity_timeout_seconds=400)
    state = {"status": "ROLLING_BACK", "primary_need": 8, "primary_requested_at": 0}
    obs = r.Observation("Updating", canary_instances=8, canary_weight=100, primary_instances=8,
                        primary_weight=0, primary_in_service=2)  # fmt: skip
    d = r.decide(state, obs, rules, 300, lambda a, b: r.Evidence(0, 0, 0, 0))
    assert d.kind == "raise-primary" and d.wait_seconds == 100 and d.instances is None
    # At the deadline on an endpoint still Updating: the weight is due (the call is refused
    # until SageMaker takes it).
    d = r.decide(state, obs, rules, 400, lambda a, b: r.Evidence(0, 0, 0, 0))
    assert (d.kind, d.percent) == ("wait", 0) and d.primary is not None and d.primary.short


# ------------------------------------------------------------------ the setting


def test_the_rollback_capacity_timeout_is_one_instance_start_and_one_check() -> None:
    cfg = load_config(config_fixture("prod"), env="prod")
    starts = ROLLBACK_CAPACITY_WAIT_INSTANCE_STARTS * ready_seconds(cfg) / 60
    expected = math.ceil(starts + cfg.rollout.check_interval_minutes) * 60
    assert rollout_waits(cfg).rollback_capacity_timeout_seconds == expected


def test_the_lambda_reads_the_rollback_timeout_from_its_environment() -> None:
    env = {"ENDPOINT_NAME": "e", "TABLE_NAME": "t", "TOPIC_ARN": "arn:aws:sns:us-east-1:1:t",
           "ALARM_NAMES": "[]", "STEPS_PERCENT": "[5, 100]", "BAKE_SECONDS": "60",
           "CHECK_SECONDS": "60", "MIN_CANARY_INVOCATIONS": "1",
           "MAX_ERROR_RATE_INCREASE_PERCENT": "0.5", "EVIDENCE_TIMEOUT_SECONDS": "60",
           "CAPACITY_PLAN": RULES.plan.to_json()}  # fmt: skip
    assert Settings.from_env(env).rules.rollback_capacity_timeout_seconds is None
    env["ROLLBACK_CAPACITY_TIMEOUT_SECONDS"] = "780"
    assert Settings.from_env(env).rules.rollback_capacity_timeout_seconds == 780


@pytest.fixture(scope="module")
def prod(tmp_path_factory: pytest.TempPathFactory) -> Template:
    cfg = load_config(config_fixture("prod"), env="prod")
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("cdk.out")))
    return Template.from_stack(build(app, "Prod", cfg))


def test_the_controller_gets_the_timeout_and_may_read_the_primarys_target(
    prod: Template,
) -> None:
    cfg = load_config(config_fixture("prod"), env="prod")
    expected = rollout_waits(cfg).rollback_capacity_timeout_seconds
    assert controller_env(prod)["ROLLBACK_CAPACITY_TIMEOUT_SECONDS"] == str(expected)
    [read] = [s for s in policy_of(prod, "CanaryRole") if s.get("Sid") == "ScalableTargets"]
    assert read["Action"] == "application-autoscaling:DescribeScalableTargets"
    assert read["Resource"] == "*"  # no resource type for it (Service Authorization Reference)
    assert json.dumps(read).count("Action") == 1
