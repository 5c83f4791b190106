"""make bedrock-package (tools/bedrock_package.py) against moto's S3: it packages only a
published release, answers "already published" with the package's digest, and refuses a machine
too small for the package with the figures of sizing/bedrock_package.py."""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from container.model_prep import artifact
from sizing.bedrock_package import (
    BF16_CHECKPOINT_BYTES,
    CPU_JOB_INSTANCE,
    package_need,
    placement,
)
from tools import bedrock_package as tool
from typed_config import artifact_location_uri, release_inputs

from .conftest import load_env

ACCOUNT = "123456789012"  # moto's
ROLE = f"arn:aws:iam::{ACCOUNT}:role/prep"


@pytest.fixture
def aws():
    with mock_aws():
        session = boto3.Session(region_name="us-east-1")
        cfg = load_env("dev")
        uri = artifact_location_uri(cfg, ACCOUNT)
        releases = artifact.ArtifactLocation.parse(uri)
        session.client("s3").create_bucket(Bucket=releases.bucket)
        yield session, cfg, releases


def args(tmp_path: Path) -> argparse.Namespace:  # the package python is never run here
    return argparse.Namespace(endpoint_url="", package_python=tmp_path / "no-python")


def publish_manifest(s3, where: artifact.ArtifactLocation, version: str) -> bytes:
    artifact.write_manifest_once(s3, where, version, {"version": version, "files": {}}, "u-1")
    return s3.get_object(Bucket=where.bucket, Key=where.key(version, "manifest.json"))[
        "Body"
    ].read()


def test_an_unpublished_release_is_refused_naming_the_command_that_publishes_it(aws, tmp_path):
    session, cfg, _ = aws
    with pytest.raises(tool.PackageRefused, match=r"make prepare-model ENV=dev first"):
        tool.run(cfg, args(tmp_path), session)


def test_a_published_package_answers_with_its_digest_and_builds_nothing(aws, tmp_path, capsys):
    session, cfg, releases = aws
    s3 = session.client("s3")
    version = release_inputs(cfg).version
    publish_manifest(s3, releases, version)
    where = tool.package_location(artifact_location_uri(cfg, ACCOUNT))
    assert where.prefix == "models/bedrock-v1"
    body = publish_manifest(s3, where, version)
    assert tool.run(cfg, args(tmp_path), session) == 0
    out = capsys.readouterr().out
    assert f"already published, digest {hashlib.sha256(body).hexdigest()}" in out


def test_a_machine_too_small_builds_the_package_in_a_cpu_job(monkeypatch, capsys) -> None:
    """The SDK's CreateTrainingJob request (validated by botocore against SageMaker's model):
    the preparation image and role, the CPU instance and the volume the sizing computed, the
    package build as entry point; the job publishes, the tool reads the digest back."""
    from sagemaker.core.utils.utils import SageMakerClient

    from .test_prepare_model import FakeSession, describe

    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "t")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "t")
    monkeypatch.setattr(tool, "machine_memory_bytes", lambda: 8 * 2**30)
    SageMakerClient.reset()
    image = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/mangaassist-vllm-dev:model-prep-abc"
    base = load_env("dev")
    cfg = base.model_copy(
        update={"model_prep": base.model_prep.model_copy(update={"job_image": image})}
    )
    version = release_inputs(cfg).version
    with mock_aws():
        session = FakeSession()
        s3 = session.client("s3")
        releases = artifact.ArtifactLocation.parse(artifact_location_uri(cfg, ACCOUNT))
        s3.create_bucket(Bucket=releases.bucket)
        publish_manifest(s3, releases, version)
        where = tool.package_location(artifact_location_uri(cfg, ACCOUNT))
        session.stub("cloudformation").add_response(
            "describe_stacks",
            {"Stacks": [{"StackName": "mangaassist-dev-model-release",
                         "CreationTime": "2026-11-01T00:00:00Z", "StackStatus": "CREATE_COMPLETE",
                         "Outputs": [{"OutputKey": "BedrockImportRoleArn", "OutputValue": "x"},
                                     {"OutputKey": "PrepRoleArn", "OutputValue": ROLE}]}]},
        )  # fmt: skip
        session.stub("cloudformation").activate()
        sm = session.stub("sagemaker")
        sm.add_response("list_training_jobs", {"TrainingJobSummaries": []})
        sm.add_response("create_training_job", {"TrainingJobArn": "arn:aws:sagemaker:x"})
        published: list[bytes] = []

        def on_create(params, **_):
            name = params["TrainingJobName"]
            sm.add_response("describe_training_job", describe(name, "InProgress", "Training"))
            sm.add_response("describe_training_job", describe(name, "Completed", "Completed"))
            published.append(publish_manifest(s3, where, version))  # what the job does

        session.stubbed["sagemaker"][0].meta.events.register(
            "before-parameter-build.sagemaker.CreateTrainingJob", on_create
        )
        sm.activate()
        assert tool.run(cfg, args(Path("/nonexistent")), session, sleep=lambda _: None) == 0
        sm.assert_no_pending_responses()
    SageMakerClient.reset()
    (req,) = session.created
    assert req["TrainingJobName"].startswith(f"mangaassist-dev-prep-bedrock-{version[2:]}-")
    assert req["RoleArn"] == ROLE
    assert req["AlgorithmSpecification"]["TrainingImage"] == image
    assert req["AlgorithmSpecification"]["ContainerEntrypoint"] == tool.JOB_ENTRYPOINT
    need = package_need(adapters=len(cfg.adapters))
    assert req["ResourceConfig"] == {"InstanceType": CPU_JOB_INSTANCE, "InstanceCount": 1,
                                     "VolumeSizeInGB": need.volume_gb}  # fmt: skip
    assert "EnableManagedSpotTraining" not in req or req["EnableManagedSpotTraining"] is False
    assert req["Environment"]["BEDROCK_PACKAGE_WORKDIR"] == tool.JOB_WORKDIR
    assert req["Environment"]["MODEL_ARTIFACT_LOCATION"] == artifact_location_uri(cfg, ACCOUNT)
    out = capsys.readouterr().out
    assert "a CPU job (ml.m5.2xlarge, 101 GB volume) is the place" in out
    assert f"digest {hashlib.sha256(published[0]).hexdigest()}" in out


def test_a_config_without_bedrock_packages_nothing(tmp_path, capsys) -> None:
    cfg = load_env("dev").model_copy(update={"bedrock": load_env("dev").bedrock.model_copy(
        update={"enabled": False})})  # fmt: skip
    assert tool.run(cfg, args(tmp_path), session=object()) == 0
    assert "bedrock.enabled is false" in capsys.readouterr().out


def test_the_package_size_and_its_place_follow_the_measured_checkpoint() -> None:
    need = package_need(adapters=3)
    assert need.package_bytes == 4 * BF16_CHECKPOINT_BYTES
    assert need.disk_bytes == 5 * BF16_CHECKPOINT_BYTES
    assert need.volume_gb == 101  # 80.3 GB x 1.25
    assert need.memory_bytes == 15 * 10**9
    roomy = placement(need, prep_volume_gb=40, free_disk_bytes=10**12, memory_bytes=64 * 2**30)
    assert roomy.where == "here"
    small = placement(need, prep_volume_gb=40, free_disk_bytes=50 * 10**9, memory_bytes=2**36)
    assert small.where == "cpu-job"
    assert "preparation job's volume is 40 GB" in small.reason
    assert "\n" not in small.reason  # one line
