"""Issue 20 item 3.5: the controller stops when the endpoint changed under it.

AWS behaviour relied on: UpdateEndpoint puts a new EndpointConfig on the endpoint, and with
RetainAllVariantProperties false (or DesiredWeight excluded from the retained properties) each
variant's weight goes back to the config's InitialVariantWeight (SageMaker API reference,
UpdateEndpoint); DescribeEndpoint reports the ``EndpointConfigName`` in use and each variant's
``CurrentWeight`` (API reference, DescribeEndpoint); weights are relative, so the canary's share
is its weight over the sum. UpdateEndpointWeightsAndCapacities sets the endpoint Updating and
back to InService once the weights apply (API reference).

The adversarial run: a deploy mid-rollout reset the weights, and the controller baked on the new
config and moved the canary from 5 % to 75 % in one step. Now the tick rolls back (weight 0, the
canary's bounds restored) and names what changed. Rollback rather than hold: a hold keeps the
lock, which blocks the very deploys that would put things right, with no way forward.
"""

from __future__ import annotations

from typing import Any

import boto3

from lambdas.canary_controller import rules as r
from tests.lambdas.canary_lifecycle import record, record_sent
from tests.lambdas.conftest import (
    BAKE,
    CHECK,
    ENDPOINT,
    REGION,
    World,
    _backend,
    advance,
    canary_bounds,
    to_percent,
    weights,
)


def reset_weights(canary: float, primary: float) -> None:
    """What a deploy with RESET=DesiredWeight (or the console) does to the live weights."""
    boto3.client("sagemaker", region_name=REGION).update_endpoint_weights_and_capacities(
        EndpointName=ENDPOINT,
        DesiredWeightsAndCapacities=[
            {"VariantName": "canary", "DesiredWeight": canary},
            {"VariantName": "primary", "DesiredWeight": primary},
        ],
    )


def new_config(name: str) -> None:
    """A deploy's UpdateEndpoint to a new EndpointConfig (weights retained)."""
    _backend().endpoints[ENDPOINT].endpoint_config_name = name


def test_weights_reset_mid_rollout_roll_back_naming_the_change(world: World) -> None:
    sent = record_sent(world)
    world.start()
    result = to_percent(world, world.tick("r1", 0), 25)
    assert record(world)["canary_percent"] == 25
    reset_weights(75, 25)  # a new config whose initial weights give the canary 75 %
    world.clock.now += CHECK
    rolled = world.tick("r1", result["seq"])
    assert rolled["status"] == "ROLLED_BACK" and rolled["done"]
    assert weights() == {"canary": 0.0, "primary": 100.0} and canary_bounds() == (1, 2)
    reason = record(world)["rollback_reason"]
    assert reason.startswith("canary weight 25% -> 75% under the rollout (a deploy or the console")
    [note] = sent
    assert note["subject"] == f"[{ENDPOINT}] canary rolled back: {reason}"[:100]
    assert note["rollback_reason"] == reason
    assert world.start("r2")["status"] == "RUNNING"  # the lock is released


def test_a_new_endpoint_config_mid_bake_rolls_back_instead_of_baking_on_it(world: World) -> None:
    sent = record_sent(world)
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    assert record(world)["endpoint_config_name"] == "cfg-1"
    new_config("cfg-2")
    world.clock.now += BAKE
    world.traffic()
    rolled = world.tick("r1", result["seq"])
    assert rolled["status"] == "ROLLED_BACK" and rolled["last_decision"] == "restore"
    assert [h["decision"] for h in rolled["history"]].count("shift") == 1  # 5 %, nothing after
    assert weights()["canary"] == 0.0 and canary_bounds() == (1, 2)
    assert (
        "canary rolled back: endpoint config cfg-1 -> cfg-2 under the rollout"
        in (sent[-1]["subject"])
    )


def test_a_shift_not_yet_shown_by_describe_endpoint_is_not_a_change(world: World) -> None:
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    world.clock.now += BAKE
    world.traffic()
    scale = world.tick("r1", result["seq"])
    shifted = advance(world, scale)
    assert shifted["last_decision"] == "shift" and record(world)["canary_percent"] == 25
    real = world.controller.sm.describe_endpoint

    def lagging(**kw: Any) -> Any:  # one DescribeEndpoint still shows the weights before
        answer = real(**kw)
        world.controller.sm.describe_endpoint = real
        for v in answer["ProductionVariants"]:
            v["CurrentWeight"] = 5.0 if v["VariantName"] == "canary" else 95.0
        return answer

    world.controller.sm.describe_endpoint = lagging
    baking = advance(world, shifted)
    assert baking["status"] == "RUNNING" and baking["last_decision"] == "bake"
    # ... but a share the controller did not set, seen after that, is a change.
    reset_weights(5, 95)
    assert advance(world, baking)["status"] == "ROLLED_BACK"


def test_endpoint_changed_compares_config_and_share_with_the_record() -> None:
    state = {"endpoint_config_name": "cfg-1", "canary_percent": 25, "last_decision": "bake",
             "canary_percent_before": 5}  # fmt: skip

    def seen(config: str, canary: float, primary: float) -> r.Observation:
        return r.Observation("InService", canary_weight=canary, primary_weight=primary,
                             endpoint_config_name=config)  # fmt: skip

    assert r.endpoint_changed(state, seen("cfg-1", 25, 75)) is None
    assert r.endpoint_changed(state, seen("cfg-1", 1, 3)) is None  # relative weights: 25 %
    assert r.endpoint_changed(state, seen("cfg-2", 25, 75)) == "endpoint config cfg-1 -> cfg-2"
    assert r.endpoint_changed(state, seen("cfg-1", 5, 95)) == "canary weight 25% -> 5%"
    assert r.endpoint_changed({**state, "last_decision": "shift"}, seen("cfg-1", 5, 95)) is None
    intent = {"decision": "shift", "percent": 5, "endpoint_config_name": "cfg-1"}
    assert r.endpoint_changed({**state, "intent": intent}, seen("cfg-1", 5, 95)) is None
    # A record from before these fields were kept, and the simulator (no config), are not checked.
    assert r.endpoint_changed({}, seen("cfg-9", 50, 50)) is None
    no_config = r.Observation("InService", canary_weight=25, primary_weight=75)
    assert r.endpoint_changed(state, no_config) is None
