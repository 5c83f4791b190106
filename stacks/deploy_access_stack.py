"""DeployAccessStack: the role GitHub Actions assumes (OIDC, no long-lived keys) to release one
environment, and the account's GitHub OIDC provider (``deploy_access`` in config/<env>.yaml).

Synthesized only when the config has a ``deploy_access`` section, and deployed by a person, once
per environment and again after a change, with ``make deploy-access ENV=...``: the CDK CLI then
asks before any IAM change that broadens access (``--require-approval broadening``, its
default). The role may do what the release's make targets call and nothing else: assume the CDK
bootstrap roles (``cdk deploy`` acts through them, and CloudFormation through the execution
role, which carries the product's execution policies: stacks/execution_policy_stack.py), push to
and read the config's ECR repository, read the endpoint and raise its counts before a deploy,
invoke the canary controller, run and watch the model-preparation job, read model releases, and
the preflight's reads. Its trust admits one repository's named GitHub environments, each an
exact ``sub``; its MaxSessionDuration is the longest session one of its release jobs asks for
(sizing/release_jobs.py: each job's bound from its steps' own limits), and at least
``deploy_access.max_session_hours``.

Order on a new account: ``make deploy-execution-policy``, ``cdk bootstrap
--cloudformation-execution-policies <its ExecutionPolicyArns>``, ``make deploy-model-release``
(this stack imports that stack's job role and bucket key ARNs, its exports
``<project>-<env>-model-prep-role-arn`` and ``-model-artifact-key-arn``), then ``make
deploy-access``. While this stack imports them, CloudFormation refuses a release-stack update
that would replace that role or key (an export in use cannot change): such an update needs this
stack deleted first and deployed again after.

One OIDC provider per URL per account: where dev and prod share an account, exactly one of the
two configs says ``oidc_provider: create`` (deploy that one first) and the other ``existing``.

Cross-account prod. Here each account gets its own role through its own stack: CI assumes prod's
role in prod's account directly (prod's account has its own provider), and neither account
trusts the other. If CI's role lives in a tooling account instead, that role assumes the target
account's bootstrap roles directly, which the target allows only when bootstrapped with
``cdk bootstrap aws://<prod account>/<region> --trust <tooling account>
--trust-for-lookup <tooling account> --cloudformation-execution-policies <policy ARN>``
(``--trust`` requires an explicit execution policy: the CLI refuses to default to
AdministratorAccess when trusting another account). docs/release-from-ci.md, "Deploy access
(one-time)".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import ArnFormat, Aws, CfnOutput, Duration, Fn, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from lambdas.canary_controller.names import controller_function_name
from sizing.release_jobs import role_max_session_seconds
from stacks.constructs.deploy_access import DeployRole, github_oidc_provider
from typed_config import (
    DeploymentConfig,
    artifact_bucket_name,
    environment_stack_names,
    execution_policy_stack_name,
    github_subjects,
    preparation_job_prefix,
    pull_request_subject,
    release_stack_name,
)
from typed_config.aws_names import BOOTSTRAP_QUALIFIER, CFN_EXEC_ROLE, SCALING_ROLE, SCALING_SERVICE

# The preflight's values, reused: the bootstrap qualifier whose version parameter it reads (and
# whose roles cdk deploy assumes), and the scaling service-linked role it looks up.
from typed_config.generated_names import adapter_component_name, base_component_name

#: ModelReleaseStack's exports (stacks/model_release_stack.py, ``<project>-<env>-<name>``) that
#: this stack imports; tests/infra/test_deploy_access_stack.py checks that they exist there.
PREP_ROLE_EXPORT = "model-prep-role-arn"
ARTIFACT_KEY_EXPORT = "model-artifact-key-arn"


class DeployAccessStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cfg: DeploymentConfig,
        promotion_source: DeploymentConfig | None = None,
        **kwargs: Any,
    ) -> None:
        """``promotion_source``: the ``promotion.from_env`` environment's config, whose image and
        model releases this environment's role copies (same account and region)."""
        super().__init__(scope, construct_id, **kwargs)
        access, prefix = cfg.deploy_access, f"{cfg.project}-{cfg.env}"
        if access is None or cfg.image.repository_name is None:
            raise ValueError("DeployAccessStack needs deploy_access and image.repository_name")
        provider = github_oidc_provider(
            self, "GitHubOidcProvider", create=access.oidc_provider == "create"
        )
        subjects = github_subjects(cfg)
        self.deploy = DeployRole(
            self,
            "Deploy",
            provider=provider,
            subjects=subjects,
            # The jobs' role-duration-seconds (make ci-config) never exceed it: STS refuses a
            # DurationSeconds above the role's MaxSessionDuration (AssumeRoleWithWebIdentity).
            max_session=Duration.seconds(role_max_session_seconds(cfg)),
            description=f"GitHub Actions release of {prefix} ({access.repository})",
        )
        self.deploy.allow_cdk_bootstrap_roles(BOOTSTRAP_QUALIFIER)
        self.deploy.allow_preflight(**self._preflight_reads())
        pr_subject = pull_request_subject(cfg)
        assert pr_subject is not None
        self.diff = self._pull_request_diff_role(cfg, provider, pr_subject, prefix)
        self._allow_release_steps(cfg, cfg.image.repository_name, prefix, promotion_source)
        self._outputs(
            provider,
            created=access.oidc_provider == "create",
            subjects=subjects,
            pr_subject=pr_subject,
        )

    def _pull_request_diff_role(
        self,
        cfg: DeploymentConfig,
        provider: iam.IOpenIdConnectProvider,
        pr_subject: str,
        prefix: str,
    ) -> DeployRole:
        """The pull request workflow's `make diff DIFF_METHOD=template`: a role of its own, since
        the deploy role trusts named environments only and any branch of a pull request could
        otherwise run with it. This one trusts the pull_request subject and may read this
        environment's deployed templates and do the preflight's reads; not the CDK lookup role,
        whose ReadOnlyAccess reads the whole account (S3 objects and logs included)."""
        diff = DeployRole(
            self,
            "PullRequestDiff",
            provider=provider,
            subjects=[pr_subject],
            max_session=Duration.hours(1),
            description=f"GitHub Actions read-only cdk diff of {prefix} on pull requests",
        )
        diff.allow_template_reads([*environment_stack_names(cfg), execution_policy_stack_name(cfg)])
        diff.allow_preflight(**self._preflight_reads())
        return diff

    def _preflight_reads(self) -> dict[str, str]:
        """The preflight's reads (DeployRole.allow_preflight): the bootstrap version parameter,
        the scaling service-linked role and the bootstrap's CloudFormation execution role."""
        return {
            "bootstrap_version_parameter": f"/cdk-bootstrap/{BOOTSTRAP_QUALIFIER}/version",
            "scaling_role": f"aws-service-role/{SCALING_SERVICE}/{SCALING_ROLE}",
            "execution_role": CFN_EXEC_ROLE.format(
                qualifier=BOOTSTRAP_QUALIFIER, account=self.account, region=self.region
            ),
        }

    def _allow_release_steps(
        self,
        cfg: DeploymentConfig,
        repository_name: str,
        prefix: str,
        promotion_source: DeploymentConfig | None,
    ) -> None:
        """What the release's make targets do beyond CDK: the image repository, the endpoint and
        the canary controller, the model preparation job (and its token secret), the releases,
        and (with ``promotion_source``) the copy of that environment's image and release."""
        self.deploy.allow_ecr_repository(
            self.format_arn(service="ecr", resource="repository", resource_name=repository_name)
        )
        self.deploy.allow_endpoint_operations(
            endpoint_name=cfg.endpoint_name,
            controller_function_arn=self.format_arn(
                service="lambda",
                resource="function",
                resource_name=controller_function_name(cfg.endpoint_name),
                arn_format=ArnFormat.COLON_RESOURCE_NAME,
            ),
        )
        self.deploy.allow_model_preparation(
            job_name_prefix=preparation_job_prefix(cfg),
            job_role_arn=Fn.import_value(f"{prefix}-{PREP_ROLE_EXPORT}"),
            release_stack_name=release_stack_name(cfg),
        )
        if cfg.model_prep.hf_token_secret is not None:
            self.deploy.allow_token_secret_check(
                secret_name=cfg.model_prep.hf_token_secret,
                job_role_arn=Fn.import_value(f"{prefix}-{PREP_ROLE_EXPORT}"),
            )
        self.deploy.allow_model_releases(
            bucket_name=artifact_bucket_name(cfg, Aws.ACCOUNT_ID),
            prefix=cfg.model_prep.artifact_prefix,
            key_arn=Fn.import_value(f"{prefix}-{ARTIFACT_KEY_EXPORT}"),
        )
        self.deploy.allow_adapter_releases(
            endpoint_name=cfg.endpoint_name,
            base_component=base_component_name(cfg.project, cfg.env),
            component_prefix=adapter_component_name(cfg.project, cfg.env, ""),
            bucket_name=artifact_bucket_name(cfg, Aws.ACCOUNT_ID),
        )
        if promotion_source is not None:
            src = promotion_source
            self.deploy.allow_promotion(
                source_repository_arn=self.format_arn(
                    service="ecr",
                    resource="repository",
                    resource_name=str(src.image.repository_name),
                ),
                source_bucket_name=artifact_bucket_name(src, Aws.ACCOUNT_ID),
                source_prefix=src.model_prep.artifact_prefix,
                source_key_arn=Fn.import_value(f"{src.project}-{src.env}-{ARTIFACT_KEY_EXPORT}"),
                bucket_name=artifact_bucket_name(cfg, Aws.ACCOUNT_ID),
                prefix=cfg.model_prep.artifact_prefix,
            )

    def _outputs(
        self,
        provider: iam.IOpenIdConnectProvider,
        *,
        created: bool,
        subjects: Sequence[str],
        pr_subject: str,
    ) -> None:
        """The two roles' ARNs, each the ``role-to-assume`` of its workflow, and the provider's."""
        CfnOutput(
            self,
            "DeployRoleArn",
            value=self.deploy.role.role_arn,
            description="role-to-assume of the release workflow; trusts " + ", ".join(subjects),
        )
        CfnOutput(
            self,
            "DiffRoleArn",
            value=self.diff.role.role_arn,
            description="role-to-assume of the pull request workflow's cdk diff; trusts "
            + pr_subject,
        )
        CfnOutput(
            self,
            "GitHubOidcProviderArn",
            value=provider.open_id_connect_provider_arn,
            description="the account's GitHub OIDC provider, "
            + ("created by this stack" if created else "imported"),
        )
