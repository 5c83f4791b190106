"""How the stacks keep what must outlive a stack without blocking a retry.

``RemovalPolicy.RETAIN`` (DeletionPolicy ``Retain``) also keeps a resource when the stack
operation that *created* it rolls back. For a resource with a fixed physical name (the endpoint's
log group ``/aws/sagemaker/Endpoints/<name>``, an ECR repository named in the config) the next
create then fails with "already exists": a failed first deploy blocked every retry.

``RETAIN_ON_UPDATE_OR_DELETE`` is CloudFormation's ``RetainExceptOnCreate``: "RetainExceptOnCreate
behaves like Retain for stack operations, except for the stack operation that initially created
the resource. If the stack operation that created the resource is rolled back, CloudFormation
deletes the resource" (AWS CloudFormation Template Reference, DeletionPolicy attribute;
CfnDeletionPolicy in the CDK API reference). Logs, images and keys still outlive an update that
removes them and a stack deletion.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy

#: For every resource that holds data worth keeping (logs, images, the keys that decrypt them).
KEEP_EXCEPT_FAILED_CREATE = RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE
