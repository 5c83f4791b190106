"""tools/release_artifacts.py: dev's release recorded by its digests, copied into prod and
verified, never rebuilt; and ``make deploy IMAGE_DIGEST=`` refusing a tag that is another image.

ECR is a botocore Stubber-ed client (the copy itself is ``docker buildx imagetools create``, a
recorded command here); S3 and STS are moto's, with dev's release published into dev's bucket
by the preparation job's own code (container/model_prep/artifact.publish)."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber
from moto import mock_aws

import tools.deploy
from container.model_prep import artifact
from container.model_prep.manifest import write_manifest
from tools import release_artifacts as ra
from tools.push_image import DOCKER_MANIFEST_V2
from typed_config import artifact_version

from .conftest import REPO_ROOT, load_env

ACCOUNT = "123456789012"  # moto's
REGION = "us-east-1"
REGISTRY = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
TAG = "f6e5d4c3b2a1"
DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
SOURCE = f"{REGISTRY}/mangaassist-vllm-dev@{DIGEST}"
TARGET = f"{REGISTRY}/mangaassist-vllm-prod:{TAG}"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


@pytest.fixture
def aws(monkeypatch) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws():
        ecr = boto3.client("ecr", region_name=REGION)
        stub = Stubber(ecr)
        stub.activate()
        yield {
            "ecr": ecr,
            "stub": stub,
            "s3": boto3.client("s3", region_name=REGION),
            "sts": boto3.client("sts", region_name=REGION),
        }


class Runner:
    """docker, recorded: each command and whether it was given a password on stdin."""

    def __init__(self, rc: int = 0) -> None:
        self.commands: list[list[str]] = []
        self.rc = rc

    def __call__(self, command: Sequence[str], stdin: str | None) -> int:
        self.commands.append(list(command))
        return self.rc


def tagged(stub: Stubber, repository: str, digest: str | None, media: str = DOCKER_MANIFEST_V2):
    """BatchGetImage of ``repository:TAG``: ``digest`` there, or not there (None)."""
    images = (
        [{"imageId": {"imageTag": TAG, "imageDigest": digest}, "imageManifest": "{}",
          "imageManifestMediaType": media, "repositoryName": repository}]
        if digest else []
    )  # fmt: skip
    failures = [] if digest else [{"imageId": {"imageTag": TAG}, "failureCode": "ImageNotFound"}]
    stub.add_response(
        "batch_get_image",
        {"images": images, "failures": failures},
        {"repositoryName": repository, "imageIds": [{"imageTag": TAG}],
         "acceptedMediaTypes": ra.ACCEPTED},
    )  # fmt: skip


def source_image(stub: Stubber, media: str = DOCKER_MANIFEST_V2) -> None:
    stub.add_response(
        "describe_images",
        {"imageDetails": [{"imageDigest": DIGEST, "imageManifestMediaType": media}]},
        {"repositoryName": "mangaassist-vllm-dev", "imageIds": [{"imageDigest": DIGEST}]},
    )


def login(stub: Stubber) -> None:
    token = base64.b64encode(b"AWS:secret-password").decode()
    stub.add_response(
        "get_authorization_token",
        {"authorizationData": [{"authorizationToken": token, "proxyEndpoint": f"https://{REGISTRY}"}]},
    )  # fmt: skip


def promote_image(aws: dict[str, Any], runner: Runner, **kw: Any) -> str:
    args = {"ecr": aws["ecr"], "sts": aws["sts"], "source_ref": SOURCE, "tag": TAG, "run": runner}
    return ra.promote_image(load_env("prod"), **{**args, **kw})


# --- the image ---------------------------------------------------------------------------------


def test_the_image_is_copied_by_digest_and_read_back(aws) -> None:
    stub, runner = aws["stub"], Runner()
    tagged(stub, "mangaassist-vllm-prod", None)
    source_image(stub)
    login(stub)
    tagged(stub, "mangaassist-vllm-prod", DIGEST)
    assert promote_image(aws, runner) == DIGEST
    login_cmd, copy = runner.commands
    assert login_cmd[:2] == ["docker", "login"] and "secret-password" not in login_cmd
    # one manifest copied as is (no manifest list around it: SageMaker runs Docker v2 only)
    assert copy == ["docker", "buildx", "imagetools", "create", "--prefer-index=false",
                    "--tag", TARGET, SOURCE]  # fmt: skip
    stub.assert_no_pending_responses()


def test_a_digest_that_differs_after_the_copy_is_refused_naming_both(aws) -> None:
    stub = aws["stub"]
    tagged(stub, "mangaassist-vllm-prod", None)
    source_image(stub)
    login(stub)
    tagged(stub, "mangaassist-vllm-prod", OTHER, OCI_INDEX)
    with pytest.raises(ra.PromotionRefused) as err:
        promote_image(aws, Runner())
    assert f"{TARGET} is {OTHER} after the copy, not the source's {DIGEST}" in str(err.value)
    assert "do not deploy it" in str(err.value)


def test_a_rerun_finds_the_digest_there_and_copies_nothing(aws) -> None:
    runner = Runner()
    tagged(aws["stub"], "mangaassist-vllm-prod", DIGEST)
    assert promote_image(aws, runner) == DIGEST
    assert runner.commands == []


def test_a_tag_that_holds_another_image_is_refused_naming_both(aws) -> None:
    runner = Runner()
    tagged(aws["stub"], "mangaassist-vllm-prod", OTHER)
    with pytest.raises(ra.PromotionRefused) as err:
        promote_image(aws, runner)
    assert f"{TARGET} already holds {OTHER}, not the promoted {DIGEST}" in str(err.value)
    assert runner.commands == []


@pytest.mark.parametrize(
    "ref",
    [
        f"{REGISTRY}/some-other-repo@{DIGEST}",
        f"999988887777.dkr.ecr.{REGION}.amazonaws.com/mangaassist-vllm-dev@{DIGEST}",
        f"{ACCOUNT}.dkr.ecr.eu-west-1.amazonaws.com/mangaassist-vllm-dev@{DIGEST}",
    ],
)
def test_a_source_that_is_not_devs_repository_here_is_refused(aws, ref) -> None:
    runner = Runner()
    with pytest.raises(ra.PromotionRefused) as err:
        promote_image(aws, runner, source_ref=ref)
    assert "is not dev's repository mangaassist-vllm-dev" in str(err.value)
    assert runner.commands == []


def test_a_source_manifest_sagemaker_cannot_run_is_refused_before_the_copy(aws) -> None:
    stub, runner = aws["stub"], Runner()
    tagged(stub, "mangaassist-vllm-prod", None)
    source_image(stub, OCI_INDEX)
    with pytest.raises(ra.PromotionRefused) as err:
        promote_image(aws, runner)
    assert "SageMaker accepts" in str(err.value) and runner.commands == []


def configs(tmp_path: Path, **prod_changes: Any) -> Path:
    shutil.copytree(REPO_ROOT / "config", tmp_path / "config")
    raw = yaml.safe_load((tmp_path / "config" / "prod.yaml").read_text())
    for section, values in prod_changes.items():
        raw.setdefault(section, {}).update(values)
    (tmp_path / "config" / "prod.yaml").write_text(yaml.safe_dump(raw))
    return tmp_path


def test_an_image_prods_config_would_not_build_is_refused(aws, tmp_path) -> None:
    """prod's config bakes another model release than dev's built image: promoting it would run
    an image prod's config does not describe."""
    root = configs(tmp_path, model={"artifact": "m-0000000000000000"})
    runner = Runner()
    with pytest.raises(ra.PromotionRefused) as err:
        ra.promote_image(
            ra.load_config(root / "config" / "prod.yaml", env="prod"),
            ecr=aws["ecr"], sts=aws["sts"], source_ref=SOURCE, tag=TAG, run=runner, root=root,
        )  # fmt: skip
    assert "config/prod.yaml would build another image than config/dev.yaml" in str(err.value)
    assert "MODEL_ARTIFACT_VERSION" in str(err.value)


def test_committed_dev_and_prod_build_the_same_image_so_prod_can_promote_devs() -> None:
    from stacks.constructs.image import image_build_args

    prod = load_env("prod")
    assert prod.promotion is not None and prod.promotion.from_env == "dev"
    assert image_build_args(prod) == image_build_args(load_env("dev"))
    assert artifact_version(prod) == artifact_version(load_env("dev"))


# --- the model release -------------------------------------------------------------------------

DEV_BUCKET = f"mangaassist-dev-models-{ACCOUNT}"
PROD_BUCKET = f"mangaassist-prod-models-{ACCOUNT}"


def publish_dev_release(aws: dict[str, Any], tmp_path: Path) -> tuple[str, str]:
    """dev's release as the preparation job publishes it; ``(s3 uri, manifest sha256)``."""
    version = artifact_version(load_env("prod"))
    root = tmp_path / "release"
    (root / "base").mkdir(parents=True)
    (root / "base" / "model.safetensors").write_bytes(b"weights" * 1000)
    (root / "base" / "config.json").write_text("{}")
    write_manifest(root, version=version)
    for bucket in (DEV_BUCKET, PROD_BUCKET):
        aws["s3"].create_bucket(Bucket=bucket)
    where = artifact.ArtifactLocation(DEV_BUCKET, "models")
    uri = artifact.publish(aws["s3"], root, where, log=lambda *_: None)
    body = aws["s3"].get_object(Bucket=DEV_BUCKET, Key=f"models/{version}/manifest.json")
    return uri, hashlib.sha256(body["Body"].read()).hexdigest()


