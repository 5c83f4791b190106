"""Issue 43 item 2: the controller by composition. Each part does its one job built on its own,
from the settings and the shared clients alone (no Controller around it), against the moto
world of conftest.py; and the Controller holds them without an inheritance chain.

AWS behaviour relied on: a DynamoDB conditional write whose condition fails is refused with
ConditionalCheckFailedException and writes nothing; a throttled one
(ProvisionedThroughputExceededException) applied nothing and may be sent again (Amazon DynamoDB
Developer Guide, "Error handling with DynamoDB"); StartExecution of a name already used by an
execution that has ended is refused with ExecutionAlreadyExists (AWS Step Functions API
reference, StartExecution).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from lambdas.canary_controller import (
    clients,
    decisions,
    endpoint_io,
    executions,
    handler,
    notifier,
    record,
    shadow_io,
)
from lambdas.canary_controller.clients import Clients
from lambdas.canary_controller.endpoint_io import EndpointIO
from lambdas.canary_controller.executions import Executions
from lambdas.canary_controller.names import RUNNING
from lambdas.canary_controller.notifier import Notifier
from lambdas.canary_controller.record import WRITE_BACKOFF_SECONDS, RolloutRecord
from lambdas.canary_controller.settings import StartFailed
from tests.lambdas.conftest import REGION, Clock, World, weights

#: Each part's class and the module that is its one home.
PARTS = {
    clients.Clients: "the shared AWS clients",
    record.RolloutRecord: "the state store",
    endpoint_io.EndpointIO: "the endpoint's AWS side",
    shadow_io.ShadowIO: "the shadow stage's AWS side",
    executions.Executions: "the Step Functions executions",
    notifier.Notifier: "the operator's notifications",
    decisions.DecisionApplier: "the decision core's answers applied",
    handler.Controller: "the actions",
}


def parts_of(world: World) -> tuple[Clients, Clock, Any]:
    """The world's own clients (moto's, and any fake a test put in), its clock and settings."""
    ctl = world.controller
    return ctl.clients, world.clock, ctl.s


@pytest.mark.parametrize("cls", list(PARTS), ids=lambda c: c.__name__)
def test_no_part_inherits_from_another(cls: type) -> None:
    """The controller was one object split across three files by inheritance; each part now
    stands alone: its only base is object."""
    assert cls.__mro__ == (cls, object)


def test_the_controller_holds_every_part_and_they_share_its_clients(world: World) -> None:
    ctl = world.controller
    held = {type(v) for v in vars(ctl).values()}
    assert set(PARTS) - {handler.Controller} <= held
    for part in (ctl.record, ctl.endpoint, ctl.shadow, ctl.notifier, ctl.executions):
        assert part.clients is ctl.clients


def test_new_settings_and_a_replaced_client_reach_every_part(world: World) -> None:
    ctl = world.controller
    changed = dataclasses.replace(ctl.s, topic_arn="arn:aws:sns:us-east-1:123456789012:other")
    ctl.s = changed
    parts = (ctl.record, ctl.endpoint, ctl.shadow, ctl.notifier, ctl.executions, ctl.applier)
    assert all(p.s is changed for p in parts)
    fake = boto3.client("s3", region_name=REGION)
    ctl.s3 = fake
    assert ctl.shadow.clients.s3 is fake and ctl.s3 is fake


# ------------------------------------------------------------------------- the state store


def test_the_record_writes_only_where_its_condition_holds(world: World) -> None:
    clients_, clock, settings = parts_of(world)
    store = RolloutRecord(settings, clients_, clock=clock, sleep=clock.sleep)
    first = store.fresh("r1", RUNNING, by="alice", decision="start", reason="test")
    assert store.write(first, expect_seq=None)
    # a second rollout while the first holds the lock: refused, nothing written
    other = store.fresh("r2", RUNNING, by="bob", decision="start", reason="test")
    assert not store.write(other, expect_seq=None)
    assert store.current()["rollout_id"] == "r1"
    # the next version needs the seq it was read at
    moved = store.decide(first, "bake", "baking")  # the next version: seq + 1
    assert not store.write(moved, expect_seq=first["seq"] + 5)
    assert store.write(moved, expect_seq=first["seq"])
    assert store.current()["seq"] == first["seq"] + 1


def test_the_record_sends_a_throttled_write_again_after_its_backoff(world: World) -> None:
    clients_, clock, settings = parts_of(world)
    store = RolloutRecord(settings, clients_, clock=clock, sleep=clock.sleep)
    real, refused = clients_.table.put_item, list[dict[str, Any]]()

    def put_item(**kw: Any) -> Any:
        if len(refused) < 2:
            refused.append(kw)
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"},
                 "ResponseMetadata": {"HTTPStatusCode": 400}},
                "PutItem",
            )  # fmt: skip
        return real(**kw)

    clients_.table.put_item = put_item
    before = clock.now
    state = store.fresh("r1", RUNNING, by="alice", decision="start", reason="test")
    assert store.write(state, expect_seq=None)
    assert len(refused) == 2 and clock.now - before == pytest.approx(sum(WRITE_BACKOFF_SECONDS[:2]))
    assert store.current()["rollout_id"] == "r1"


# ------------------------------------------------------------------------- the endpoint's side


def test_the_endpoint_adapter_moves_both_weights_and_reads_them_back(world: World) -> None:
    clients_, _, settings = parts_of(world)
    endpoint = EndpointIO(settings, clients_)
    endpoint.set_canary_weight(25)
    assert weights() == {"canary": 25.0, "primary": 75.0}
    seen = endpoint.observe(alarms=False)
    assert (seen.canary_share, seen.endpoint_status) == (25.0, "InService")
    assert endpoint.bounds("canary") == (1, 2)
    endpoint.set_bounds("canary", 2, 3)
    assert endpoint.bounds("canary") == (2, 3)


def test_metrics_that_cannot_be_read_are_no_evidence(world: World) -> None:
    clients_, _, settings = parts_of(world)
    endpoint = EndpointIO(settings, clients_)

    def denied(**kw: Any) -> Any:
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "GetMetricData")

    clients_.cw.get_metric_data = denied
    got = endpoint.evidence(0, 600)
    assert got.canary_invocations == 0 and got.error is not None and "AccessDenied" in got.error


# ------------------------------------------------------------------------- the executions


def test_a_start_that_fails_releases_the_lock_and_tells_the_operator(world: World) -> None:
    clients_, clock, settings = parts_of(world)
    store = RolloutRecord(settings, clients_, clock=clock, sleep=clock.sleep)
    runs = Executions(settings, clients_, store, Notifier(settings, clients_), clock=clock)
    state = store.fresh("r1", RUNNING, by="alice", decision="start", reason="test")
    assert store.write(state, expect_seq=None)

    def refused(**kw: Any) -> Any:
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "StartExecution")

    clients_.sfn.start_execution = refused
    with pytest.raises(StartFailed, match="AccessDenied"):
        runs.start(state)
    after = store.current()
    assert (after["status"], after["last_decision"]) == ("FAILED", "start-failed")
    assert [m["status"] for m in world.notifications()] == ["FAILED"]


def test_a_name_taken_by_an_earlier_attempt_is_recorded_anew_and_started(world: World) -> None:
    clients_, clock, settings = parts_of(world)
    store = RolloutRecord(settings, clients_, clock=clock, sleep=clock.sleep)
    runs = Executions(settings, clients_, store, Notifier(settings, clients_), clock=clock)
    state = store.fresh("r1", RUNNING, by="alice", decision="start", reason="test")
    assert store.write(state, expect_seq=None)
    real = clients_.sfn.start_execution

    def taken(**kw: Any) -> Any:
        if kw["name"] == "r1":
            raise ClientError(
                {"Error": {"Code": "ExecutionAlreadyExists", "Message": "r1"}}, "StartExecution"
            )
        return real(**kw)

    clients_.sfn.start_execution = taken
    started = runs.start(state)
    name = started.get("execution") or ""
    assert name != "r1" and name.startswith("r1-")
    assert store.current()["execution"] == name
    assert [e["name"] for e in world.executions()] == [name]


def test_each_part_is_defined_in_a_module_of_its_own() -> None:
    homes = {inspect.getmodule(cls) for cls in PARTS}
    assert len(homes) == len(PARTS)
