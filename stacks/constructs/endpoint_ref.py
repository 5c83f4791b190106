"""The serving endpoint as its neighbours see it: name, ARN, IAM grants on it, its metrics.

The endpoint stack makes one from the endpoint name and hands it to every construct that
watches or calls the endpoint (rollback alarms, monitoring, dashboard, canary controller, smoke
gate), so none of them writes a PolicyStatement or a metric for the endpoint by hand. A value,
not a construct: the rollback alarms exist before the endpoint (its AutoRollbackConfiguration
names them), and the endpoint's name is fixed in config, so its ARN and metrics are known first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Unpack

from aws_cdk import Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from constructs import Construct

from stacks.constructs.metrics import MetricOptions, variant_metric
from typed_config import VariantName


def endpoint_arn(scope: Construct, endpoint_name: str) -> str:
    """SageMaker lowercases endpoint names in ARNs."""
    return Stack.of(scope).format_arn(
        service="sagemaker", resource="endpoint", resource_name=endpoint_name.lower()
    )


@dataclass(frozen=True)
class EndpointRef:
    endpoint_name: str
    endpoint_arn: str

    @classmethod
    def of(cls, scope: Construct, endpoint_name: str) -> EndpointRef:
        """The endpoint named ``endpoint_name`` in ``scope``'s stack (account and region)."""
        return cls(endpoint_name, endpoint_arn(scope, endpoint_name))

    def grant(self, grantee: iam.IGrantable, *actions: str, sid: str | None = None) -> None:
        """One statement allowing ``actions`` on this endpoint only, in ``grantee``'s policy."""
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(sid=sid, actions=list(actions), resources=[self.endpoint_arn])
        )

    def grant_invoke(self, grantee: iam.IGrantable, *, sid: str | None = None) -> None:
        """Invoke this endpoint, whole or streamed, and read its status (a caller checks it is
        InService first). AWS's two sources disagree on the streamed call: the SageMaker API
        reference says "your IAM permissions must allow the sagemaker:InvokeEndpoint action"
        (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_InvokeEndpointWithResponseStream.html),
        while the Service Authorization Reference lists sagemaker:InvokeEndpointWithResponseStream
        as an action of its own; both are granted, so either reading holds
        (tools/authorization checks both)."""
        self.grant(
            grantee,
            "sagemaker:DescribeEndpoint",
            "sagemaker:InvokeEndpoint",
            "sagemaker:InvokeEndpointWithResponseStream",
            sid=sid,
        )

    def metric(
        self, variant: VariantName, name: str, **options: Unpack[MetricOptions]
    ) -> cloudwatch.Metric:
        """``name`` for one of this endpoint's variants (``metrics.variant_metric``)."""
        return variant_metric(self.endpoint_name, variant, name, **options)

    def metric_invocation_5xx_errors(self, variant: VariantName) -> cloudwatch.Metric:
        """5XX answers of ``variant`` per minute (SageMaker's Invocation5XXErrors, summed)."""
        return self.metric(variant, "Invocation5XXErrors", statistic="Sum")

    def metric_model_latency(self, variant: VariantName, statistic: str) -> cloudwatch.Metric:
        """``variant``'s ModelLatency each minute, in microseconds (``MICROSECONDS_PER_MS``)."""
        return self.metric(variant, "ModelLatency", statistic=statistic)
