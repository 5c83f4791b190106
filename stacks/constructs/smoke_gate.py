"""Deploy smoke gate: a custom resource that fails the deployment if the endpoint does not answer.

The resource depends on the endpoint and carries the endpoint config name among its properties,
so it runs after every Create and after every Update that changes the endpoint (a new config),
and CloudFormation rolls the stack back when it fails. ``cfg.smoke_gate.enabled: false`` creates
nothing (``enabled`` is then False and the attributes are None).
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import CfnResource, CustomResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import custom_resources as cr
from cdk_nag import NagSuppressions
from constructs import Construct, IConstruct

from stacks.config import DeploymentConfig

LAMBDA_DIR = Path(__file__).resolve().parents[2] / "lambdas" / "smoke_gate"
LAMBDA_RUNTIME = lambda_.Runtime.PYTHON_3_14


#: checkov findings that do not fit these functions, with the reason (Metadata.checkov.skip).
FUNCTION_CHECKOV_SKIPS = {
    "CKV_AWS_116": "Invoked synchronously (CloudFormation, Step Functions, the CLI); a DLQ only "
    "catches asynchronous invocations.",
    "CKV_AWS_117": "Calls only AWS APIs (SageMaker, CloudWatch, DynamoDB, SNS); no VPC resource "
    "to reach, and a VPC would add NAT/endpoint cost and cold-start time.",
    "CKV_AWS_115": "Reserved concurrency would be taken from the account pool (new accounts "
    "cannot reserve any); the controller serialises itself with a DynamoDB lock instead.",
    "CKV_AWS_173": "Environment holds resource names and rollout numbers only, no secrets; "
    "encrypted at rest with the AWS managed Lambda key.",
}
LOG_GROUP_CHECKOV_SKIP = {
    "CKV_AWS_158": "Holds rollout decisions and smoke-gate reasons only (no prompts or customer "
    "data); encrypted at rest by CloudWatch Logs' own key."
}


def checkov_skip(construct: IConstruct, skips: dict[str, str]) -> None:
    cfn = construct.node.default_child
    assert isinstance(cfn, CfnResource)
    cfn.add_metadata("checkov", {"skip": [{"id": k, "comment": v} for k, v in skips.items()]})


def tidy_function(function: IConstruct, role: IConstruct) -> None:
    """checkov skips for a function, and its DependsOn reduced to the role's policy: the
    ``Role`` GetAtt already orders function after role (cfn-lint W3005 flags the duplicate)."""
    checkov_skip(function, FUNCTION_CHECKOV_SKIPS)
    fn_cfn = function.node.default_child
    policy = role.node.try_find_child("DefaultPolicy")
    assert isinstance(fn_cfn, CfnResource) and policy is not None
    policy_cfn = policy.node.default_child
    assert isinstance(policy_cfn, CfnResource)
    fn_cfn.add_override("DependsOn", [Stack.of(function).get_logical_id(policy_cfn)])


def endpoint_arn(scope: Construct, endpoint_name: str) -> str:
    """SageMaker lowercases endpoint names in ARNs."""
    return Stack.of(scope).format_arn(
        service="sagemaker", resource="endpoint", resource_name=endpoint_name.lower()
    )


class SmokeGate(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cfg: DeploymentConfig,
        endpoint: sagemaker.CfnEndpoint,
        endpoint_name: str,
    ) -> None:
        super().__init__(scope, construct_id)
        gate = cfg.smoke_gate
        self.enabled = gate.enabled
        self.function: lambda_.Function | None = None
        self.provider: cr.Provider | None = None
        self.resource: CustomResource | None = None
        if not gate.enabled:
            return
        log_group = logs.LogGroup(
            self,
            "Logs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Smoke gate for {endpoint_name}: describe and invoke this endpoint only",
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["sagemaker:DescribeEndpoint", "sagemaker:InvokeEndpoint"],
                resources=[endpoint_arn(self, endpoint_name)],
            )
        )
        log_group.grant_write(self.role)
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=LAMBDA_RUNTIME,
            handler="handler.handler",
            code=lambda_.Code.from_asset(str(LAMBDA_DIR), exclude=["__pycache__", "*.pyc"]),
            role=self.role,
            log_group=log_group,
            timeout=Duration.seconds(gate.timeout_seconds + 60),
            memory_size=256,
            description=f"Deploy smoke gate for {endpoint_name} (every adapter + streaming)",
        )
        provider_logs = logs.LogGroup(
            self,
            "ProviderLogs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=self.function,
            log_group=provider_logs,
        )
        self.resource = CustomResource(
            self,
            "Resource",
            service_token=self.provider.service_token,
            resource_type="Custom::EndpointSmokeGate",
            properties={
                "EndpointName": endpoint_name,
                # A new endpoint config (any model/variant change) re-runs the gate.
                "EndpointConfigName": endpoint.endpoint_config_name,
                "Variants": list(type(cfg.variants).model_fields),
                "Adapters": [a.name for a in cfg.adapters],
                "Prompt": gate.prompt,
                "MaxTokens": gate.max_tokens,
                "TimeoutSeconds": gate.timeout_seconds,
            },
        )
        self.resource.node.add_dependency(endpoint)
        tidy_function(self.function, self.role)
        framework = self.provider.node.find_child("framework-onEvent")
        tidy_function(framework, framework.node.find_child("ServiceRole"))
        for group in (log_group, provider_logs):
            checkov_skip(group, LOG_GROUP_CHECKOV_SKIP)
        NagSuppressions.add_resource_suppressions(
            self.provider,
            [
                {
                    "id": "AwsSolutions-IAM4",
                    "reason": "CDK Provider framework function: AWSLambdaBasicExecutionRole only "
                    "lets it write its own logs; its one other permission is invoking the gate.",
                    "applies_to": [
                        "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                        "AWSLambdaBasicExecutionRole"
                    ],
                },
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": "CDK Provider framework may invoke the gate function and its "
                    "versions (<function arn>:*), nothing else.",
                    "applies_to": [{"regex": "/^Resource::<[A-Za-z0-9]+\\.Arn>:\\*$/g"}],
                },
            ],
            apply_to_children=True,
        )
