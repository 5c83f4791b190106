"""EndpointStack: variants, models, rollout policy and least-privilege role, per resource."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match, Template

from container.serving import settings
from stacks.constructs.endpoint import container_environment


@pytest.fixture(scope="module")
def endpoint(prod_templates) -> Template:
    return prod_templates["endpoint"]


def test_endpoint_config_has_primary_and_canary_at_95_0_on_g6e(endpoint: Template) -> None:
    """The canary waits at weight 0 for its rollout (prod's releases start with the shadow
    stage); the controller's steps give it its share."""
    endpoint.has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {
            "ProductionVariants": [
                Match.object_like(
                    {
                        "VariantName": "primary",
                        "InstanceType": "ml.g6e.xlarge",
                        "InitialInstanceCount": 4,
                        "InitialVariantWeight": 95,
                        "ContainerStartupHealthCheckTimeoutInSeconds": 600,
                    }
                ),
                Match.object_like(
                    {
                        "VariantName": "canary",
                        "InstanceType": "ml.g6e.xlarge",
                        "InitialInstanceCount": 3,
                        "InitialVariantWeight": 0,
                    }
                ),
            ]
        },
    )


def test_endpoint_config_name_is_generated_so_changes_make_a_new_one(endpoint: Template) -> None:
    for res in endpoint.find_resources("AWS::SageMaker::EndpointConfig").values():
        assert "EndpointConfigName" not in res["Properties"]
    for res in endpoint.find_resources("AWS::SageMaker::Model").values():
        assert "ModelName" not in res["Properties"]


def test_every_model_has_network_isolation_and_engine_env(endpoint: Template) -> None:
    models = endpoint.find_resources("AWS::SageMaker::Model")
    assert len(models) == 2
    variants = set()
    for res in models.values():
        props = res["Properties"]
        assert props["EnableNetworkIsolation"] is True
        env = props["PrimaryContainer"]["Environment"]
        assert env["VLLM_MAX_NUM_SEQS"] == "128"
        assert env["VLLM_GPU_MEMORY_UTILIZATION"] == "0.92"
        assert env["ENDPOINT_NAME"] == "mangaassist-vllm-prod"
        variants.add(env["VARIANT_NAME"])
    assert variants == {"primary", "canary"}


def test_every_env_var_the_stack_sets_is_in_the_container_settings_registry(prod_cfg) -> None:
    names = set(container_environment(prod_cfg, "primary"))
    unknown = names - settings.REGISTRY.keys()
    assert not unknown, f"the container does not read {sorted(unknown)}"


def test_container_accepts_the_environment_the_stack_sets(prod_cfg) -> None:
    loaded = settings.load(container_environment(prod_cfg, "canary"))
    assert loaded is not None


def test_blue_green_canary_shift_with_auto_rollback_on_created_alarms(endpoint: Template) -> None:
    endpoint.has_resource_properties(
        "AWS::SageMaker::Endpoint",
        {
            "EndpointName": "mangaassist-vllm-prod",
            "DeploymentConfig": {
                "BlueGreenUpdatePolicy": {
                    "TrafficRoutingConfiguration": {
                        "Type": "CANARY",
                        "CanarySize": {"Type": "INSTANCE_COUNT", "Value": 1},
                        "WaitIntervalInSeconds": 600,
                    },
                    "TerminationWaitInSeconds": 600,
                    "MaximumExecutionTimeoutInSeconds": 3600,
                },
                "AutoRollbackConfiguration": {"Alarms": Match.any_value()},
            },
        },
    )
    ep = next(iter(endpoint.find_resources("AWS::SageMaker::Endpoint").values()))
    refs = [
        a["AlarmName"]["Ref"]
        for a in ep["Properties"]["DeploymentConfig"]["AutoRollbackConfiguration"]["Alarms"]
    ]
    alarms = endpoint.find_resources("AWS::CloudWatch::Alarm")
    assert len(refs) == 4 and all(r in alarms for r in refs)
    metrics = sorted(alarms[r]["Properties"]["MetricName"] for r in refs)
    assert metrics == ["Invocation5XXErrors"] * 2 + ["ModelLatency"] * 2


def test_model_latency_rollback_threshold_is_in_microseconds(endpoint: Template, prod_cfg) -> None:  # type: ignore[no-untyped-def]
    """ModelLatency is published in microseconds: the rollback alarm's threshold is the config's
    milliseconds x 1,000."""
    endpoint.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "Namespace": "AWS/SageMaker",
            "MetricName": "ModelLatency",
            "ExtendedStatistic": "p99",
            "Threshold": prod_cfg.deployment.rollback_model_latency_p99_ms * 1000,
            "Dimensions": Match.array_with(
                [{"Name": "EndpointName", "Value": "mangaassist-vllm-prod"}]
            ),
        },
    )


def test_no_volume_kms_key_on_instances_with_hardware_encrypted_nvme(endpoint: Template) -> None:
    # SageMaker rejects KmsKeyId when a variant runs on an instance with local NVMe (g5, g6e).
    for res in endpoint.find_resources("AWS::SageMaker::EndpointConfig").values():
        assert "KmsKeyId" not in res["Properties"]


