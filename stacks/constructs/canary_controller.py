"""Progressive canary rollout: a Lambda that decides, a state machine that keeps time.

The Lambda (lambdas/canary_controller) holds all the logic and the state (a DynamoDB item per
endpoint, also the lock). The state machine only loops ``tick -> wait -> tick`` until the rollout
completes or rolls back, so each decision shows in its execution history; on an unexpected error
it asks the Lambda to roll back before failing, and a long rollout continues as a new execution.
An EventBridge rule tells the Lambda of an execution that ended otherwise (failed, timed out,
stopped), so that no rollout is left holding the lock with nothing driving it
(stacks/constructs/rollout_state_machine.py). The state machine's name is derived from the
endpoint name (``<endpoint>-canary-rollout``) so the Lambda can start it without a reference
cycle (the state machine already references the Lambda); the function's name is derived from it
too (``<endpoint>-canary-controller``) so ``tools/canary.py`` can invoke it by endpoint name.

The canary's capacity per step is planned at synth, from what one instance serves
(sizing/rollout_plan.py, from sizing.capacity; the stack passes it in as ``capacity_plan``), and
handed to the Lambda as JSON data; the Lambda raises the canary's scalable-target bounds and
desired count before each weight step, and in a rollback the primary's before the traffic goes
back to it (within ``waits.rollback_capacity_timeout_seconds``). Every wait of the Lambda's
for an endpoint that is not InService ends by ``waits.updating_timeout_seconds`` (a rollback's
by both together) in a rollback or a FAILED rollout, notified. The waits count instance starts at
the plan's per-start bound, derived from the measured start (sizing.ready_bound.rollout_waits;
the stack passes them in as ``waits``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sns as sns
from cdk_nag import NagSuppressions
from constructs import Construct

from lambdas.canary_controller import canary_scaling
from lambdas.canary_controller.capacity import CapacityPlan
from lambdas.canary_controller.names import (
    controller_function_name,
    sized_shadow_config_prefix,
    state_machine_name,
)
from lambdas.canary_controller.settings import EnvVar, lambda_environment
from sizing.ready_bound import RolloutWaits
from stacks.constructs.endpoint_ref import EndpointRef
from stacks.constructs.python_lambda import (
    checkov_skip,
    lambda_role,
    python_function,
    tidy_function,
)
from stacks.constructs.rollout_state_machine import execution_ended_rule, rollout_state_machine
from stacks.constructs.scaling import register_variant_bounds, scalable_targets_arn
from stacks.constructs.shadow_stage import ShadowStageConfig
from typed_config import RolloutConfig

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "lambdas" / "canary_controller"
#: What the controller may do besides its endpoint (``EndpointRef.grant``) and the variants'
#: bounds (``register_variant_bounds``): ``{sid: (actions, resources)}``, see
#: :func:`controller_statements`.
Statements = dict[str, tuple[list[str], list[str]]]

#: cdk-nag findings on the controller's role that do not apply, with the reason.
ROLE_NAG_SUPPRESSIONS: list[dict[str, Any]] = [
    {
        "id": "AwsSolutions-IAM5",
        "reason": "cloudwatch:GetMetricData and application-autoscaling:"
        "DescribeScalableTargets have no resource-level permissions; "
        "scalable-target and endpoint-config ARNs carry generated ids (the variants' "
        "targets and this endpoint's configs); each statement names one action.",
        "applies_to": [
            "Resource::*",
            "Resource::arn:<AWS::Partition>:application-autoscaling:<AWS::Region>:"
            "<AWS::AccountId>:scalable-target/*",
            "Resource::arn:<AWS::Partition>:sagemaker:<AWS::Region>:"
            "<AWS::AccountId>:endpoint-config/*",
        ],
    }
]
#: cdk-nag findings on the rollout state machine (its role's policy), with the reason.
STATE_MACHINE_NAG_SUPPRESSIONS: list[dict[str, Any]] = [
    {
        "id": "AwsSolutions-IAM5",
        "reason": "Step Functions may invoke the controller function and its versions "
        "(<function arn>:*), nothing else.",
        "applies_to": [{"regex": "/^Resource::<[A-Za-z0-9]+\\.Arn>:\\*$/g"}],
    },
    {
        "id": "AwsSolutions-IAM5",
        "reason": "X-Ray trace upload and CloudWatch Logs vended-delivery actions "
        "(logs:CreateLogDelivery etc.) do not support resource-level permissions.",
        "applies_to": ["Resource::*"],
    },
]
#: checkov's finding on the state table that does not apply, with the reason.
TABLE_CHECKOV_SKIP = {
    "CKV_AWS_119": "Rollout state only (step, times, reasons); encrypted with the "
    "AWS managed DynamoDB key, a customer key would add cost and nothing to protect."
}


def colon_arn(stack: Stack, service: str, resource: str, name: str) -> str:
    """The ARN ``arn:<partition>:<service>:<region>:<account>:<resource>:<name>``."""
    return stack.format_arn(
        service=service,
        resource=resource,
        resource_name=name,
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )


def watched_alarm_arns(
    stack: Stack, alarms: Sequence[cloudwatch.IAlarm], extra_alarm_names: Sequence[str]
) -> list[str]:
    """The ARNs of the alarms the controller reads: the construct's, then the config's extra ones
    (by name, in this stack's account and region)."""
    extra = [colon_arn(stack, "cloudwatch", "alarm", name) for name in extra_alarm_names]
    return [a.alarm_arn for a in alarms] + extra


def controller_statements(
    stack: Stack,
    *,
    alarm_arns: list[str],
    table_arn: str,
    state_machine_arn: str,
    topic: sns.ITopic,
) -> Statements:
    """What the controller may do besides its endpoint and the variants' bounds, one action (or
    one pair) per statement; a statement without resources is left out."""
    statements: Statements = {
        # A rollback reads the primary's target before raising its bounds (a target that does
        # not exist would be created by RegisterScalableTarget). Service Authorization
        # Reference, Application Auto Scaling: DescribeScalableTargets lists no resource
        # type, so the resource is "*".
        "ScalableTargets": (["application-autoscaling:DescribeScalableTargets"], ["*"]),
        "EndpointConfigs": (
            ["sagemaker:DescribeEndpointConfig"],
            [stack.format_arn(service="sagemaker", resource="endpoint-config", resource_name="*")],
        ),
        # Evidence per step: GetMetricData has no resource-level permissions (Service
        # Authorization Reference, Amazon CloudWatch: no resource type for GetMetricData).
        "Evidence": (["cloudwatch:GetMetricData"], ["*"]),
        "Alarms": (["cloudwatch:DescribeAlarms"], alarm_arns),
        "State": (["dynamodb:GetItem", "dynamodb:PutItem"], [table_arn]),
        "StartRollout": (["states:StartExecution"], [state_machine_arn]),
        "Notify": (["sns:Publish"], [topic.topic_arn]),
    }
    if topic.master_key is not None:  # explicit, not grant_publish: no kms:GenerateDataKey*
        statements["TopicKey"] = (
            ["kms:GenerateDataKey", "kms:Decrypt"],
            [topic.master_key.key_arn],
        )
    return {sid: statement for sid, statement in statements.items() if statement[1]}


def controller_environment(
    stack: Stack,
    *,
    endpoint_name: str,
    table_name: str,
    topic_arn: str,
    state_machine_arn: str,
    alarm_names: list[str],
    rollout: RolloutConfig,
    waits: RolloutWaits,
    capacity_plan: CapacityPlan,
    shadow_stage: str = "",
) -> dict[str, str]:
    """The controller function's environment (``settings.EnvVar``; the config's minutes in
    seconds, lists and the plan as JSON)."""
    return lambda_environment(
        {
            EnvVar.ENDPOINT_NAME: endpoint_name,
            EnvVar.TABLE_NAME: table_name,
            EnvVar.TOPIC_ARN: topic_arn,
            EnvVar.STATE_MACHINE_ARN: state_machine_arn,
            EnvVar.ALARM_NAMES: stack.to_json_string(alarm_names),
            EnvVar.STEPS_PERCENT: json.dumps(rollout.steps_percent),
            EnvVar.BAKE_SECONDS: str(rollout.bake_minutes * 60),
            EnvVar.CHECK_SECONDS: str(rollout.check_interval_minutes * 60),
            EnvVar.MIN_CANARY_INVOCATIONS: str(rollout.min_canary_invocations_per_step),
            EnvVar.MAX_ERROR_RATE_INCREASE_PERCENT: str(rollout.max_error_rate_increase_percent),
            EnvVar.EVIDENCE_TIMEOUT_SECONDS: str(rollout.evidence_timeout_minutes * 60),
            EnvVar.CAPACITY_TIMEOUT_SECONDS: str(waits.capacity_timeout_seconds),
            EnvVar.ROLLBACK_CAPACITY_TIMEOUT_SECONDS: str(waits.rollback_capacity_timeout_seconds),
            EnvVar.UPDATING_TIMEOUT_SECONDS: str(waits.updating_timeout_seconds),
            EnvVar.CAPACITY_PLAN: capacity_plan.to_json(),
            EnvVar.PRIMARY_VARIANT: "primary",
            EnvVar.CANARY_VARIANT: "canary",
            EnvVar.SHADOW_STAGE: shadow_stage,
        }
    )


class CanaryController(Construct):
    """``function``, ``state_machine``, ``execution_ended`` (the EventBridge rule), ``table``,
    ``role``; ``rollout`` is the config's section
    of that name, ``alarms`` the ones that stop the rollout (plus ``rollout.extra_alarm_names``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        endpoint: EndpointRef,
        rollout: RolloutConfig,
        waits: RolloutWaits,
        capacity_plan: CapacityPlan,
        alarms: Sequence[cloudwatch.IAlarm],
        topic: sns.ITopic,
        shadow: ShadowStageConfig | None = None,
        canary_config_arn: str | None = None,
        stage_update_timeout_seconds: int = 0,
    ) -> None:
        super().__init__(scope, construct_id)
        stack, endpoint_name = Stack.of(self), endpoint.endpoint_name
        self.alarm_names = [a.alarm_name for a in alarms] + list(rollout.extra_alarm_names)
        self.state_machine_name = state_machine_name(endpoint_name)
        state_machine_arn = colon_arn(stack, "states", "stateMachine", self.state_machine_name)
        self.table = self._state_table()
        self.role, log_group = lambda_role(
            self,
            description=f"Canary controller for {endpoint_name}: its endpoint, alarms, topic only",
        )
        self.capacity_plan = capacity_plan
        self._grant_controller_access(
            endpoint,
            controller_statements(
                stack,
                alarm_arns=watched_alarm_arns(stack, alarms, rollout.extra_alarm_names),
                table_arn=self.table.table_arn,
                state_machine_arn=state_machine_arn,
                topic=topic,
            ),
        )
        self.function = python_function(
            self,
            # Fixed name: `make canary-*` invokes it knowing only the endpoint name.
            function_name=controller_function_name(endpoint_name),
            package_dir=PACKAGE_DIR,
            role=self.role,
            log_group=log_group,
            timeout=Duration.seconds(60),
            description=f"Canary rollout controller for {endpoint_name}",
            environment=controller_environment(
                stack,
                endpoint_name=endpoint_name,
                table_name=self.table.table_name,
                topic_arn=topic.topic_arn,
                state_machine_arn=state_machine_arn,
                alarm_names=self.alarm_names,
                rollout=rollout,
                waits=waits,
                capacity_plan=self.capacity_plan,
                shadow_stage=shadow.rules(
                    stage_update_timeout_seconds=stage_update_timeout_seconds
                ).to_json()
                if shadow is not None
                else "",
            ),
        )
        if shadow is not None:
            assert canary_config_arn is not None
            self._grant_shadow_stage(endpoint, shadow, canary_config_arn)
        self.state_machine = rollout_state_machine(
            self,
            function=self.function,
            endpoint_name=endpoint_name,
            state_machine_name=self.state_machine_name,
        )
        self.execution_ended = execution_ended_rule(
            self,
            state_machine=self.state_machine,
            function=self.function,
            endpoint_name=endpoint_name,
        )
        self._answer_the_checkers()

    def _state_table(self) -> dynamodb.Table:
        """The rollout's record, one item per endpoint (also its lock)."""
        return dynamodb.Table(
            self,
            "State",
            partition_key=dynamodb.Attribute(
                name="endpoint_name", type=dynamodb.AttributeType.STRING
            ),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            # Rollout state only (the history is in the SNS messages and execution history).
            removal_policy=RemovalPolicy.DESTROY,
        )

    def _grant_controller_access(self, endpoint: EndpointRef, statements: Statements) -> None:
        """The role's permissions: its endpoint (describe, weights and capacities), the
        variants' scaling bounds, then ``statements``."""
        endpoint.grant(
            self.role,
            "sagemaker:DescribeEndpoint",
            "sagemaker:UpdateEndpointWeightsAndCapacities",
            sid="Endpoint",
        )
        # Its own bounds (raise/restore the canary's), and the primary's in a rollback (its
        # capacity before the canary's weight moves): SageMaker variant counts only.
        self.role.add_to_policy(register_variant_bounds(Stack.of(self), "CanaryScalingBounds"))
        for sid, (actions, resources) in statements.items():
            self.role.add_to_policy(
                iam.PolicyStatement(sid=sid, actions=actions, resources=resources)
            )

    def _grant_shadow_stage(
        self, endpoint: EndpointRef, shadow: ShadowStageConfig, canary_config_arn: str
    ) -> None:
        """The shadow stage's moves and evidence: UpdateEndpoint on this endpoint, to the two
        configs of the stage only (the endpoint and the endpoint config are both resources of
        UpdateEndpoint, as aws-cdk-lib's own SageMakerUpdateEndpoint task grants it), the
        capture of this endpoint (``ShadowStageConfig.grant_read``), and its probes
        (InvokeEndpoint and InvokeEndpointWithResponseStream on this endpoint:
        ``EndpointRef.grant_invoke``)."""
        endpoint.grant(self.role, "sagemaker:UpdateEndpoint", sid="StageMoves")
        # The shadow is sized when the stage starts, in a copy of the stack's shadow config the
        # controller creates (lambdas/canary_controller/aws.py, create_sized_config), named
        # names.sized_shadow_config_prefix(endpoint) + digest; SageMaker's ARNs are lower case.
        sized = Stack.of(self).format_arn(
            service="sagemaker",
            resource="endpoint-config",
            resource_name=sized_shadow_config_prefix(endpoint.endpoint_name).lower() + "*",
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="StageConfigs",
                actions=["sagemaker:UpdateEndpoint"],
                # Ref of an AWS::SageMaker::EndpointConfig is its ARN
                resources=[canary_config_arn, shadow.endpoint_config.ref, sized],
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="StageSizedConfigs", actions=["sagemaker:CreateEndpointConfig"],
                resources=[sized],
            )
        )  # fmt: skip
        # Moving the endpoint to a config that names a KmsKeyId (the shadow config's capture,
        # its volumes) needs the caller's kms:CreateGrant on that key: "CreateEndpoint ...
        # kms:CreateGrant (required only if the associated EndpointConfig has a KmsKeyId
        # specified)", UpdateEndpoint likewise (SageMaker API permissions reference,
        # https://docs.aws.amazon.com/sagemaker/latest/dg/api-permissions-reference.html).
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="StageConfigsKey",
                actions=["kms:CreateGrant", "kms:DescribeKey"],
                resources=[shadow.key.key_arn],
            )
        )
        shadow.grant_read(self.role, endpoint.endpoint_name)
        # The stage's probes, whole and streamed, on this endpoint only
        # (lambdas/canary_controller/probes.py).
        endpoint.grant_invoke(self.role, sid="StageProbes")
        if shadow.canary_scaling is not None:
            self._grant_canary_scaling(endpoint.endpoint_name)

    def _grant_canary_scaling(self, endpoint_name: str) -> None:
        """The canary's autoscaling, which the controller owns with a shadow stage
        (lambdas/canary_controller/canary_scaling.py): deregister it before the stage, put its
        target-tracking policy back after it, and read its policies (a target it does not own is
        never deregistered). Scalable-target ARNs carry a generated id and DescribeScalingPolicies
        has no resource type (Service Authorization Reference, Application Auto Scaling); the
        target-tracking alarms Application Auto Scaling creates and deletes for the policy are
        named after this endpoint's canary (``TargetTracking-endpoint/<name>/variant/canary-``)
        and are the only alarms granted."""
        stack = Stack.of(self)
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="CanaryScalingOwned",
                actions=[
                    "application-autoscaling:DeregisterScalableTarget",
                    "application-autoscaling:PutScalingPolicy",
                ],
                resources=[scalable_targets_arn(stack)],
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="CanaryScalingPolicies",
                actions=["application-autoscaling:DescribeScalingPolicies"],
                resources=["*"],
            )
        )
        prefix = canary_scaling.TRACKING_ALARM_PREFIX + canary_scaling.resource_id(
            endpoint_name, "canary"
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="CanaryTrackingAlarms",
                actions=[
                    "cloudwatch:PutMetricAlarm",
                    "cloudwatch:DescribeAlarms",
                    "cloudwatch:DeleteAlarms",
                ],
                resources=[colon_arn(stack, "cloudwatch", "alarm", f"{prefix}-*")],
            )
        )

    def _answer_the_checkers(self) -> None:
        """cfn-lint's duplicate DependsOn removed and the findings of cdk-nag and checkov that do
        not apply here suppressed, each with its reason."""
        tidy_function(self.function, self.role)
        tidy_function(self.state_machine, self.state_machine.role)
        NagSuppressions.add_resource_suppressions(
            self.role, ROLE_NAG_SUPPRESSIONS, apply_to_children=True
        )
        checkov_skip(self.table, TABLE_CHECKOV_SKIP)
        NagSuppressions.add_resource_suppressions(
            self.state_machine, STATE_MACHINE_NAG_SUPPRESSIONS, apply_to_children=True
        )
