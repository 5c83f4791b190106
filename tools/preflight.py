"""`make diff` / `make deploy` preflight: say what is missing at the AWS edge before the CDK does.

Without it the CDK ends in "Unable to resolve AWS account to use" or a bootstrap stack error,
neither of which names the fix. ``python -m tools.preflight --env prod`` checks, in order:

1. credentials: botocore finds some (env vars, a profile, SSO, an instance role);
2. identity: STS GetCallerIdentity answers, and the account matches ``account`` in the config
   when the config pins one;
3. bootstrap: the CDK bootstrap version parameter exists in the config's region (SSM
   ``/cdk-bootstrap/<qualifier>/version``, which ``cdk bootstrap`` writes; the CDK reads the same
   parameter before every deploy: "Bootstrapping your environment", AWS CDK developer guide).

4. capacity: the Service Quotas value of ``<instance type> for endpoint usage`` for each variant's
   type against the plan's peak (blue + green at the promotion deploy,
   ``sizing.plan_deploy.deploy_section``), and of ``<type> for training job usage`` (``spot
   training job usage`` with ``use_spot``) for the preparation job's type, at least 1. Quota
   names as "Amazon SageMaker AI endpoints and quotas" (AWS General Reference) lists them;
   ListServiceQuotas returns only quotas with an applied value, so a missing one is read from
   ListAWSDefaultServiceQuotas;
5. the Application Auto Scaling service-linked role for SageMaker endpoints
   (``AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint``), which registering the
   variants' scalable targets needs. Missing, it is a note, not a stop: "Application Auto
   Scaling creates a service-linked role for the target service" the first time anyone in the
   account calls RegisterScalableTarget for it, when the caller may iam:CreateServiceLinkedRole
   (Application Auto Scaling User Guide, "Service-linked roles for Application Auto Scaling");
   the deploy's RegisterScalableTarget is CloudFormation's, through the CDK bootstrap's
   execution role. The note says how to create it by hand where that role may not;
6. the Hugging Face token secret (``model_prep.hf_token_secret``): Secrets Manager
   DescribeSecret finds it in the config's region, and IAM SimulatePrincipalPolicy says the
   preparation job's role (the release stack's output) is ``allowed``
   secretsmanager:GetSecretValue on it. The simulation evaluates the role's own policies, not
   the secret's resource policy or its KMS key's (IAM API reference, SimulatePrincipalPolicy:
   "You can optionally include ... one resource-based policy"); a secret under a customer key
   also needs kms:Decrypt for the role. Checked before any instance starts.

7. the CloudFormation execution role of the bootstrap (``cdk-<qualifier>-cfn-exec-role-<account>-
   <region>``, IAM ListAttachedRolePolicies): it must not carry AdministratorAccess (what a
   default ``cdk bootstrap`` attaches) and must carry every one of this environment's execution
   policies (``<project>-<env>-cfn-exec-*``, stacks/execution_policy_stack.py). Otherwise the
   finding names the fix: ``make deploy-execution-policy`` once, then ``cdk bootstrap
   --cloudformation-execution-policies`` with those ARNs (and any other environment's product
   policies the role carries, kept).

Per target (``--for``): each checks credentials, the account and the bootstrap, then only what
it needs (:data:`CHECKS`): ``deploy-access`` changes IAM only and ``deploy-repository`` ECR only,
so neither waits on prod's endpoint quota; ``prepare-model`` needs the training quota and the
token secret; ``deploy`` (and ``diff``) the endpoint quota and the scaling role; every target
that deploys through the bootstrap's roles the execution role; ``deploy-execution-policy``
(which runs before ``cdk bootstrap``, with a person's credentials) the credentials and the
account only; ``all`` (plain ``make preflight``) everything.

Each failure prints what is missing, the command that fixes it, and that ``make synth`` and
``make demo`` need no AWS account. Exit 0 when all pass (notes printed), 2 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from sizing.fit_checks import load_config
from sizing.plan_deploy import deploy_section
from sizing.shadow_plan import shadow_section
from stacks.model_release_stack import PREP_ROLE_OUTPUT
from tools import REPO_ROOT
from tools.aws_command import NO_CREDENTIALS, OFFLINE_HINT, error_code
from typed_config import (
    ConfigError,
    DeploymentConfig,
    config_path,
    execution_policy_names,
    release_stack_name,
)
from typed_config.aws_names import (
    ADMINISTRATOR_ACCESS,
    BOOTSTRAP_QUALIFIER,
    SCALING_ROLE,
    SCALING_SERVICE,
    cfn_exec_role_name,
)

#: What each target checks beyond credentials, account and bootstrap (module docstring).
CHECKS: dict[str, frozenset[str]] = {
    "all": frozenset(
        {"endpoint-quota", "training-quota", "scaling-role", "token-secret", "execution-role"}
    ),
    "deploy": frozenset({"endpoint-quota", "scaling-role", "execution-role"}),
    "prepare-model": frozenset({"training-quota", "token-secret"}),
    "deploy-model-release": frozenset({"execution-role"}),
    "deploy-access": frozenset({"execution-role"}),
    "deploy-repository": frozenset({"execution-role"}),
    # Before the bootstrap exists: no bootstrap check either (:func:`check`'s ``bootstrap``).
    "deploy-execution-policy": frozenset(),
}
#: Targets that run before ``cdk bootstrap``.
BEFORE_BOOTSTRAP = frozenset({"deploy-execution-policy"})


def check(
    *,
    region: str,
    account: str | None,
    session: Any,
    client: Callable[[str], Any],
    bootstrap: bool = True,
    identity_out: dict[str, str] | None = None,
    env: str | None = None,
) -> list[str]:
    """The problems found, each one line naming what is missing and how to fix it;
    ``bootstrap``: whether to check the bootstrap; ``identity_out`` receives the caller's
    ``Account`` and ``Arn``; ``env``: the environment the fix commands name."""
    if session.get_credentials() is None:
        return [NO_CREDENTIALS]
    try:
        identity = client("sts").get_caller_identity()
    except (ClientError, BotoCoreError) as exc:
        return [f"the AWS credentials were refused by STS ({exc}): refresh or replace them"]
    if identity_out is not None:
        identity_out.update({k: str(identity.get(k, "")) for k in ("Account", "Arn")})
    problems: list[str] = []
    if account and identity.get("Account") != account:
        problems.append(
            f"the credentials are for account {identity.get('Account')}, the config deploys to "
            f"{account}: switch profile, or change `account` in the config"
        )
    if not bootstrap:
        return problems
    name = f"/cdk-bootstrap/{BOOTSTRAP_QUALIFIER}/version"
    try:
        client("ssm").get_parameter(Name=name)
    except ClientError as exc:
        code = error_code(exc)
        if code == "ParameterNotFound":
            fix = (
                f"run `make deploy-execution-policy ENV={env}`, then `make bootstrap ENV={env}` "
                "(the product's execution policies, not AdministratorAccess)"
                if env
                else f"run `npx cdk bootstrap aws://{identity.get('Account')}/{region}`"
            )
            problems.append(
                f"account {identity.get('Account')} is not CDK-bootstrapped in {region} "
                f"(no SSM parameter {name}): {fix}"
            )
        else:
            problems.append(f"could not read {name} in {region} ({code}): {exc}")
    except BotoCoreError as exc:
        problems.append(f"could not reach SSM in {region}: {exc}")
    return problems


def quotas_needed(cfg: DeploymentConfig, checks: frozenset[str] = CHECKS["all"]) -> dict[str, int]:
    """``{quota name: instances}`` a first deploy and a model preparation need (those of
    ``checks``: ``endpoint-quota``, ``training-quota``)."""
    needed: dict[str, int] = {}
    if "endpoint-quota" in checks:
        by_type = dict(deploy_section(cfg)["instance_quota_needed"])
        # a shadow stage's moves hold their own peak (sizing.shadow_plan): the larger counts
        shadow = shadow_section(cfg)
        for itype, n in (shadow["instance_quota_needed"] if shadow else {}).items():
            by_type[itype] = max(by_type.get(itype, 0), n)
        needed = {f"{itype} for endpoint usage": n for itype, n in by_type.items()}
    if "training-quota" in checks:
        kind = "spot training job usage" if cfg.model_prep.use_spot else "training job usage"
        needed[f"{cfg.model_prep.instance_type} for {kind}"] = 1
    return needed


def request_command(region: str, code: str, n: int) -> str:
    """The AWS CLI command that asks for SageMaker quota ``code`` to be raised to ``n``."""
    return (
        f"aws service-quotas request-service-quota-increase --region {region} --service-code "
        f"sagemaker --quota-code {code} --desired-value {n}"
    )


def quota_report(cfg: DeploymentConfig) -> str:
    """``make quotas``: every SageMaker quota the plan needs, its figure, and the two commands
    that raise it (the quota code looked up by its name, then the request). Offline."""
    lines = [
        f"config/{cfg.env}.yaml needs these SageMaker quotas in {cfg.region} (Service Quotas; "
        f"the endpoint's at the plan's peak, a deploy or the shadow stage included; `make "
        f"preflight ENV={cfg.env}` checks them against the account):"
    ]
    needed = sorted(quotas_needed(cfg).items())
    lines += [f"  {name}: {n}" for name, n in needed]
    lines.append("To raise one: its quota code by name, then the request (AWS reviews it):")
    for name, n in needed:
        lookup = (
            f"aws service-quotas list-aws-default-service-quotas --region {cfg.region} "
            f"--service-code sagemaker --query \"Quotas[?QuotaName=='{name}'].QuotaCode\" "
            "--output text"
        )
        lines += [f"  code=$({lookup})", f"  {request_command(cfg.region, '$code', n)}"]
    return "\n".join(lines)


def _quota_values(sq: Any, names: set[str]) -> dict[str, tuple[float, str]]:
    """``{name: (value, quota code)}``: applied values, then defaults for the rest."""
    found: dict[str, tuple[float, str]] = {}
    for op in ("list_service_quotas", "list_aws_default_service_quotas"):
        for page in sq.get_paginator(op).paginate(ServiceCode="sagemaker"):
            for q in page.get("Quotas", []):
                if q["QuotaName"] in names and q["QuotaName"] not in found:
                    found[q["QuotaName"]] = (float(q["Value"]), str(q["QuotaCode"]))
        if names <= set(found):
            break
    return found


def capacity_check(
    cfg: DeploymentConfig,
    client: Callable[[str], Any],
    checks: frozenset[str] = CHECKS["all"],
    notes: list[str] | None = None,
) -> list[str]:
    """Quotas and the scaling role (module docstring, 4 and 5), one line per problem; the
    missing scaling role is appended to ``notes`` instead."""
    problems: list[str] = []
    needed = quotas_needed(cfg, checks)
    if not needed:
        return problems + (scaling_role_check(client, notes) if "scaling-role" in checks else [])
    have: dict[str, tuple[float, str]] | None
    try:
        have = _quota_values(client("service-quotas"), set(needed))
    except (ClientError, BotoCoreError) as exc:
        have = None
        problems.append(
            f"could not read SageMaker's Service Quotas in {cfg.region} ({exc}): the preflight "
            "needs servicequotas:ListServiceQuotas and ListAWSDefaultServiceQuotas"
        )
    for name, n in sorted(needed.items()):
        if have is None:
            break  # unread: said once above, not once per quota
        if name not in have:
            problems.append(f"no quota '{name}' in {cfg.region}: is the type offered there?")
        elif have[name][0] < n:
            value, code = have[name]
            problems.append(
                f"quota '{name}' is {value:g}, the plan needs {n}: "
                f"`{request_command(cfg.region, code, n)}`"
            )
    if "scaling-role" in checks:
        problems += scaling_role_check(client, notes)
    return problems


def scaling_role_check(client: Callable[[str], Any], notes: list[str] | None) -> list[str]:
    """The scaling service-linked role: missing is a note (AWS creates it at the first
    RegisterScalableTarget, module docstring 5), unreadable a problem."""
    try:
        client("iam").get_role(RoleName=SCALING_ROLE)
    except ClientError as exc:
        if error_code(exc) == "NoSuchEntity":
            if notes is not None:
                notes.append(
                    f"the service-linked role {SCALING_ROLE} does not exist yet: Application "
                    "Auto Scaling creates it at the first RegisterScalableTarget when the caller "
                    "may iam:CreateServiceLinkedRole (the CDK bootstrap's CloudFormation "
                    "execution role); where it may not, create it once: `aws iam "
                    f"create-service-linked-role --aws-service-name {SCALING_SERVICE}`"
                )
            return []
        return [f"could not read the role {SCALING_ROLE} ({error_code(exc)}): {exc}"]
    except BotoCoreError as exc:
        return [f"could not reach IAM: {exc}"]
    return []


def execution_role_check(
    cfg: DeploymentConfig, client: Callable[[str], Any], *, account: str, partition: str
) -> list[str]:
    """The bootstrap's CloudFormation execution role carries this environment's execution
    policies and not AdministratorAccess (module docstring, 7)."""
    role = cfn_exec_role_name(account, cfg.region)
    try:
        pages = client("iam").get_paginator("list_attached_role_policies").paginate(RoleName=role)
        attached = [str(p["PolicyArn"]) for page in pages for p in page["AttachedPolicies"]]
    except ClientError as exc:
        if error_code(exc) == "NoSuchEntity":
            return [
                f"the CDK bootstrap of {account} in {cfg.region} has no CloudFormation execution "
                f"role {role} (bootstrapped with another qualifier or template?): bootstrap "
                "with the default qualifier and the product's execution policies (docs/"
                'release-from-ci.md, "Deploy access (one-time)")'
            ]
        return [
            f"could not read the policies attached to {role} ({error_code(exc)}): the preflight "
            "needs iam:ListAttachedRolePolicies on it"
        ]
    except BotoCoreError as exc:
        return [f"could not reach IAM: {exc}"]
    admin = f"arn:{partition}:iam::aws:policy/{ADMINISTRATOR_ACCESS}"
    ours = [f"arn:{partition}:iam::{account}:policy/{n}" for n in execution_policy_names(cfg)]
    missing = [arn for arn in ours if arn not in attached]
    if admin not in attached and not missing:
        return []
    # Another environment's product policies (dev and prod in one account) stay attached.
    keep = [arn for arn in attached if arn != admin]
    wanted = ",".join(keep + [arn for arn in ours if arn not in keep])
    fix = (
        f"create them once with `make deploy-execution-policy ENV={cfg.env}` (your own "
        f"credentials), then `make bootstrap ENV={cfg.env}`, which runs "
        f"`npx cdk bootstrap aws://{account}/{cfg.region} "
        f"--cloudformation-execution-policies {wanted}`"
    )
    if admin in attached:
        return [
            f"the CDK bootstrap's CloudFormation execution role {role} carries "
            f"{ADMINISTRATOR_ACCESS}: every cdk deploy (and the CI deploy role that passes the "
            "role) may do anything in the account. Attach the product's execution policies "
            f"instead: {fix}"
        ]
    names = ", ".join(arn.rsplit("/", 1)[1] for arn in missing)
    return [
        f"the CDK bootstrap's CloudFormation execution role {role} does not carry {names}, "
        f"so CloudFormation may not create {cfg.env}'s resources: {fix}"
    ]


def release_stack_output(cfn: Any, stack: str, key_suffix: str) -> str | None:
    """An output of the release stack; None when the stack is not deployed yet."""
    try:
        outputs = cfn.describe_stacks(StackName=stack)["Stacks"][0].get("Outputs", [])
    except ClientError as exc:
        if error_code(exc) == "ValidationError":  # "Stack with id ... does not exist"
            return None
        raise
    for out in outputs:
        if str(out["OutputKey"]).endswith(key_suffix):
            return str(out["OutputValue"])
    return None


def token_secret_check(
    cfg: DeploymentConfig, client: Callable[[str], Any], notes: list[str] | None = None
) -> list[str]:
    """model_prep.hf_token_secret exists and the job role may read it (module docstring, 6)."""
    name = cfg.model_prep.hf_token_secret
    if name is None:
        return []
    field = "model_prep.hf_token_secret"
    try:
        arn = str(client("secretsmanager").describe_secret(SecretId=name)["ARN"])
    except ClientError as exc:
        if error_code(exc) == "ResourceNotFoundException":
            return [
                f"{field}: no secret {name} in {cfg.region}: create it with a Hugging Face token "
                f"of an account that accepted {cfg.model.source}'s license: `aws secretsmanager "
                f'create-secret --region {cfg.region} --name {name} --secret-string "$HF_TOKEN"`'
            ]
        return [f"{field}: could not read the secret {name} ({error_code(exc)}): {exc}"]
    except BotoCoreError as exc:
        return [f"{field}: could not reach Secrets Manager in {cfg.region}: {exc}"]
    stack = release_stack_name(cfg)
    try:
        role = release_stack_output(client("cloudformation"), stack, PREP_ROLE_OUTPUT)
    except (ClientError, BotoCoreError) as exc:
        return [f"{field}: could not read the stack {stack}'s outputs ({exc})"]
    if role is None:
        if notes is not None:
            notes.append(
                f"{field}: the secret {name} exists; whether the job role may read it is "
                f"checked once {stack} is deployed (make deploy-model-release ENV={cfg.env})"
            )
        return []
    try:
        results = client("iam").simulate_principal_policy(
            PolicySourceArn=role, ActionNames=["secretsmanager:GetSecretValue"], ResourceArns=[arn]
        )["EvaluationResults"]
    except (ClientError, BotoCoreError) as exc:
        return [f"{field}: could not simulate the job role's access to {name} ({exc})"]
    decision = results[0]["EvalDecision"] if results else "no result"
    if decision != "allowed":
        return [
            f"{field}: the preparation job's role {role} may not read the secret {name} "
            f"(IAM simulation: {decision}): `make deploy-model-release ENV={cfg.env}` grants "
            "the secret this config names"
        ]
    return []


def main(argv: list[str] | None = None, *, session: Any = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.preflight", description=__doc__)
    parser.add_argument("--env", required=True)
    parser.add_argument("--for", dest="target", choices=sorted(CHECKS), default="all")
    parser.add_argument(
        "--quotas", action="store_true", help="print the quotas the plan needs (offline), no check"
    )
    args = parser.parse_args(argv)
    checks = CHECKS[args.target]
    try:
        cfg = load_config(config_path(REPO_ROOT, args.env), env=args.env)
    except ConfigError as exc:
        print(f"preflight: {exc}", file=sys.stderr)
        return 2
    if args.quotas:
        print(quota_report(cfg))
        return 0
    session = session or boto3.Session(region_name=cfg.region)

    def client(name: str) -> Any:
        return session.client(name, region_name=cfg.region)

    caller: dict[str, str] = {}
    problems = check(
        region=cfg.region,
        account=cfg.account,
        session=session,
        client=client,
        bootstrap=args.target not in BEFORE_BOOTSTRAP,
        identity_out=caller,
        env=args.env,
    )
    notes: list[str] = []
    if not problems and "execution-role" in checks:
        partition = caller["Arn"].split(":")[1] if caller.get("Arn") else "aws"
        problems = execution_role_check(cfg, client, account=caller["Account"], partition=partition)
    if not problems:
        problems = capacity_check(cfg, client, checks, notes)
    if not problems and "token-secret" in checks:
        problems = token_secret_check(cfg, client, notes)
    if not problems:
        checked = ["AWS credentials", "account"]
        checked += [] if args.target in BEFORE_BOOTSTRAP else ["CDK bootstrap"]
        checked += ["the execution role's policies"] if "execution-role" in checks else []
        quotas = ", ".join(f"{n} x {q}" for q, n in sorted(quotas_needed(cfg, checks).items()))
        checked += [f"quotas ({quotas})"] if quotas else []
        noted = " ".join(notes)
        checked += (
            ["the scaling role"] if "scaling-role" in checks and SCALING_ROLE not in noted else []
        )
        checked += (
            ["the token secret"]
            if "token-secret" in checks and cfg.model_prep.hf_token_secret and not noted
            else []
        )
        print(f"preflight ({args.target}): {', '.join(checked)} ok in {cfg.region}")
        for note in notes:
            print(f"preflight note: {note}")
        return 0
    print(f"preflight for {args.env} ({cfg.region}) failed:", file=sys.stderr)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)
    print(f"  ({OFFLINE_HINT.format(env=args.env)})", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