def promote_model(aws: dict[str, Any], uri: str, sha: str) -> str:
    return ra.promote_model(
        load_env("prod"), s3=aws["s3"], sts=aws["sts"], source_uri=uri, manifest_sha256=sha
    )


def prod_manifest(aws: dict[str, Any], version: str) -> dict[str, Any] | None:
    return artifact.read_manifest(aws["s3"], artifact.ArtifactLocation(PROD_BUCKET, "models"),
                                  version)  # fmt: skip


def test_the_model_release_is_copied_by_its_manifest_and_verified(aws, tmp_path, capsys) -> None:
    uri, sha = publish_dev_release(aws, tmp_path)
    version = uri.rsplit("/", 1)[1]
    assert promote_model(aws, uri, sha) == f"s3://{PROD_BUCKET}/models/{version}"
    copied = prod_manifest(aws, version)
    assert copied is not None
    source = artifact.read_manifest(aws["s3"], artifact.ArtifactLocation(DEV_BUCKET, "models"),
                                    version)  # fmt: skip
    assert source is not None and copied["files"] == source["files"]
    assert copied["upload"] != source["upload"]  # a fresh upload id, as a publication
    # prod's own copy reads back through the same fetch-and-verify a build uses
    fetched = artifact.fetch(aws["s3"], artifact.ArtifactLocation(PROD_BUCKET, "models"),
                             version, tmp_path / "fetched")  # fmt: skip
    assert fetched["files"] == source["files"]
    capsys.readouterr()
    assert promote_model(aws, uri, sha)  # a re-run: nothing copied
    assert "already published with the same files: nothing to copy" in capsys.readouterr().out


def test_a_manifest_that_is_not_the_recorded_one_is_refused_naming_both(aws, tmp_path) -> None:
    uri, sha = publish_dev_release(aws, tmp_path)
    with pytest.raises(ra.PromotionRefused) as err:
        promote_model(aws, uri, "0" * 64)
    assert f"has sha256 {sha}, not the recorded {'0' * 64}" in str(err.value)


def test_a_malformed_source_manifest_is_refused_naming_it(aws, tmp_path) -> None:
    """Read through model_prep's parse_manifest, as every other reader: a refusal naming the
    file, not a JSON traceback; nothing is published in prod."""
    uri, _ = publish_dev_release(aws, tmp_path)
    version = uri.rsplit("/", 1)[1]
    body = b"{not json"
    aws["s3"].put_object(Bucket=DEV_BUCKET, Key=f"models/{version}/manifest.json", Body=body)
    with pytest.raises(ra.PromotionRefused) as err:
        promote_model(aws, uri, hashlib.sha256(body).hexdigest())
    assert f"models/{version}/manifest.json: malformed manifest" in str(err.value)
    assert prod_manifest(aws, version) is None


