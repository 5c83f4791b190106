"""The release a CI run makes, rehearsed end to end on one fake AWS account (issue 19, item 5).

The sequence is the make targets' own commands (``make -n``), each run through its tool's real
``main(argv, clients=...)``:

1. ``make deploy ENV=prod IMAGE_TAG=canary=<sha>``  tools.deploy; its ``cdk deploy`` subprocess
   is the account's CloudFormation stand-in, which reads the same command line the CDK app would
2. ``make canary-start ENV=prod``                    tools.canary start
3. ``make canary-wait ENV=prod``                     tools.canary wait: RUNNING ... COMPLETED
4. ``make promote ENV=prod``                          tools.promote: deploy, then the canary idle

The account (tests/infra/fake_account.py) is shared by every client: real boto3 clients whose
calls are answered from it, so the test asserts the AWS calls of the whole release in order. The
config is config/prod.yaml as committed (the release workflow deploys it). The account starts
where the last release left it: both variants on its tag, the canary idle at weight 0, the
controller's record a ``promoted`` rollback. (``make deploy``'s preflight, STS and Service
Quotas, is left out: it reads, and tests/infra/test_preflight.py covers it.)

Then a failure is injected at each step. The step exits non-zero naming the state it left,
nothing after it runs (CI stops the job), and the sequence run again from the top (a re-run of
the workflow) resumes: it ends in the clean run's state, and the side effects that happened
(a deploy that landed, a rollout started, the canary idled) are not made again.
"""

from __future__ import annotations

import copy
import re
import shlex
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import groupby
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import boto3
import pytest
import yaml
from moto import mock_aws

import tools.canary
import tools.deploy
import tools.promote
import tools.release_artifacts
from container.model_prep import artifact
from container.model_prep.manifest import write_manifest
from typed_config import artifact_version

from .conftest import raw_config
from .fake_account import REGISTRY, Account, image_uris

REPO = Path(__file__).resolve().parents[2]
LAST = "a1b2c3d4e5f6"  # the tag the last release promoted
SHA = "f6e5d4c3b2a1"  # this release's build: <repository>:<git sha>, pushed by the build job
REPOSITORY = "mangaassist-vllm-prod"  # config/prod.yaml image.repository_name
FETCH_MODEL = "s3: model release fetched and verified (tools.model_release.ensure_release)"
#: 03:00 JST on a Wednesday: off-peak (the schedules hold their minimum during the first deploy).
T0 = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
TARGETS = (
    ("deploy", f"IMAGE_TAG=canary={SHA}"),
    ("canary-start", None),
    ("canary-wait", None),
    ("promote", None),
)
TOOLS: dict[str, ModuleType] = {
    "tools.deploy": tools.deploy,
    "tools.canary": tools.canary,
    "tools.promote": tools.promote,
    "tools.release_artifacts": tools.release_artifacts,
}
#: How a clean release leaves the account, and every resumed one must too.
RELEASED = {
    "endpoint": "InService",
    "images": {"primary": SHA, "canary": SHA},
    "weights": {"primary": 100.0, "canary": 0.0},
    "canary_bounds": (3, 54),  # config/prod.yaml scaling.variants.canary: 3..54
    "rollout": ("ROLLED_BACK", "promoted"),
}
#: Calls that change the fleet or the rollout, which a resumed release must not make twice.
SIDE_EFFECTS = ("cloudformation: UpdateEndpoint", "lambda.Invoke start", "lambda.Invoke rollback")
STATUS = "lambda.Invoke status"


def make_command(target: str, variable: str | None) -> tuple[str, list[str]]:
    """The tool and argv ``make <target> ENV=prod`` runs (its preflight and venv recipes aside)."""
    command = ["make", "-n", "--no-print-directory", target, "ENV=prod"]
    command += [variable] if variable else []
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True)
    lines = done.stdout.replace("\\\n", " ").splitlines()
    argv = next(shlex.split(line) for line in lines if f" -m tools.{target.split('-')[0]}" in line)
    assert argv[1] == "-m"
    return argv[2], argv[3:]