def test_execution_role_pulls_only_from_the_serving_repositories(endpoint: Template) -> None:
    policies = endpoint.find_resources("AWS::IAM::Policy")
    statements = [
        s
        for p in policies.values()
        if any("ServingExecutionRole" in r["Ref"] for r in p["Properties"]["Roles"])
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    pull = [s for s in statements if "ecr:BatchGetImage" in s["Action"]]
    assert pull, "the role cannot pull the image"
    for s in pull:
        resources = s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]]
        assert "*" not in resources
    for s in statements:
        actions = s["Action"] if isinstance(s["Action"], list) else [s["Action"]]
        assert not any(a.endswith(":*") or a == "*" for a in actions), s
        if s["Resource"] == "*":
            # the two actions without resource-level permissions; PutMetricData held to one
            # namespace by its condition key
            assert actions in (["ecr:GetAuthorizationToken"], ["cloudwatch:PutMetricData"]), s
            if actions == ["cloudwatch:PutMetricData"]:
                assert s["Condition"] == {
                    "StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/Endpoints"}
                }


def test_role_writes_only_to_this_endpoints_log_group(endpoint: Template) -> None:
    endpoint.has_resource_properties(
        "AWS::Logs::LogGroup",
        {
            "LogGroupName": "/aws/sagemaker/Endpoints/mangaassist-vllm-prod",
            "RetentionInDays": 30,
            "KmsKeyId": Match.any_value(),
        },
    )


def test_key_rotation_is_on(endpoint: Template) -> None:
    endpoint.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


def test_sagemaker_assumes_the_execution_role_for_this_account_only(endpoint: Template) -> None:
    """The confused deputy, in the execution role's trust: aws:SourceAccount and aws:SourceArn
    (SageMaker developer guide, "Cross-service confused deputy prevention")."""
    roles = endpoint.find_resources("AWS::IAM::Role")
    [role] = [r for lid, r in roles.items() if "ExecutionRole" in lid]
    [statement] = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    assert statement["Condition"]["StringEquals"] == {
        "aws:SourceAccount": {"Ref": "AWS::AccountId"}
    }
    source_arn = json.dumps(statement["Condition"]["ArnLike"]["aws:SourceArn"])
    assert ":sagemaker:" in source_arn and "AWS::AccountId" in source_arn


def test_cloudwatch_logs_may_use_the_key_for_this_accounts_log_groups_only(
    endpoint: Template,
) -> None:
    """The confused deputy: without a condition on the encryption context, CloudWatch Logs could
    be made to use the key for another account's log group (CloudWatch Logs User Guide,
    "Encrypt log data in CloudWatch Logs using AWS KMS")."""
    [key] = endpoint.find_resources("AWS::KMS::Key").values()
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    logs = [
        s for s in statements
        if "logs." in json.dumps(s.get("Principal", {}))
    ]  # fmt: skip
    assert len(logs) == 1
    condition = logs[0]["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"]
    text = json.dumps(condition)
    assert ":logs:" in text and ":log-group:*" in text and "AWS::AccountId" in text


def test_prod_wires_the_canary_controller_and_the_smoke_gate(endpoint: Template) -> None:
    functions = endpoint.find_resources("AWS::Lambda::Function")
    ours = sorted(
        f["Properties"]["Handler"]
        for f in functions.values()
        if f["Properties"].get("Handler", "").endswith(".handler.handler")
    )
    assert ours == ["canary_controller.handler.handler", "smoke_gate.handler.handler"], (
        "expected the canary controller and the smoke gate functions"
    )
    # The canary rollout and the smoke gate's Provider waiter (it polls is_complete).
    endpoint.resource_count_is("AWS::StepFunctions::StateMachine", 2)
    gates = endpoint.find_resources("Custom::EndpointSmokeGate")
    assert len(gates) == 1, "the post-deploy smoke gate custom resource is missing"
    for gate in gates.values():
        assert any("Endpoint" in dep for dep in gate.get("DependsOn", [])), gate


def test_canary_controller_watches_the_canary_rollback_and_ttft_alarms(endpoint: Template) -> None:
    policies = endpoint.find_resources("AWS::IAM::Policy")
    describe = [
        s
        for p in policies.values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if "cloudwatch:DescribeAlarms"
        in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    ]
    assert describe and all(s["Resource"] != "*" for s in describe)


@pytest.mark.parametrize("rule", ["engine-restarts", "high-ttft"])
def test_canary_controller_rolls_back_on_canary_alarm(endpoint: Template, rule: str) -> None:
    """The controller's ALARM_NAMES carries the canary's own alarm (an engine death under the new
    image, or slow first tokens), not only the deployment's rollback alarms."""
    alarm_ids = [
        logical_id
        for logical_id, res in endpoint.find_resources("AWS::CloudWatch::Alarm").items()
        if f"canary/{rule}:" in res["Properties"].get("AlarmDescription", "")
    ]
    assert len(alarm_ids) == 1
    functions = endpoint.find_resources("AWS::Lambda::Function")
    watched = [
        json.dumps(f["Properties"]["Environment"]["Variables"]["ALARM_NAMES"])
        for f in functions.values()
        if "ALARM_NAMES" in f["Properties"].get("Environment", {}).get("Variables", {})
    ]
    assert len(watched) == 1
    assert json.dumps({"Ref": alarm_ids[0]}) in watched[0]


def test_container_startup_timeout_is_sagemakers_health_check_timeout(prod_cfg) -> None:
    """The entrypoint's own startup deadline and SageMaker's container startup health check come
    from one config field, so the container reports the phase that hung before it is killed."""
    env = container_environment(prod_cfg, "primary")
    timeout = prod_cfg.deployment.startup_health_check_timeout_seconds
    assert env["STARTUP_TIMEOUT_SECONDS"] == str(timeout)
    assert settings.load(env).startup_timeout_seconds == timeout
