"""``make push-image`` (tools/push_image.py) and ``make ci-config`` (tools/ci_config.py): the
release pipeline's build-and-push and its first check, against botocore's Stubber (every ECR
request validated against the service model) and a recording stand-in for docker."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from tools import ci_config, push_image

REGION = "us-east-1"
REPO_NAME = "mangaassist-vllm-dev"
URI = f"123456789012.dkr.ecr.{REGION}.amazonaws.com/{REPO_NAME}"
TAG = "0123456789abcdef0123456789abcdef01234567"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


class Docker:
    """Records each docker command (and what went to its stdin); fails the ones asked to."""

    def __init__(self, fail: str = "") -> None:
        self.calls: list[tuple[list[str], str | None]] = []
        self.fail = fail

    def __call__(self, command: Sequence[str], stdin: str | None) -> int:
        self.calls.append((list(command), stdin))
        return 1 if self.fail and self.fail in command else 0


@pytest.fixture
def ecr() -> Any:
    return boto3.client("ecr", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")


@pytest.fixture
def ref_file(tmp_path: Path) -> Path:
    release = tmp_path / "m-0123456789abcdef"
    release.mkdir()
    ref = tmp_path / "dev.ref"
    ref.write_text(f"m-0123456789abcdef {release}\n")
    return ref


def describe(stub: Stubber) -> None:
    stub.add_response(
        "describe_repositories",
        {"repositories": [{"repositoryName": REPO_NAME, "repositoryUri": URI}]},
        {"repositoryNames": [REPO_NAME]},
    )


def image_lookup(stub: Stubber, media_type: str | None) -> None:
    images = (
        [
            {
                "imageId": {"imageTag": TAG},
                "imageManifest": "{}",
                "imageManifestMediaType": media_type,
            }
        ]
        if media_type
        else []
    )
    failures = (
        [] if media_type else [{"imageId": {"imageTag": TAG}, "failureCode": "ImageNotFound"}]
    )
    stub.add_response("batch_get_image", {"images": images, "failures": failures})


def login(stub: Stubber) -> None:
    token = base64.b64encode(b"AWS:s3cret").decode()
    stub.add_response(
        "get_authorization_token",
        {"authorizationData": [{"authorizationToken": token,
                                "proxyEndpoint": f"https://{URI.split('/')[0]}"}]},
    )  # fmt: skip


def run(ecr: Any, ref: Path, docker: Docker, *extra: str) -> int:
    return push_image.main(
        ["--env", "dev", "--tag", TAG, "--ref-file", str(ref), *extra],
        clients={"ecr": ecr}, runner=docker,
    )  # fmt: skip


def test_builds_once_with_a_registry_cache_and_pushes_what_sagemaker_accepts(
    ecr: Any, ref_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docker = Docker()
    with Stubber(ecr) as stub:
        describe(stub)
        image_lookup(stub, None)
        login(stub)
        image_lookup(stub, push_image.DOCKER_MANIFEST_V2)
        assert run(ecr, ref_file, docker) == 0
        stub.assert_no_pending_responses()
    (login_cmd, password), (build, _) = docker.calls
    # The password goes through stdin, never on a command line.
    assert password == "s3cret" and "s3cret" not in " ".join(login_cmd)
    assert build[:3] == ["docker", "buildx", "build"]
    assert "--provenance=false" in build and "--sbom=false" in build
    assert f"type=image,name={URI}:{TAG},push=true,oci-mediatypes=false" in build
    assert f"type=registry,ref={URI}:buildcache" in build
    assert any(a.startswith(f"type=registry,ref={URI}:buildcache,mode=max") for a in build)
    assert f"model-artifact={ref_file.parent / 'm-0123456789abcdef'}" in build
    assert "MODEL_ARTIFACT_VERSION=m-0123456789abcdef" in build
    assert any(a.startswith("MAX_LORA_RANK=") for a in build)
    assert f"pushed {URI}:{TAG}" in capsys.readouterr().out


def test_a_tag_already_pushed_is_not_built_again(ecr: Any, ref_file: Path) -> None:
    """A re-run of the release job: the repository refuses tag overwrites, so the push that
    already happened is the answer."""
    docker = Docker()
    with Stubber(ecr) as stub:
        describe(stub)
        image_lookup(stub, push_image.DOCKER_MANIFEST_V2)
        assert run(ecr, ref_file, docker) == 0
    assert docker.calls == []


def test_an_image_sagemaker_would_refuse_is_named(
    ecr: Any, ref_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An OCI image index (buildx's default with provenance) under the tag: CreateModel would
    answer "Unsupported manifest media type"; refused here, naming both types."""
    with Stubber(ecr) as stub:
        describe(stub)
        image_lookup(stub, OCI_INDEX)
        assert run(ecr, ref_file, Docker()) == 1
    err = capsys.readouterr().err
    assert OCI_INDEX in err and push_image.DOCKER_MANIFEST_V2 in err and "push another tag" in err