@pytest.fixture(scope="module")
def sequence() -> list[tuple[str, str, list[str]]]:
    steps = [(target, *make_command(target, variable)) for target, variable in TARGETS]
    assert [(t, m, a[:1]) for t, m, a in steps] == [
        ("deploy", "tools.deploy", ["--env"]),
        ("canary-start", "tools.canary", ["start"]),
        ("canary-wait", "tools.canary", ["wait"]),
        ("promote", "tools.promote", ["--env"]),
    ]
    assert steps[0][2] == ["--env", "prod", "--image-tag", f"canary={SHA}"]
    return steps


@pytest.fixture
def account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Account:
    """The canary-only release: prod.yaml without its shadow stage (which
    test_release_rehearsal_shadow.py rehearses), so its canary at the 5 % the steps start at."""
    raw = copy.deepcopy(raw_config("prod"))
    del raw["rollout"]["shadow"]
    raw["variants"]["canary"]["initial_weight"] = 5
    return account_with(raw, tmp_path, monkeypatch)


def account_with(raw: dict[str, Any], root: Path, monkeypatch: pytest.MonkeyPatch) -> Account:
    """:func:`account_on` a config of its own: ``raw`` as ``root``/config/prod.yaml, the tools
    reading it there."""
    (root / "config").mkdir()
    (root / "config" / "prod.yaml").write_text(yaml.safe_dump(raw))
    for tool in (tools.deploy, tools.promote, tools.canary):
        monkeypatch.setattr(tool, "REPO_ROOT", root)
    return account_on(root, monkeypatch)


