"""The shadow variant's count in the shadow stage (lambdas/canary_controller/shadow_fleet.py): it
follows the primary's instances in service (sample 50 %, one shadow instance per primary
instance, the shadow config's 4 the most), set with UpdateEndpointWeightsAndCapacities (validated
against SageMaker's model, DesiredInstanceCount only) on entry and when the primary scales; never
while the endpoint is Updating; a refusal for now asked again on a later tick; a refusal for good
recorded once with the stage carrying on at its count; AccessDenied raised."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from lambdas.canary_controller import aws
from lambdas.canary_controller.shadow_fleet import tracking_count
from tests.lambdas import shadow_world as sw
from tests.lambdas.conftest import World, set_endpoint_status, validation_error
from tests.lambdas.test_canary_shadow_stage import into_shadow, tick, until

PEAK = 4


@pytest.fixture
def fleet(world: World) -> tuple[World, sw.ShadowVariant]:
    sw.shadow_world(world)
    ctl = world.controller
    ctl.s = replace(ctl.s, shadow=replace(sw.SHADOW, sample_percent=50))
    return world, sw.ShadowVariant(world, peak=PEAK)


def error(code: str, message: str) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": 400}},
        "UpdateEndpointWeightsAndCapacities",
    )


def test_the_count_is_the_nearest_at_the_primarys_load_within_one_and_the_peak() -> None:
    assert tracking_count(10, 40, 1.5, 6) == 6  # 6.0
    assert tracking_count(10, 25, 1.5, 6) == 4  # 3.75 -> 4 (a little above the primary's load)
    assert tracking_count(10, 23, 1.5, 6) == 3  # 3.45 -> 3 (a little below)
    assert tracking_count(50, 5, 1.0, 6) == 3  # 2.5: half up, not to even
    assert tracking_count(10, 2, 1.0, 6) == 1  # 0.2: never below 1
    assert tracking_count(10, 80, 1.5, 6) == 6  # 12: never above the peak size


def test_the_shadow_follows_the_primary_on_entry_and_when_it_scales(
    fleet: tuple[World, sw.ShadowVariant],
) -> None:
    world, shadow = fleet
    result = into_shadow(world)
    assert shadow.calls[0]["DesiredWeightsAndCapacities"] == [
        {"VariantName": "shadow", "DesiredInstanceCount": 2}  # 50 % of 4; no weight
    ]
    assert shadow.current == 2
    assert "shadow variant 4 -> 2 instances" in result["last_reason"], result
    assert "2 instances for 50 % of the primary's 4 in service" in result["shadow_fleet"], result
    result = tick(world, result)
    assert shadow.counts_asked() == [2]  # unchanged: not asked again
    for primary, asked in ((7, [2, 4]), (12, [2, 4]), (5, [2, 4, 3])):  # 3.5; 6 > 4; 2.5
        sw.set_primary_count(primary)
        result = tick(world, result)
        assert shadow.counts_asked() == asked, (primary, result)
    assert shadow.current == 3
    sw.capture_both(world)
    result = until(world, result, "leave-shadow")
    assert result["shadow_outcome"] == "pass", result
    assert any(
        line.startswith("shadow fleet: 3 instances for 50 % of the primary's 5")
        for line in result["shadow_evidence"]
    ), result["shadow_evidence"]


def test_no_count_is_asked_for_while_the_endpoint_is_updating(
    fleet: tuple[World, sw.ShadowVariant],
) -> None:
    world, shadow = fleet
    result = into_shadow(world)
    sw.set_primary_count(6)
    set_endpoint_status("Updating")
    result = tick(world, result)
    assert result["last_decision"] == "wait", result
    assert shadow.counts_asked() == [2]
    set_endpoint_status("InService")
    result = tick(world, result)
    assert shadow.counts_asked() == [2, 3] and shadow.current == 3, result


@pytest.mark.parametrize(
    "refusal",
    [validation_error(), error("ThrottlingException", "Rate exceeded")],
    ids=["updating", "throttled"],
)
def test_a_refused_count_is_asked_for_again_on_a_later_tick(
    fleet: tuple[World, sw.ShadowVariant], refusal: ClientError
) -> None:
    world, shadow = fleet
    shadow.refusals.append(refusal)
    result = into_shadow(world)
    assert shadow.counts_asked() == [2] and shadow.current == PEAK
    assert "refused for now" in result["last_reason"], result
    assert result["shadow_fleet"].startswith("4: 2 refused for now"), result
    assert result["status"] == "RUNNING" and not result.get("shadow_fleet_refused"), result
    result = tick(world, result)
    assert shadow.counts_asked() == [2, 2] and shadow.current == 2, result


def test_a_count_sagemaker_will_not_take_is_recorded_once_and_the_stage_carries_on(
    fleet: tuple[World, sw.ShadowVariant],
) -> None:
    world, shadow = fleet
    said = 'The variant name(s) "shadow" is/are not present within endpoint configuration'
    shadow.refusals.append(error("ValidationException", said))
    result = into_shadow(world)
    stays = f"the shadow's count stays 4: ValidationException: {said}"
    assert result["shadow_fleet_refused"] == stays, result
    sw.set_primary_count(2)
    sw.capture_both(world)
    result = until(world, result, "leave-shadow")
    assert shadow.counts_asked() == [2] and shadow.current == PEAK  # never asked again
    assert result["shadow_outcome"] == "pass", result
    assert f"shadow fleet: {stays}" in result["shadow_evidence"], result["shadow_evidence"]


def test_access_denied_on_the_count_raises_and_records_nothing(
    fleet: tuple[World, sw.ShadowVariant],
) -> None:
    world, shadow = fleet
    shadow.refusals.append(error("AccessDeniedException", "not authorized"))
    result = world.start()
    result = tick(world, result)
    assert result["last_decision"] == "enter-shadow", result
    world.clock.now += result["wait_seconds"]
    with pytest.raises(ClientError, match="AccessDenied"):
        world.tick("r1", result["seq"])
    assert shadow.current == PEAK
    record: Any = world.controller.load()
    assert record["last_decision"] == "enter-shadow" and "shadow_entered_at" not in record


def test_the_calls_are_valid_by_sagemakers_model() -> None:
    """botocore's Stubber checks each request and answer against SageMaker's model: the count
    for the shadow variant alone (no weight), DescribeEndpoint's ShadowProductionVariants read
    into the observation, the shadow config's count read from its ShadowProductionVariants."""
    sm = boto3.client("sagemaker", region_name="us-east-1")
    stub, arn = Stubber(sm), "arn:aws:sagemaker:us-east-1:123456789012:endpoint"
    stub.add_response(
        "update_endpoint_weights_and_capacities",
        {"EndpointArn": f"{arn}/ep"},
        {"EndpointName": "ep",
         "DesiredWeightsAndCapacities": [{"VariantName": "shadow", "DesiredInstanceCount": 3}]},
    )  # fmt: skip
    summary = {"CurrentWeight": 1.0, "DesiredWeight": 1.0}
    stub.add_response(
        "describe_endpoint",
        {"EndpointName": "ep", "EndpointArn": f"{arn}/ep",
         "EndpointConfigName": "cfg-shadow", "EndpointStatus": "InService",
         "CreationTime": datetime(2026, 11, 28, tzinfo=UTC),
         "LastModifiedTime": datetime(2026, 11, 28, tzinfo=UTC),
         "ProductionVariants": [{"VariantName": "primary", **summary,
                                 "CurrentInstanceCount": 30, "DesiredInstanceCount": 31}],
         "ShadowProductionVariants": [{"VariantName": "shadow", **summary,
                                       "CurrentInstanceCount": 6, "DesiredInstanceCount": 3}]},
        {"EndpointName": "ep"},
    )  # fmt: skip
    stub.add_response(
        "describe_endpoint_config",
        {"EndpointConfigName": "cfg-shadow",
         "EndpointConfigArn": f"{arn}-config/cfg-shadow",
         "CreationTime": datetime(2026, 11, 28, tzinfo=UTC),
         "ProductionVariants": [{"VariantName": "primary", "ModelName": "m",
                                 "InitialInstanceCount": 4, "InstanceType": "ml.g6e.xlarge"}],
         "ShadowProductionVariants": [{"VariantName": "shadow", "ModelName": "m2",
                                       "InitialInstanceCount": 6,
                                       "InstanceType": "ml.g6e.xlarge"}]},
        {"EndpointConfigName": "cfg-shadow"},
    )  # fmt: skip
    with stub:
        aws.set_instances(sm, "ep", "shadow", 3)
        obs = aws.observe(sm, None, "ep", (), primary="primary", canary="canary", shadow="shadow")
        assert aws.shadow_config_count(sm, "cfg-shadow", "shadow") == 6
    stub.assert_no_pending_responses()
    assert (obs.shadow_current, obs.shadow_desired, obs.shadow_instances) == (6, 3, 3)
    assert obs.primary_serving == 30


def test_which_validation_exceptions_are_refusals_for_good() -> None:
    assert not aws.refused_for_good(validation_error())  # "Cannot update in-progress endpoint"
    assert aws.refused_for_good(error("ValidationException", "shadow variants cannot be updated"))
    assert not aws.refused_for_good(error("ThrottlingException", "Rate exceeded"))
    assert not aws.refused_for_good(error("AccessDeniedException", "not authorized"))
