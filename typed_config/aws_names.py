"""Names AWS and the CDK fix, which the deploy-access stack grants on and the preflight checks:
one definition for both (the stack must not import the preflight, which pulls boto3 into synth)."""

from __future__ import annotations

#: The CDK's default bootstrap qualifier (cdk.json sets no other).
BOOTSTRAP_QUALIFIER = "hnb659fds"
#: Application Auto Scaling's service-linked role for SageMaker endpoint variants.
SCALING_ROLE = "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
SCALING_SERVICE = "sagemaker.application-autoscaling.amazonaws.com"
