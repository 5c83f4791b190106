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
   ``stacks.plan_deploy.deploy_section``), and of ``<type> for training job usage`` (``spot
   training job usage`` with ``use_spot``) for the preparation job's type, at least 1. Quota
   names as "Amazon SageMaker AI endpoints and quotas" (AWS General Reference) lists them;
   ListServiceQuotas returns only quotas with an applied value, so a missing one is read from
   ListAWSDefaultServiceQuotas;
5. the Application Auto Scaling service-linked role for SageMaker endpoints
   (``AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint``), which registering the
   variants' scalable targets needs.

Each failure prints what is missing, the command that fixes it, and that ``make synth`` and
``make demo`` need no AWS account. Exit 0 when all pass, 2 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from stacks.config import ConfigError, DeploymentConfig, config_path, load_config
from stacks.plan_deploy import deploy_section
from tools import REPO_ROOT
from tools.aws_command import NO_CREDENTIALS, OFFLINE_HINT, error_code

#: The CDK's default bootstrap qualifier (cdk.json sets no other).
BOOTSTRAP_QUALIFIER = "hnb659fds"


def check(
    *,
    region: str,
    account: str | None,
    session: Any,
    client: Callable[[str], Any],
) -> list[str]:
    """The problems found, each one line naming what is missing and how to fix it."""
    if session.get_credentials() is None:
        return [NO_CREDENTIALS]
    try:
        identity = client("sts").get_caller_identity()
    except (ClientError, BotoCoreError) as exc:
        return [f"the AWS credentials were refused by STS ({exc}): refresh or replace them"]
    problems: list[str] = []
    if account and identity.get("Account") != account:
        problems.append(
            f"the credentials are for account {identity.get('Account')}, the config deploys to "
            f"{account}: switch profile, or change `account` in the config"
        )
    name = f"/cdk-bootstrap/{BOOTSTRAP_QUALIFIER}/version"
    try:
        client("ssm").get_parameter(Name=name)
    except ClientError as exc:
        code = error_code(exc)
        if code == "ParameterNotFound":
            problems.append(
                f"account {identity.get('Account')} is not CDK-bootstrapped in {region} "
                f"(no SSM parameter {name}): run `npx cdk bootstrap "
                f"aws://{identity.get('Account')}/{region}`"
            )
        else:
            problems.append(f"could not read {name} in {region} ({code}): {exc}")
    except BotoCoreError as exc:
        problems.append(f"could not reach SSM in {region}: {exc}")
    return problems


#: Application Auto Scaling's service-linked role for SageMaker endpoint variants.
SCALING_ROLE = "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
SCALING_SERVICE = "sagemaker.application-autoscaling.amazonaws.com"


def quotas_needed(cfg: DeploymentConfig) -> dict[str, int]:
    """``{quota name: instances}`` a first deploy and a model preparation need."""
    needed = {
        f"{itype} for endpoint usage": n
        for itype, n in deploy_section(cfg)["instance_quota_needed"].items()
    }
    kind = "spot training job usage" if cfg.model_prep.use_spot else "training job usage"
    needed[f"{cfg.model_prep.instance_type} for {kind}"] = 1
    return needed


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


def capacity_check(cfg: DeploymentConfig, client: Callable[[str], Any]) -> list[str]:
    """Quotas and the scaling role (module docstring, 4 and 5), one line per problem."""
    problems: list[str] = []
    needed = quotas_needed(cfg)
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
                f"quota '{name}' is {value:g}, the plan needs {n}: `aws service-quotas "
                f"request-service-quota-increase --region {cfg.region} --service-code sagemaker "
                f"--quota-code {code} --desired-value {n}`"
            )
    try:
        client("iam").get_role(RoleName=SCALING_ROLE)
    except ClientError as exc:
        if error_code(exc) == "NoSuchEntity":
            problems.append(
                f"the service-linked role {SCALING_ROLE} is missing (autoscaling cannot register "
                f"the variants): `aws iam create-service-linked-role --aws-service-name "
                f"{SCALING_SERVICE}`"
            )
        else:
            problems.append(f"could not read the role {SCALING_ROLE} ({error_code(exc)}): {exc}")
    except BotoCoreError as exc:
        problems.append(f"could not reach IAM: {exc}")
    return problems


def main(argv: list[str] | None = None, *, session: Any = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.preflight", description=__doc__)
    parser.add_argument("--env", required=True)
    args = parser.parse_args(argv)
    try:
        cfg = load_config(config_path(REPO_ROOT, args.env), env=args.env)
    except ConfigError as exc:
        print(f"preflight: {exc}", file=sys.stderr)
        return 2
    session = session or boto3.Session(region_name=cfg.region)

    def client(name: str) -> Any:
        return session.client(name, region_name=cfg.region)

    problems = check(region=cfg.region, account=cfg.account, session=session, client=client)
    if not problems:
        problems = capacity_check(cfg, client)
    if not problems:
        quotas = ", ".join(f"{n} x {name}" for name, n in sorted(quotas_needed(cfg).items()))
        print(f"preflight: AWS credentials, account, CDK bootstrap, quotas ({quotas}) and the "
              f"scaling role ok in {cfg.region}")  # fmt: skip
        return 0
    print(f"preflight for {args.env} ({cfg.region}) failed:", file=sys.stderr)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)
    print(f"  ({OFFLINE_HINT.format(env=args.env)})", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