def test_a_push_that_lands_as_an_oci_index_fails_the_job(
    ecr: Any, ref_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Stubber(ecr) as stub:
        describe(stub)
        image_lookup(stub, None)
        login(stub)
        image_lookup(stub, OCI_INDEX)
        assert run(ecr, ref_file, Docker()) == 1
    assert "SageMaker accepts" in capsys.readouterr().err


def test_a_missing_repository_is_refused_before_anything_is_built(
    ecr: Any, ref_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docker = Docker()
    with Stubber(ecr) as stub:
        stub.add_client_error("describe_repositories", "RepositoryNotFoundException", "not found")
        assert run(ecr, ref_file, docker) == 1
    assert docker.calls == []
    assert "make deploy-repository ENV=dev" in capsys.readouterr().err


def test_a_failed_build_or_login_pushes_nothing_and_says_so(
    ecr: Any, ref_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for fail, said in (("buildx", "nothing was pushed"), ("login", "docker login")):
        with Stubber(ecr) as stub:
            describe(stub)
            image_lookup(stub, None)
            login(stub)
            assert run(ecr, ref_file, Docker(fail=fail)) == 1
            stub.assert_no_pending_responses()  # no read-back after a failure
        assert said in capsys.readouterr().err


def test_no_model_release_fetched_is_refused_before_login(
    ecr: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docker = Docker()
    with Stubber(ecr) as stub:
        describe(stub)
        image_lookup(stub, None)
        assert run(ecr, tmp_path / "missing.ref", docker) == 1
    assert docker.calls == [] and "make fetch-model" in capsys.readouterr().err


def test_a_bad_tag_is_refused_naming_it(
    ecr: Any, ref_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Stubber(ecr):
        assert push_image.main(
            ["--env", "dev", "--tag", "-bad tag", "--ref-file", str(ref_file)],
            clients={"ecr": ecr}, runner=Docker(),
        ) == 2  # fmt: skip
    assert "TAG: '-bad tag'" in capsys.readouterr().err


ROLE = "arn:aws:iam::123456789012:role/mangaassist-dev-deploy"


def test_ci_config_writes_the_region_role_and_image_tag_as_job_outputs(tmp_path: Path) -> None:
    out = tmp_path / "github_output"
    environ = {"DEPLOY_ROLE_ARN_DEV": ROLE, "GITHUB_SHA": TAG, "GITHUB_OUTPUT": str(out)}
    assert ci_config.main(["--env", "dev"], environ) == 0
    assert out.read_text().splitlines() == [
        f"region={REGION}", f"role-arn={ROLE}", f"image-tag={TAG}",
        "release-minutes=307", "release-session-seconds=18420",
    ]  # fmt: skip


def test_ci_config_warns_when_the_release_job_outlasts_a_hosted_runner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sizing import release_jobs

    monkeypatch.setattr(release_jobs, "IMAGE_BUILD_SECONDS", 3 * 3600)  # a slow build
    environ = {"DEPLOY_ROLE_ARN_DEV": ROLE, "GITHUB_OUTPUT": str(tmp_path / "out")}
    assert ci_config.main(["--env", "dev"], environ) == 0
    err = capsys.readouterr().err
    assert err.startswith("::warning title=release job length (dev)::the release job may run")
    assert "set the repository variable IMAGE_RUNNER" in err
    assert ci_config.main(["--env", "dev"], {**environ, "IMAGE_RUNNER": "gpu-builder"}) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("", "DEPLOY_ROLE_ARN_PROD: not set"),
        ("AKIAIOSFODNN7EXAMPLE", "is not an IAM role ARN"),
        ("arn:aws:iam::123456789012:user/ci", "is not an IAM role ARN"),
    ],
)
def test_ci_config_refuses_a_run_without_the_role_naming_the_variable_and_the_fix(
    value: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "github_output"
    environ = {"DEPLOY_ROLE_ARN_PROD": value, "GITHUB_OUTPUT": str(out)}
    assert ci_config.main(["--env", "prod"], environ) == 2
    err = capsys.readouterr().err
    assert err.startswith("::error title=release configuration (prod)::")
    assert said in err and "make deploy-access ENV=prod" in err
    assert not out.exists()


def test_ci_config_checks_the_diff_role_for_the_pull_request_workflow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "github_output"
    diff = "arn:aws:iam::123456789012:role/mangaassist-dev-diff"
    environ = {"DIFF_ROLE_ARN_DEV": diff, "GITHUB_OUTPUT": str(out)}
    assert ci_config.main(["--env", "dev", "--role", "diff"], environ) == 0
    assert f"role-arn={diff}" in out.read_text()
    # the deploy role's variable does not stand in for it
    assert ci_config.main(["--env", "dev", "--role", "diff"], {"DEPLOY_ROLE_ARN_DEV": ROLE}) == 2
    err = capsys.readouterr().err
    assert "DIFF_ROLE_ARN_DEV: not set" in err and "its output DiffRoleArn" in err


def test_ci_config_refuses_a_role_in_another_account_than_the_config_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from typed_config import ConfigError

    from .conftest import load_env

    cfg = load_env("prod").model_copy(update={"account": "210987654321"})
    with pytest.raises(ConfigError, match=r"account 123456789012, but config/prod\.yaml deploys"):
        ci_config.deploy_role(cfg, {"DEPLOY_ROLE_ARN_PROD": ROLE})
