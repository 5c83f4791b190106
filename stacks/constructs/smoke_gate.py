"""Deploy smoke gate: a custom resource that fails the deployment if the endpoint does not answer.

The resource depends on the endpoint and carries the endpoint config name among its properties,
so it runs after every Create and after every Update that changes the endpoint (a new config),
and CloudFormation rolls the stack back when it fails. ``cfg.smoke_gate.enabled: false`` creates
nothing (``enabled`` is then False and the attributes are None).

The gate is the Provider framework's ``on_event`` handler, which the framework's own function
invokes synchronously; that function, like every Lambda, stops at 15 minutes (AWS Lambda quotas:
function timeout 900 s; CDK custom_resources, Provider Framework: an ``is_complete`` handler is
the way past the Lambda timeout). The gate needs minutes, not hours, so it stays a single
``on_event`` call whose timeout is :func:`gate_function_timeout` (always below the framework's)
and whose handler shares one deadline below it (lambdas/smoke_gate/handler.py).
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import CustomResource, Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import custom_resources as cr
from cdk_nag import NagSuppressions
from constructs import Construct

from lambdas.smoke_gate.handler import CALL_OVERRUN_SECONDS
from stacks.config import DeploymentConfig
from stacks.constructs.python_lambda import (
    LOG_GROUP_CHECKOV_SKIP,
    checkov_skip,
    endpoint_arn,
    lambda_role,
    python_function,
    tidy_function,
)

LAMBDA_DIR = Path(__file__).resolve().parents[2] / "lambdas" / "smoke_gate"
#: The Provider framework's onEvent function times out at the Lambda maximum (15 minutes).
PROVIDER_FRAMEWORK_TIMEOUT_SECONDS = 900
#: The gate must answer the framework this long before the framework itself is stopped.
FRAMEWORK_MARGIN_SECONDS = 60


def gate_function_timeout(timeout_seconds: int) -> int:
    """The gate Lambda's timeout: the gate's own deadline plus one call that may outlive it,
    capped below the Provider framework's (the handler then shortens its deadline to fit)."""
    return min(
        timeout_seconds + CALL_OVERRUN_SECONDS,
        PROVIDER_FRAMEWORK_TIMEOUT_SECONDS - FRAMEWORK_MARGIN_SECONDS,
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
        self.role, log_group = lambda_role(
            self,
            description=f"Smoke gate for {endpoint_name}: describe and invoke this endpoint only",
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["sagemaker:DescribeEndpoint", "sagemaker:InvokeEndpoint"],
                resources=[endpoint_arn(self, endpoint_name)],
            )
        )
        self.function = python_function(
            self,
            lambda_dir=LAMBDA_DIR,
            role=self.role,
            log_group=log_group,
            timeout=Duration.seconds(gate_function_timeout(gate.timeout_seconds)),
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
        checkov_skip(provider_logs, LOG_GROUP_CHECKOV_SKIP)
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
