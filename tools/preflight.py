"""`make diff` / `make deploy` preflight: say what is missing at the AWS edge before the CDK does.

Without it the CDK ends in "Unable to resolve AWS account to use" or a bootstrap stack error,
neither of which names the fix. ``python -m tools.preflight --env prod`` checks, in order:

1. credentials: botocore finds some (env vars, a profile, SSO, an instance role);
2. identity: STS GetCallerIdentity answers, and the account matches ``account`` in the config
   when the config pins one;
3. bootstrap: the CDK bootstrap version parameter exists in the config's region (SSM
   ``/cdk-bootstrap/<qualifier>/version``, which ``cdk bootstrap`` writes; the CDK reads the same
   parameter before every deploy: "Bootstrapping your environment", AWS CDK developer guide).

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

from stacks.config import ConfigError, config_path, load_config
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
    problems = check(
        region=cfg.region,
        account=cfg.account,
        session=session,
        client=lambda name: session.client(name, region_name=cfg.region),
    )
    if not problems:
        print(f"preflight: AWS credentials, account and CDK bootstrap ok in {cfg.region}")
        return 0
    print(f"preflight for {args.env} ({cfg.region}) failed:", file=sys.stderr)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)
    print(f"  ({OFFLINE_HINT.format(env=args.env)})", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