def account_on(root: Path, monkeypatch: pytest.MonkeyPatch) -> Account:
    """The account where the last release left it, on ``root``'s config/prod.yaml, with the
    tools' subprocess, model download and clocks its own."""
    image = f"{REGISTRY}/{REPOSITORY}:{LAST}"
    acct = Account(root, "prod", images={"primary": image, "canary": image}, now=T0)
    acct.ecr[REPOSITORY].add(SHA)
    acct.controller.handle({"action": "rollback", "reason": "promoted", "requested_by": "promote"})
    acct.calls.clear()
    # The cdk deploy subprocess, the model release's download (image.mode build: S3, before any
    # change) and the wall clock of the tools that read it are the account's.
    monkeypatch.setattr(tools.deploy, "subprocess", SimpleNamespace(run=acct.cdk_deploy))
    monkeypatch.setattr(tools.deploy, "ensure_release", lambda cfg: acct.calls.append(FETCH_MODEL))

    class AccountTime(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.fromtimestamp(acct.now, tz)

    monkeypatch.setattr(tools.deploy, "datetime", AccountTime)
    real = tools.canary.time
    monkeypatch.setattr(
        tools.canary, "time", SimpleNamespace(
            strftime=real.strftime, gmtime=lambda *_: real.gmtime(acct.now),
            monotonic=acct.clock, sleep=acct.sleep,
        ),
    )  # fmt: skip
    return acct


@dataclass
class Step:
    target: str
    rc: int
    calls: list[str]
    out: str
    err: str


def release(account: Account, sequence: list[Any], capsys: Any) -> list[Step]:
    """Run the sequence from the top, stopping at the first step that fails (as CI does)."""
    steps = []
    for target, module, argv in sequence:
        first = len(account.calls)
        rc = TOOLS[module].main(argv, clients=account.clients())
        out, err = capsys.readouterr()
        steps.append(Step(target, rc, account.calls[first:], out, err))
        if rc != 0:
            break
    return steps


def collapsed(calls: list[str]) -> list[str]:
    """The calls with a run of status reads (the wait's, every 30 s) shown once."""
    runs = groupby(calls)
    return [c for call, run in runs for c in ([call] if call == STATUS else list(run))]


def effects(calls: list[str]) -> list[str]:
    return [c.split(" EndpointConfig")[0] for c in calls if c.startswith(SIDE_EFFECTS)
            and "(failed" not in c]  # fmt: skip


# ------------------------------------------------------------------------ the clean release

READ_LIVE = [
    "sagemaker.DescribeEndpoint",
    "sagemaker.DescribeEndpointConfig",
    "application-autoscaling.DescribeScalableTargets",
]
CLEAN = {
    "deploy": [
        *READ_LIVE,
        "sagemaker.DescribeModel",  # each variant's image: the primary keeps its repository tag
        "sagemaker.DescribeModel",
        "lambda.Invoke status",  # no rollout holds the endpoint
        "ecr.BatchGetImage",  # the tags this deploy runs are pushed
        FETCH_MODEL,  # image.mode build: cdk deploy builds the image, which bakes the release
        f"cdk deploy image_tag=canary={SHA},primary={LAST}",
        f"cloudformation: CreateModel CanaryModel-4 {REGISTRY}/{REPOSITORY}:{SHA}",
        "cloudformation: CreateEndpointConfig EndpointConfig-5",
        "cloudformation: UpdateEndpoint EndpointConfig-5",
    ],
    "canary-start": [
        "lambda.Invoke status",  # not a COMPLETED rollout waiting for its promotion
        "lambda.Invoke start",
        "sagemaker.DescribeEndpoint",  # the live weights it prints
    ],
    "canary-wait": ["lambda.Invoke status"],  # read every 30 s until COMPLETED: changes nothing
    "promote": [
        "lambda.Invoke status",  # COMPLETED
        "sagemaker.DescribeEndpoint",  # the canary's tag, from the live endpoint
        "sagemaker.DescribeEndpointConfig",
        "sagemaker.DescribeModel",
        "sagemaker.DescribeModel",
        *READ_LIVE,  # make deploy IMAGE_TAG=<sha> RESET=DesiredWeight
        "sagemaker.DescribeModel",
        "sagemaker.DescribeModel",
        "lambda.Invoke status",  # COMPLETED, and the promotion keeps the canary's image
        "ecr.BatchGetImage",
        # the idle primary's share, before: its scaling minimum first (no scale-in can take it
        # back), then its count, one variant per call
        "application-autoscaling.RegisterScalableTarget",
        "sagemaker.UpdateEndpointWeightsAndCapacities",
        "sagemaker.DescribeEndpoint",  # InService again
        f"cdk deploy reset=DesiredWeight image_tag={SHA}",
        f"cloudformation: CreateModel PrimaryModel-6 {REGISTRY}/{REPOSITORY}:{SHA}",
        "cloudformation: CreateEndpointConfig EndpointConfig-7",
        "cloudformation: UpdateEndpoint EndpointConfig-7",
        "application-autoscaling.DescribeScalableTargets",  # the minimum it raised, unchanged:
        "application-autoscaling.RegisterScalableTarget",  # put back
        "lambda.Invoke rollback",  # the canary idle: weight 0, configured bounds
    ],
}


def test_a_clean_release_makes_these_aws_calls_in_order_and_ends_promoted(
    account: Account, sequence: list[Any], capsys: Any
) -> None:
    steps = release(account, sequence, capsys)
    assert [(s.target, s.rc) for s in steps] == [(t, 0) for t in CLEAN]
    assert {s.target: collapsed(s.calls) for s in steps} == CLEAN
    assert account.state() == RELEASED
    assert effects(account.calls) == [
        "cloudformation: UpdateEndpoint", "lambda.Invoke start",
        "cloudformation: UpdateEndpoint", "lambda.Invoke rollback",
    ]  # fmt: skip
    wait = steps[2]
    assert wait.calls.count("lambda.Invoke status") > 500  # five hours of reads, 30 s apart
    for percent in (5, 25, 50, 75, 100):
        assert f"({percent}%)" in wait.out
    assert "canary-wait: rollout rollout-20261201T180000Z COMPLETED" in wait.out
    assert f"promoted: both variants run {SHA}" in steps[3].out


# ------------------------------------------------------------- a failure at each step, resumed


@dataclass(frozen=True)
class Failure:
    step: str
    #: A line the failed step prints (stdout or stderr), and its last call.
    says: str
    last_call: str
    #: The state it leaves (Account.state keys).
    left: dict[str, Any]
    #: The side effects of the failed run and the re-run together, in order.
    effects: tuple[str, ...]


UPDATE, START, IDLE = SIDE_EFFECTS
BEFORE = {"images": {"primary": LAST, "canary": LAST}, "rollout": ("ROLLED_BACK", "promoted")}
CANARY_DEPLOYED = {"images": {"primary": LAST, "canary": SHA},
                   "weights": {"primary": 100.0, "canary": 0.0}}  # fmt: skip


def inject(account: Account, case: str) -> None:
    if case == "ecr-check":  # the build job has not pushed <sha> yet
        account.ecr[REPOSITORY].discard(SHA)
    elif case == "cdk-deploy":
        account.fail(f"cdk deploy image_tag=canary={SHA},primary={LAST}")
    elif case == "canary-start":
        account.fail("lambda.Invoke start", ("TooManyRequestsException", 429))
    elif case == "wait-rolled-back":
        account.controller.alarm_at_step = 2  # the canary's 5XX alarm at 50 %
    elif case == "promote-deploy":
        account.fail(f"cdk deploy reset=DesiredWeight image_tag={SHA}")
    elif case == "canary-idle":
        account.fail("lambda.Invoke rollback", ("TooManyRequestsException", 429))


def repair(account: Account, case: str) -> None:
    """What changes before the re-run: the build job pushed the image (the other failures were
    transient: throttling, a stack update that failed once, a spurious alarm)."""
    account.ecr[REPOSITORY].add(SHA)


FAILURES = {
    "ecr-check": Failure(
        "deploy",
        f"refused: image tag(s) ['{SHA}'] not in ECR repository {REPOSITORY}: build and push first",
        "ecr.BatchGetImage",
        {**BEFORE, "weights": {"primary": 100.0, "canary": 0.0}},
        (UPDATE, START, UPDATE, IDLE),
    ),
    "cdk-deploy": Failure(
        "deploy",
        "cdk deploy exited 1: CloudFormation rolls the stack back to the template it last "
        "deployed (the endpoint returns to the EndpointConfig it ran)",
        "cloudformation: update failed, stack rolled back",
        BEFORE,
        (UPDATE, START, UPDATE, IDLE),
    ),
    "canary-start": Failure(
        "canary-start",
        "AWS call failed (us-east-1): An error occurred (TooManyRequestsException) when calling "
        "the Invoke operation",
        "lambda.Invoke start (failed: TooManyRequestsException)",
        {**CANARY_DEPLOYED, "rollout": ("ROLLED_BACK", "promoted")},
        (UPDATE, START, UPDATE, IDLE),
    ),
    "wait-rolled-back": Failure(
        "canary-wait",
        "is ROLLED_BACK on mangaassist-vllm-prod, not COMPLETED (last: restore: canary weight 0 "
        "on an InService endpoint; canary scaling bounds restored to 3..54; rollback: alarm: "
        "canary-5xx: 5XX above 5 a minute)",
        "lambda.Invoke status",
        {**CANARY_DEPLOYED, "rollout": ("ROLLED_BACK", "alarm:"), "canary_bounds": (3, 54)},
        (UPDATE, START, START, UPDATE, IDLE),  # a re-run starts the rollout again, by design
    ),
    "promote-deploy": Failure(
        "promote",
        "cdk deploy exited 1",
        # the primary's raised scaling minimum is put back after the failed update too
        "application-autoscaling.RegisterScalableTarget",
        {
            "images": {"primary": LAST, "canary": SHA},
            "weights": {"primary": 0.0, "canary": 100.0},
            "rollout": ("COMPLETED", ""),
        },
        (UPDATE, START, UPDATE, IDLE),
    ),
    "canary-idle": Failure(
        "promote",
        "AWS call failed (us-east-1): An error occurred (TooManyRequestsException) when calling "
        "the Invoke operation",
        "lambda.Invoke rollback (failed: TooManyRequestsException)",
        {
            "images": {"primary": SHA, "canary": SHA},
            "weights": {"primary": 95.0, "canary": 5.0},
            "rollout": ("COMPLETED", ""),
        },
        (UPDATE, START, UPDATE, IDLE),
    ),
}


@pytest.mark.parametrize("case", list(FAILURES))
def test_a_failure_at_each_step_stops_there_and_a_rerun_from_the_top_resumes(
    account: Account, sequence: list[Any], capsys: Any, case: str
) -> None:
    failure = FAILURES[case]
    inject(account, case)
    first = release(account, sequence, capsys)
    targets = [t for t, _, _ in sequence]
    failed = first[-1]
    # it fails at its step, naming the state; nothing after it ran
    assert [s.target for s in first] == targets[: targets.index(failure.step) + 1]
    assert all(s.rc == 0 for s in first[:-1]) and failed.rc != 0
    assert failure.says in failed.out + failed.err
    assert failed.calls[-1] == failure.last_call
    assert {k: account.state()[k] for k in failure.left} == failure.left
    failed_run = list(account.calls)

    repair(account, case)
    again = release(account, sequence, capsys)
    assert [(s.target, s.rc) for s in again] == [(t, 0) for t in targets]
    assert account.state() == RELEASED
    assert tuple(effects(failed_run + account.calls[len(failed_run) :])) == failure.effects


def test_after_promotes_deploy_failed_the_rerun_neither_redeploys_the_canary_nor_restarts_it(
    account: Account, sequence: list[Any], capsys: Any
) -> None:
    inject(account, "promote-deploy")
    release(account, sequence, capsys)
    again = release(account, sequence, capsys)
    deploy, start, wait, promote = again
    assert "cloudformation: no changes" in deploy.calls
    assert start.calls == [STATUS, "sagemaker.DescribeEndpoint"]  # COMPLETED: nothing started
    assert "nothing started" in start.out
    assert collapsed(wait.calls) == ["lambda.Invoke status"]
    assert wait.out.startswith("canary-wait: rollout rollout-20261201T180000Z COMPLETED")
    assert "2. deploy: primary" in promote.out
    assert [c for c in promote.calls if c.startswith(UPDATE)] == [UPDATE + " EndpointConfig-7"]


def test_after_the_canary_idle_failed_the_rerun_keeps_the_promoted_primary(
    account: Account, sequence: list[Any], capsys: Any
) -> None:
    inject(account, "canary-idle")
    first = release(account, sequence, capsys)
    assert f"promote stopped at step 3 (canary idle): the primary runs {SHA}" in first[-1].out
    again = release(account, sequence, capsys)
    deploy, start, _, promote = again
    # the canary deploy of <sha> keeps the primary on <sha>: no deploy moves it back
    assert f"IMAGE_TAG does not name primary: it keeps {REGISTRY}/{REPOSITORY}:{SHA}" in deploy.out
    assert f"cdk deploy image_tag=canary={SHA},primary={SHA}" in deploy.calls
    assert deploy.calls[-1] == "cloudformation: no changes"
    assert "nothing started" in start.out
    assert f"2. deploy: the primary already runs {SHA}: nothing to do" in promote.out
    assert not [c for c in promote.calls if c.startswith(("cdk", "cloudformation"))]
    assert promote.calls[-1] == "lambda.Invoke rollback"


def test_a_finished_release_run_again_changes_no_image(
    account: Account, sequence: list[Any], capsys: Any
) -> None:
    """A third run after success: the deploy keeps both variants on <sha> (no endpoint update);
    it then rolls the same image out again (a promoted release's record is an ended rollback,
    and canary-start cannot tell it from a canary not yet promoted): noted, not required."""
    release(account, sequence, capsys)
    again = release(account, sequence, capsys)
    assert again[0].calls[-1] == "cloudformation: no changes"
    assert account.state() == RELEASED


def test_a_canary_deploy_over_a_primary_built_by_cdk_is_refused_in_prod(
    account: Account, sequence: list[Any], capsys: Any
) -> None:
    """Only a tag of the repository can be kept: a primary on the image CDK builds (image.mode
    build, before any promotion) would get the config's image, which prod refuses to build
    (image.deploy_builds: false): the deploy stops before any change, naming the way out."""
    built = image_uris(account.cfg)["primary"]
    assert "container-assets" in built
    account.models[account.configs[account.endpoint["config"]]["primary"]["model"]] = built
    before = account.state()
    [deploy] = release(account, sequence[:1], capsys)
    assert deploy.rc == 1
    assert (
        f"IMAGE_TAG does not name primary: it runs {built}, not a tag of {REPOSITORY}, so it "
        "gets the config's image" in deploy.out
    )
    assert "image.deploy_builds: false, and primary would get an image CDK builds" in deploy.err
    assert not [c for c in deploy.calls if c.startswith("cdk deploy")]
    assert account.state() == before


# ------------------------------------------------- build once, promote by digest (issue 31, 5)

DEV_REPOSITORY = "mangaassist-vllm-dev"  # config/dev.yaml image.repository_name
DEV_DIGEST = "sha256:" + "d1" * 32  # what dev's push-image pushed as <dev repository>:<sha>
#: Make targets that build, prepare or download a model or an image: prod runs none of them.
BUILD_TARGETS = {"push-image", "prepare-model", "build-image", "tiny-image", "base-cpu-image",
                 "fetch-model", "tiny-release", "runner-disk"}  # fmt: skip
#: What a build or a model preparation looks like in a make -n expansion.
BUILD_COMMANDS = re.compile(
    r"docker (buildx )?build |podman build |tools\.push_image|tools\.prepare_model|"
    r"tools\.model_release fetch"
)


def job_runs(job: str) -> list[str]:
    workflow = yaml.safe_load((REPO / ".github/workflows/release.yml").read_text())
    return [s["run"] for s in workflow["jobs"][job]["steps"] if "run" in s]


def expanded(run: str, env: dict[str, str]) -> tuple[list[str], str]:
    """A step's ``make ...`` line with the job's variables filled in, and ``make -n`` of it."""
    words = shlex.split(re.sub(r"\$([A-Z_][A-Z0-9_]*)", lambda m: env[m[1]], run))
    assert words[0] == "make", run
    done = subprocess.run(["make", "-n", "--no-print-directory", *words[1:]], cwd=REPO,
                          capture_output=True, text=True, check=True)  # fmt: skip
    return words, done.stdout.replace("\\\n", " ")


def job_values(job: str, key: str, sources: dict[str, dict[str, str]]) -> dict[str, str]:
    """A job's ``outputs:`` or ``env:`` from release.yml, each ``${{ <source>.outputs.<name> }}``
    resolved from ``sources`` (``steps.record``, ``needs.dev``, ``needs.config``)."""
    workflow = yaml.safe_load((REPO / ".github/workflows/release.yml").read_text())
    values = {}
    for name, expr in workflow["jobs"][job][key].items():
        m = re.fullmatch(r"\$\{\{ ([\w.]+)\.outputs\.([\w-]+) \}\}", expr)
        assert m, f"{job}.{key}.{name}: {expr}"
        values[name] = sources[m[1]][m[2]]
    return values


def tool_argv(expansion: str) -> tuple[str, list[str]]:
    """The step's own tool and argv (its preflight and venv recipes aside)."""
    for line in expansion.splitlines():
        if " -m tools." in line and not re.search(r"tools\.(preflight|progress)\b", line):
            argv = shlex.split(line)
            return argv[argv.index("-m") + 1], argv[argv.index("-m") + 2 :]
    raise AssertionError(f"no tool in {expansion}")


PROD_ENV = {"IMAGE_TAG": SHA, "IMAGE_REF": f"{REGISTRY}/{DEV_REPOSITORY}@{DEV_DIGEST}",
            "IMAGE_DIGEST": DEV_DIGEST, "MODEL_RELEASE": "s3://b/models/m-0000000000000000",
            "MODEL_MANIFEST_SHA256": "0" * 64}  # fmt: skip


def test_no_build_step_runs_for_prod() -> None:
    """prod-canary's steps, as release.yml lists them and as make expands them (prerequisites
    included): nothing is built, prepared or downloaded; dev's release is promoted."""
    runs = job_runs("prod-canary")
    targets = [shlex.split(r)[1] for r in runs]
    assert not BUILD_TARGETS & set(targets), targets
    assert {"promote-model", "promote-image"} <= set(targets)
    assert targets.index("promote-image") < targets.index("deploy")
    for run in runs:
        _, expansion = expanded(run, PROD_ENV)
        assert not BUILD_COMMANDS.search(expansion), f"{run} builds: {expansion}"
    # dev still builds: the one build of the release
    assert {"prepare-model", "push-image", "release-record"} <= {
        shlex.split(r)[1] for r in job_runs("dev")
    }


def test_prod_deploys_the_digest_dev_pushed_and_the_model_release_dev_published(
    account: Account, capsys: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dev's job pushed <dev repository>:<sha> (DEV_DIGEST) and published the model release;
    its release-record step writes the job outputs; prod-canary's steps, run from release.yml
    with those outputs, copy both and deploy the canary on that digest. prod's repository had no
    <sha> before: the image the canary runs is dev's, byte for byte (its digest)."""
    account.ecr[REPOSITORY].discard(SHA)
    account.ecr[DEV_REPOSITORY] = {SHA}
    account.digests[(DEV_REPOSITORY, SHA)] = DEV_DIGEST
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "fake")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake")
    with mock_aws():
        s3, sts = boto3.client("s3", region_name="us-east-1"), boto3.client("sts")
        version = artifact_version(account.cfg)
        tree = tmp_path / "release"
        (tree / "base").mkdir(parents=True)
        (tree / "base" / "model.safetensors").write_bytes(b"weights" * 100)
        write_manifest(tree, version=version)
        for env in ("dev", "prod"):
            s3.create_bucket(
                Bucket=f"mangaassist-{env}-models-{sts.get_caller_identity()['Account']}"
            )
        dev_bucket = f"mangaassist-dev-models-{sts.get_caller_identity()['Account']}"
        artifact.publish(s3, tree, artifact.ArtifactLocation(dev_bucket, "models"),
                         log=lambda *_: None)  # fmt: skip
        clients = {**account.clients(), "s3": s3, "sts": sts}

        # dev's job: the release-record step, its outputs the job's outputs
        [record] = [r for r in job_runs("dev") if "release-record" in r]
        outputs_file = tmp_path / "github_output"
        module, argv = tool_argv(expanded(record, {"IMAGE_TAG": SHA})[1])
        assert module == "tools.release_artifacts"
        github_output = {"GITHUB_OUTPUT": str(outputs_file)}
        assert tools.release_artifacts.main(argv, clients=clients, environ=github_output) == 0
        step = dict(line.split("=", 1) for line in outputs_file.read_text().splitlines())
        dev_outputs = job_values("dev", "outputs", {"steps.record": step})
        assert dev_outputs["image-digest"] == DEV_DIGEST

        # prod-canary: its steps with its env as release.yml maps it from dev's job outputs
        env = job_values("prod-canary", "env", {"needs.dev": dev_outputs,
                                                "needs.config": {"image-tag": SHA}})  # fmt: skip
        assert env["IMAGE_DIGEST"] == DEV_DIGEST and env["IMAGE_TAG"] == SHA
        account.calls.clear()
        ran = []
        for run in job_runs("prod-canary"):
            words, expansion = expanded(run, env)
            if words[1] == "deploy-repository":
                continue  # cdk deploy of the image stack alone: not modelled by the account
            module, argv = tool_argv(expansion)
            extra = (
                {"runner": account.docker, "environ": {}} if module.endswith("artifacts") else {}
            )
            first = len(account.calls)
            rc = TOOLS[module].main(argv, clients=clients, **extra)
            ran.append((words[1], rc, account.calls[first:]))
            assert rc == 0, (run, capsys.readouterr())
    assert [t for t, _, _ in ran] == ["promote-model", "promote-image", "deploy", "canary-start"]
    image_calls = ran[1][2]
    assert f"docker imagetools create {REGISTRY}/{REPOSITORY}:{SHA} {DEV_DIGEST}" in image_calls
    assert not [c for c in account.calls if "build" in c]
    # the canary runs <repository>:<sha>, and that tag is dev's digest
    assert account.live_images()["canary"] == f"{REGISTRY}/{REPOSITORY}:{SHA}"
    assert account.digest(REPOSITORY, SHA) == DEV_DIGEST
    assert account.state()["images"] == {"primary": LAST, "canary": SHA}
