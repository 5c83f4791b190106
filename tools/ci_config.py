"""``make ci-config ENV=...``: the first step of every CI job that deploys (.github/workflows/).

Checks, before anything is built or deployed, that the environment's deploy role is configured:
the repository variable ``DEPLOY_ROLE_ARN_<ENV>`` (``DEPLOY_ROLE_ARN_DEV``,
``DEPLOY_ROLE_ARN_PROD``; ``--role diff``: ``DIFF_ROLE_ARN_<ENV>``) holds an IAM role ARN, in the
account config/<env>.yaml names when it names one. A missing or malformed one is refused at
once, naming the variable and the command that creates the role (``make deploy-access``,
README "Release from CI").

Then writes the job's outputs to ``$GITHUB_OUTPUT`` (GitHub Actions, "Passing information
between jobs"): ``region`` (config/<env>.yaml's, so the workflow names no region of its own),
``role-arn`` and ``image-tag`` (the commit being released, ``$GITHUB_SHA``, validated like
``image.tag``). For the deploy role, each release job's bound (sizing/release_jobs.py):
``<job>-minutes`` (its ``timeout-minutes``) and ``<job>-session-seconds`` (its
``role-duration-seconds``), so every session outlives its job. Outside GitHub Actions it prints
them.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from sizing import release_jobs
from sizing.fit_checks import load_config
from tools import REPO_ROOT
from tools.push_image import checked_tag
from typed_config import ConfigError, DeploymentConfig, config_path

#: arn:<partition>:iam::<12-digit account>:role/<path/name> (IAM User Guide, "IAM ARNs").
ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::(?P<account>\d{12}):role/[\w+=,.@/-]{1,512}$")


#: The roles a workflow assumes: the release's deploy role (jobs in a GitHub environment), and
#: the pull request workflow's read-only diff role; each the output of that name of
#: ``make deploy-access`` (stacks/deploy_access_stack.py).
ROLES = {"deploy": ("DEPLOY_ROLE_ARN", "DeployRoleArn"), "diff": ("DIFF_ROLE_ARN", "DiffRoleArn")}


def role_variable(env: str, role: str = "deploy") -> str:
    """The repository variable that holds ``env``'s ``role`` ARN (DEPLOY_ROLE_ARN_DEV, ...)."""
    return f"{ROLES[role][0]}_{env.upper()}"


def deploy_role(cfg: DeploymentConfig, environ: dict[str, str], role: str = "deploy") -> str:
    name = role_variable(cfg.env, role)
    value = environ.get(name, "").strip()
    fix = (
        f"create the role with `make deploy-access ENV={cfg.env}` (its output {ROLES[role][1]}), "
        f'then `gh variable set {name} --body <role arn>` (README "Release from CI")'
    )
    if not value:
        raise ConfigError(f"{name}: not set, so this workflow cannot reach AWS: {fix}")
    match = ROLE_ARN.match(value)
    if not match:
        raise ConfigError(f"{name}: {value!r} is not an IAM role ARN: {fix}")
    if cfg.account and match["account"] != cfg.account:
        raise ConfigError(
            f"{name}: the role is in account {match['account']}, but config/{cfg.env}.yaml "
            f"deploys to account {cfg.account}"
        )
    return value


def outputs(cfg: DeploymentConfig, environ: dict[str, str], role: str) -> dict[str, str]:
    out = {"region": cfg.region, "role-arn": deploy_role(cfg, environ, role)}
    if environ.get("GITHUB_SHA"):
        out["image-tag"] = checked_tag(environ["GITHUB_SHA"])
    if role == "deploy":
        try:
            out.update(release_jobs.outputs(cfg))
        except release_jobs.SessionTooLong as exc:
            raise ConfigError(str(exc)) from exc
    return out


def hosted_runner_warnings(cfg: DeploymentConfig, environ: dict[str, str]) -> list[str]:
    """A job longer than a GitHub-hosted runner allows (release_jobs.HOSTED_JOB_MINUTES), when
    the image jobs run on the hosted default (no ``IMAGE_RUNNER`` variable)."""
    if environ.get("IMAGE_RUNNER", "").strip():
        return []
    job = release_jobs.release_job(cfg)
    if job.minutes <= release_jobs.HOSTED_JOB_MINUTES:
        return []
    return [
        f"the release job may run {job.minutes} min, and a GitHub-hosted runner stops a job "
        f"after {release_jobs.HOSTED_JOB_MINUTES}: set the repository variable IMAGE_RUNNER to "
        "a self-hosted runner's label, or lower model_prep.max_runtime_seconds"
    ]


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="dev")
    parser.add_argument("--role", choices=sorted(ROLES), default="deploy")
    args = parser.parse_args(argv)
    env = dict(os.environ if environ is None else environ)
    try:
        cfg = load_config(config_path(REPO_ROOT, args.env), env=args.env)
        values = outputs(cfg, env, args.role)
    except ConfigError as exc:
        # A workflow command: GitHub shows it as the run's error annotation.
        print(f"::error title=release configuration ({args.env})::{exc}", file=sys.stderr)
        return 2
    if args.role == "deploy":
        for warning in hosted_runner_warnings(cfg, env):
            print(f"::warning title=release job length ({args.env})::{warning}", file=sys.stderr)
    write_outputs(values, env)
    return 0


def write_outputs(values: dict[str, str], environ: dict[str, str]) -> None:
    """Print ``key=value`` lines, and append them to ``$GITHUB_OUTPUT`` when it is set: the
    step's outputs, which a job's ``outputs:`` passes on (GitHub Actions, "Passing information
    between jobs")."""
    lines = [f"{key}={value}" for key, value in values.items()]
    target = environ.get("GITHUB_OUTPUT")
    if target:
        with Path(target).open("a") as fh:
            fh.write("".join(f"{line}\n" for line in lines))
    for line in lines:
        print(line)


if __name__ == "__main__":
    sys.exit(main())