def test_a_file_whose_sha256_differs_is_refused_naming_it_and_nothing_is_published(
    aws, tmp_path
) -> None:
    uri, sha = publish_dev_release(aws, tmp_path)
    version = uri.rsplit("/", 1)[1]
    manifest = json.loads(
        aws["s3"]
        .get_object(Bucket=DEV_BUCKET, Key=f"models/{version}/manifest.json")["Body"]
        .read()
    )
    key = f"models/{version}/{manifest['upload']}/base/model.safetensors"
    aws["s3"].put_object(Bucket=DEV_BUCKET, Key=key, Body=b"not the weights")  # bit rot, a bad copy
    with pytest.raises(ra.PromotionRefused) as err:
        promote_model(aws, uri, sha)
    message = str(err.value)
    assert f"model release {version}: base/model.safetensors copied to" in message
    assert f"the manifest says {manifest['files']['base/model.safetensors']}" in message
    assert "nothing published" in message
    assert prod_manifest(aws, version) is None


def test_a_release_of_another_location_or_version_is_refused(aws, tmp_path) -> None:
    uri, sha = publish_dev_release(aws, tmp_path)
    with pytest.raises(ra.PromotionRefused) as err:
        promote_model(aws, uri.replace(DEV_BUCKET, "someone-elses-bucket"), sha)
    assert "is not under dev's release location" in str(err.value)
    with pytest.raises(ra.PromotionRefused) as err:
        promote_model(aws, uri.rsplit("/", 1)[0] + "/m-0000000000000000", sha)
    assert "config/prod.yaml bakes model release" in str(err.value)


# --- record, and the CLI -----------------------------------------------------------------------


def test_record_writes_the_job_outputs_prod_promotes(aws, tmp_path, capsys) -> None:
    uri, sha = publish_dev_release(aws, tmp_path)
    tagged(aws["stub"], "mangaassist-vllm-dev", DIGEST)
    out = tmp_path / "github_output"
    clients = {k: aws[k] for k in ("ecr", "s3", "sts")}
    rc = ra.main(["record", "--env", "dev", "--tag", TAG], clients=clients,
                 environ={"GITHUB_OUTPUT": str(out)})  # fmt: skip
    assert rc == 0
    assert out.read_text().splitlines() == [
        f"image-ref={SOURCE}",
        f"image-digest={DIGEST}",
        f"model-release={uri}",
        f"model-manifest-sha256={sha}",
    ]


def test_record_refuses_a_tag_that_was_not_pushed(aws, capsys) -> None:
    tagged(aws["stub"], "mangaassist-vllm-dev", None)
    clients = {k: aws[k] for k in ("ecr", "s3", "sts")}
    assert ra.main(["record", "--env", "dev", "--tag", TAG], clients=clients, environ={}) == 1
    assert "make push-image ENV=dev TAG=" in capsys.readouterr().err


def test_dev_promotes_nothing(aws, capsys) -> None:
    clients = {k: aws[k] for k in ("ecr", "s3", "sts")}
    argv = ["image", "--env", "dev", "--source", SOURCE, "--tag", TAG]
    assert ra.main(argv, clients=clients, runner=Runner(), environ={}) == 2
    assert "promotion: config/dev.yaml promotes nothing" in capsys.readouterr().err


# --- make deploy IMAGE_DIGEST= ---------------------------------------------------------------


def deploy_check(aws: dict[str, Any], found: str, image_tag: str = f"canary={TAG}") -> None:
    from sizing.deploy_options import DeployOptions

    cfg = DeployOptions.from_context({"image_tag": image_tag}.get).apply(load_env("prod"))
    aws["stub"].add_response(
        "batch_get_image",
        {"images": [{"imageId": {"imageTag": TAG, "imageDigest": found}}], "failures": []},
    )
    tools.deploy.refuse_missing_image_tags(
        aws["ecr"], cfg, DIGEST, tools.deploy.promoted_tag(image_tag)
    )


def test_deploy_runs_the_promoted_digest_and_refuses_a_tag_that_is_another_image(aws) -> None:
    deploy_check(aws, DIGEST)
    with pytest.raises(tools.deploy.DeployRefused) as err:
        deploy_check(aws, OTHER)
    assert f"mangaassist-vllm-prod:{TAG} is {OTHER}, not the promoted {DIGEST}" in str(err.value)
    with pytest.raises(tools.deploy.DeployRefused) as err:
        tools.deploy.promoted_tag(f"primary=a1,canary={TAG}")
    assert "IMAGE_DIGEST needs IMAGE_TAG to name one tag" in str(err.value)
