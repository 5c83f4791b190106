"""The shadow variant's count in the shadow stage (lambdas/canary_controller/shadow_fleet.py): set
once, when the stage starts, in a copy of the stack's shadow config sized for the primary's
instances in service (sample 50 %, one shadow instance per primary instance, the stack's 4 the
most), never changed afterwards (the world refuses a shadow resize as SageMaker may); the moves
plain UpdateEndpoints (the world refuses a blue/green move that renames variants); a move
SageMaker refuses for good ends the stage at once, naming its message."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from lambdas.canary_controller import aws
from lambdas.canary_controller.names import sized_shadow_config, sized_shadow_config_prefix
from lambdas.canary_controller.shadow_fleet import tracking_count
from lambdas.canary_controller.shadow_stage import is_shadow_config
from tests.lambdas import shadow_world as sw
from tests.lambdas.canary_lifecycle import record_sent
from tests.lambdas.conftest import ENDPOINT, World, validation_error
from tests.lambdas.test_canary_shadow_stage import operator_rollback, tick, until
from tests.sagemaker_refusals import move_refusal

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


def test_the_stage_enters_a_config_sized_for_the_primary_and_never_resizes_the_shadow(
    fleet: tuple[World, sw.ShadowVariant],
) -> None:
    world, shadow = fleet
    result = world.start()
    result = tick(world, result)
    assert result["last_decision"] == "enter-shadow", result
    sized = sized_shadow_config(ENDPOINT, sw.SHADOW_CONFIG, 2)  # 50 % of the primary's 4
    record: Any = world.controller.load()
    assert record["shadow_config_name"] == sized, record
    assert "2 instances for 50 % of the primary's 4 in service" in record["shadow_fleet"]
    (created,) = shadow.created
    assert created["EndpointConfigName"] == sized
    assert created["ShadowProductionVariants"][0]["InitialInstanceCount"] == 2
    assert [v["VariantName"] for v in created["ProductionVariants"]] == ["primary"]
    live = world.controller.sm.describe_endpoint(EndpointName=ENDPOINT)
    assert live["EndpointConfigName"] == sized and shadow.current == 2
    for primary in (7, 12, 1):  # the primary scales: the shadow's count is never asked for
        sw.set_primary_count(primary)
        result = tick(world, result)
    sw.capture_both(world)
    result = until(world, result, "leave-shadow")
    assert result["shadow_outcome"] == "pass", result
    assert shadow.calls == [] and shadow.current == 2
    assert any(
        line.startswith("shadow fleet: 2 instances for 50 % of the primary's 4")
        for line in result["shadow_evidence"]
    ), result["shadow_evidence"]
    result = until(world, result, "canary-stage")
    assert result["stage"] == "canary", result


def test_a_sized_config_already_there_is_used_as_it_is(
    fleet: tuple[World, sw.ShadowVariant],
) -> None:
    world, shadow = fleet
    sm = world.controller.sm
    sized = sized_shadow_config(ENDPOINT, sw.SHADOW_CONFIG, 2)
    aws.create_sized_config(sm, sw.SHADOW_CONFIG, sized, "shadow", 2)
    into = tick(world, world.start())
    assert into["last_decision"] == "enter-shadow", into
    assert len(shadow.created) == 1  # not created twice


def test_the_shadows_peak_size_is_entered_when_the_stacks_config_cannot_be_read_for_now(
    fleet: tuple[World, sw.ShadowVariant],
) -> None:
    world, shadow = fleet
    sm, real = world.controller.sm, world.controller.sm.describe_endpoint_config

    def throttled(**params: Any) -> Any:
        if params["EndpointConfigName"] == sw.SHADOW_CONFIG:
            raise error("ThrottlingException", "Rate exceeded")
        return real(**params)

    sm.describe_endpoint_config = throttled
    result = tick(world, world.start())
    assert result["last_decision"] == "enter-shadow", result
    record: Any = world.controller.load()
    assert record["shadow_config_name"] == sw.SHADOW_CONFIG and shadow.created == [], record
    assert "peak size" in record["shadow_fleet"], record


def test_a_move_sagemaker_refuses_for_good_ends_the_stage_at_once_naming_its_message(
    fleet: tuple[World, sw.ShadowVariant],
) -> None:
    world, _ = fleet
    sm, real = world.controller.sm, world.controller.sm.update_endpoint
    said = "The endpoint configuration's KMS key cannot be used by SageMaker."
    moves: list[dict[str, Any]] = []

    def update_endpoint(**params: Any) -> Any:
        moves.append(params)
        if len(moves) == 1:
            raise error("ValidationException", said)
        return real(**params)

    sm.update_endpoint = update_endpoint
    result = tick(world, world.start())
    assert len(moves) == 1, moves  # asked once, not until MAX_REFUSALS
    assert result["done"] and result["status"] == "FAILED", result
    assert result["last_decision"] == "shadow-end", result
    assert f"ValidationException: {said}" in result["last_reason"], result
    live = sm.describe_endpoint(EndpointName=ENDPOINT)
    assert live["EndpointConfigName"] == sw.CANARY_CONFIG


def test_a_move_back_sagemaker_refuses_for_good_ends_the_release_failed_and_says_so(
    fleet: tuple[World, sw.ShadowVariant],
) -> None:
    world, _ = fleet
    into_shadow_sized(world)
    sm, said = world.controller.sm, "Could not access model data for m-primary."

    def update_endpoint(**params: Any) -> Any:
        raise error("ValidationException", said)

    sm.update_endpoint = update_endpoint
    sent = record_sent(world)
    result = until(world, operator_rollback(world), "abort")
    assert result["done"] and result["status"] == "FAILED", result
    assert f"ValidationException: {said}" in result["last_reason"], result
    back = f"--endpoint-config-name {sw.CANARY_CONFIG} --retain-all-variant-properties"
    assert back in result["last_reason"], result
    live = sm.describe_endpoint(EndpointName=ENDPOINT)["EndpointConfigName"]
    assert live == sized_shadow_config(ENDPOINT, sw.SHADOW_CONFIG, 2)
    with pytest.raises(Exception, match=f"already runs a shadow config \\({live}"):
        world.start("r2")  # the next rollout is refused until the endpoint is moved back
    assert "] shadow stage: SageMaker refused the move back: Valid" in sent[-1]["subject"]


def test_a_blue_green_move_that_renames_variants_and_a_shadow_resize_are_refused(
    fleet: tuple[World, sw.ShadowVariant],
) -> None:
    """The world refuses what SageMaker would (tests/sagemaker_refusals.py): the controller's own
    calls go through because they ask for neither."""
    world, shadow = fleet
    sm = world.controller.sm
    with pytest.raises(ClientError, match="requires the same variant names"):
        sm.update_endpoint(
            EndpointName=ENDPOINT, EndpointConfigName=sw.SHADOW_CONFIG,
            RetainAllVariantProperties=True, RetainDeploymentConfig=True,
        )  # fmt: skip
    into_shadow_sized(world)
    with pytest.raises(ClientError, match="is/are not present"):
        aws.set_instances(sm, ENDPOINT, "shadow", 3)
    assert len(shadow.calls) == 1


def into_shadow_sized(world: World) -> dict[str, Any]:
    result = tick(world, world.start())
    assert result["last_decision"] == "enter-shadow", result
    result = tick(world, result)
    assert result["last_decision"] == "bake", result
    sw.ground_capture(world)
    return tick(world, result)


def test_the_calls_are_valid_by_sagemakers_model() -> None:
    """botocore's Stubber checks each request and answer against SageMaker's model: the sized
    config looked for, the stack's read and copied with the shadow's count changed, the move a
    plain UpdateEndpoint (no DeploymentConfig, no RetainDeploymentConfig), DescribeEndpoint's
    ShadowProductionVariants answered alongside."""
    sm = boto3.client("sagemaker", region_name="us-east-1")
    stub, arn = Stubber(sm), "arn:aws:sagemaker:us-east-1:123456789012:endpoint"
    when = datetime(2026, 11, 28, tzinfo=UTC)
    primary = {"VariantName": "primary", "ModelName": "m", "InitialInstanceCount": 4,
               "InstanceType": "ml.g6e.xlarge"}  # fmt: skip
    shadow = {"VariantName": "shadow", "ModelName": "m2", "InitialInstanceCount": 6,
              "InstanceType": "ml.g6e.xlarge"}  # fmt: skip
    capture = {"EnableCapture": True, "InitialSamplingPercentage": 100,
               "DestinationS3Uri": "s3://b/datacapture", "KmsKeyId": "k",
               "CaptureOptions": [{"CaptureMode": "Input"}, {"CaptureMode": "Output"}]}  # fmt: skip
    sized = sized_shadow_config("ep", "cfg-shadow", 3)
    stub.add_client_error(
        "describe_endpoint_config", "ValidationException",
        f'Could not find endpoint configuration "{sized}".', 400, {"EndpointConfigName": sized},
    )  # fmt: skip
    stub.add_response(
        "describe_endpoint_config",
        {"EndpointConfigName": "cfg-shadow", "EndpointConfigArn": f"{arn}-config/cfg-shadow",
         "CreationTime": when, "ProductionVariants": [primary],
         "ShadowProductionVariants": [shadow], "DataCaptureConfig": capture, "KmsKeyId": "k"},
        {"EndpointConfigName": "cfg-shadow"},
    )  # fmt: skip
    stub.add_response(
        "create_endpoint_config",
        {"EndpointConfigArn": f"{arn}-config/{sized}"},
        {"EndpointConfigName": sized, "ProductionVariants": [primary],
         "ShadowProductionVariants": [{**shadow, "InitialInstanceCount": 3}],
         "DataCaptureConfig": capture, "KmsKeyId": "k"},
    )  # fmt: skip
    stub.add_response(
        "update_endpoint",
        {"EndpointArn": f"{arn}/ep"},
        {"EndpointName": "ep", "EndpointConfigName": sized, "RetainAllVariantProperties": True},
    )
    summary = {"CurrentWeight": 1.0, "DesiredWeight": 1.0}
    stub.add_response(
        "describe_endpoint",
        {"EndpointName": "ep", "EndpointArn": f"{arn}/ep",
         "EndpointConfigName": sized, "EndpointStatus": "InService",
         "CreationTime": when, "LastModifiedTime": when,
         "ProductionVariants": [{"VariantName": "primary", **summary,
                                 "CurrentInstanceCount": 30, "DesiredInstanceCount": 31}],
         "ShadowProductionVariants": [{"VariantName": "shadow", **summary,
                                       "CurrentInstanceCount": 3, "DesiredInstanceCount": 3}]},
        {"EndpointName": "ep"},
    )  # fmt: skip
    with stub:
        aws.create_sized_config(sm, "cfg-shadow", sized, "shadow", 3)
        aws.update_endpoint(sm, "ep", sized)
        obs = aws.observe(sm, None, "ep", (), primary="primary", canary="canary")
    stub.assert_no_pending_responses()
    assert obs.primary_serving == 30


def test_a_config_copy_carries_every_member_create_takes_that_describe_answers() -> None:
    """``aws.CONFIG_COPIED`` is exactly what botocore's SageMaker model has in both
    CreateEndpointConfig's request and DescribeEndpointConfig's answer, each of the same shape."""
    model = boto3.client("sagemaker", region_name="us-east-1").meta.service_model
    takes = model.operation_model("CreateEndpointConfig").input_shape.members
    answers = model.operation_model("DescribeEndpointConfig").output_shape.members
    both = {k for k in takes.keys() & answers.keys() if k != "EndpointConfigName"}
    assert set(aws.CONFIG_COPIED) == both
    assert all(takes[k].name == answers[k].name for k in both)


def test_sized_config_names_are_valid_endpoint_config_names_and_distinct_per_stack_config() -> None:
    model = boto3.client("sagemaker", region_name="us-east-1").meta.service_model
    shape = model.operation_model("CreateEndpointConfig").input_shape.members["EndpointConfigName"]
    endpoint = "e" * 63  # the longest endpoint name
    base = "ShadowStageEndpointConfig" + "x" * 25 + "-" + "A1b2C3d4E5f6"
    other = base[:-1] + "7"
    for name in (sized_shadow_config(endpoint, base, 9999), sized_shadow_config("ep", other, 1)):
        assert len(name) <= shape.metadata["max"] == 63
        assert re.fullmatch(shape.metadata["pattern"].strip("^$"), name), name
    assert sized_shadow_config(endpoint, base, 2).startswith(sized_shadow_config_prefix(endpoint))
    assert sized_shadow_config(endpoint, base, 2) != sized_shadow_config(endpoint, other, 2)
    assert is_shadow_config(sized_shadow_config(endpoint, base, 7), endpoint, base)
    assert is_shadow_config(base, endpoint, base)
    assert not is_shadow_config(sized_shadow_config(endpoint, other, 7), endpoint, base)
    assert not is_shadow_config("cfg-1", endpoint, base)
    assert not is_shadow_config(None, endpoint, base)


def test_which_validation_exceptions_are_refusals_for_good() -> None:
    assert not aws.refused_for_good(validation_error())  # "Cannot update in-progress endpoint"
    assert aws.refused_for_good(error("ValidationException", "shadow variants cannot be updated"))
    assert aws.refused_for_good(error("ValidationException", move_refusal(
        {"EndpointConfigName": "cfg-shadow", "RetainDeploymentConfig": True},
        {"primary", "canary"}, {"primary", "shadow"},
    ) or ""))  # fmt: skip
    assert not aws.refused_for_good(error("ThrottlingException", "Rate exceeded"))
    assert not aws.refused_for_good(error("AccessDeniedException", "not authorized"))
