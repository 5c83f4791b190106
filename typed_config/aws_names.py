"""Names AWS and the CDK fix, which the deploy-access stack grants on and the preflight checks:
one definition for both (the stack must not import the preflight, which pulls boto3 into synth)."""

from __future__ import annotations

#: The CDK's default bootstrap qualifier (cdk.json sets no other).
BOOTSTRAP_QUALIFIER = "hnb659fds"
#: Application Auto Scaling's service-linked role for SageMaker endpoint variants.
SCALING_ROLE = "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
SCALING_SERVICE = "sagemaker.application-autoscaling.amazonaws.com"
#: The CDK bootstrap's CloudFormation execution role (bootstrap-template.yaml,
#: ``cdk-${Qualifier}-cfn-exec-role-${AWS::AccountId}-${AWS::Region}``): the role the deploy role
#: passes to CloudFormation, which carries the ``--cloudformation-execution-policies``.
CFN_EXEC_ROLE = "cdk-{qualifier}-cfn-exec-role-{account}-{region}"
#: What a default ``cdk bootstrap`` attaches to that role.
ADMINISTRATOR_ACCESS = "AdministratorAccess"


def cfn_exec_role_name(account: str, region: str) -> str:
    """The bootstrap's CloudFormation execution role in ``account`` and ``region``."""
    return CFN_EXEC_ROLE.format(qualifier=BOOTSTRAP_QUALIFIER, account=account, region=region)
