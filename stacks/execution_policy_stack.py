"""ExecutionPolicyStack: the product's CloudFormation execution policies
(stacks/constructs/execution_policy.py), which ``cdk bootstrap --cloudformation-execution-policies``
attaches to the bootstrap's execution role instead of AdministratorAccess.

A stack of its own, not part of the deploy-access stack, for two reasons:

- bootstrap needs it first: the bootstrap template attaches the policies by ARN
  (``ManagedPolicyArns: !Ref CloudFormationExecutionPolicies``), and IAM attaches only a
  policy that exists, while the deploy-access stack deploys through the bootstrap's roles and
  imports the model release stack's exports;
- the role it limits must not be able to change it: deployed through the execution role, the
  policy would have to allow editing itself, and any ``cdk deploy`` could widen it.

So it is synthesized with the ``LegacyStackSynthesizer``, which has no asset and no bootstrap
role and uses "the CLI's current credentials to deploy the stack" (CDK API reference,
LegacyStackSynthesizer: https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.LegacyStackSynthesizer.html),
and a person deploys it with their own credentials before ``cdk bootstrap``: ``make
deploy-execution-policy ENV=<env>`` (docs/release-from-ci.md, "Deploy access (one-time)"). Its
template stays under the 50 KiB the CDK CLI sends without the bootstrap bucket (a test holds it).
Its output ``ExecutionPolicyArns`` is the value ``--cloudformation-execution-policies`` takes.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, CfnOutput, LegacyStackSynthesizer, Stack
from constructs import Construct

from stacks.constructs.execution_policy import ExecutionPolicies, stack_names
from typed_config import DeploymentConfig, artifact_bucket_name, execution_policy_names
from typed_config.aws_names import BOOTSTRAP_QUALIFIER


class ExecutionPolicyStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, cfg: DeploymentConfig, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, synthesizer=LegacyStackSynthesizer(), **kwargs)
        prefix = f"{cfg.project}-{cfg.env}"
        names = stack_names(
            self,
            prefix=prefix,
            endpoint=cfg.endpoint_name,
            # Without image.repository_name the image stack creates no repository (CDK builds
            # into the bootstrap's): the grant then names none of this product's.
            repository=cfg.image.repository_name or f"{prefix}-no-repository",
            bucket=artifact_bucket_name(cfg, Aws.ACCOUNT_ID),
            qualifier=BOOTSTRAP_QUALIFIER,
        )
        self.policies = ExecutionPolicies(
            self, "ExecutionPolicies", names=names, policy_names=execution_policy_names(cfg)
        )
        arns = ",".join(p.managed_policy_arn for p in self.policies.policies)
        CfnOutput(
            self,
            "ExecutionPolicyArns",
            value=arns,
            description="npx cdk bootstrap aws://<account>/<region> "
            "--cloudformation-execution-policies <this value>",
        )
