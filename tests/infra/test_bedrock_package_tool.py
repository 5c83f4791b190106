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


@pytest.fixture
def aws():
    with mock_aws():
        session = boto3.Session(region_name="us-east-1")
        cfg = load_env("dev")
        uri = artifact_location_uri(cfg, ACCOUNT)
        releases = artifact.ArtifactLocation.parse(uri)
        session.client("s3").create_bucket(Bucket=releases.bucket)
        yield session, cfg, releases


def args(tmp_path: Path) -> argparse.Namespace:
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


def test_a_machine_too_small_is_refused_with_the_figures(aws, tmp_path, monkeypatch, capsys):
    session, cfg, releases = aws
    publish_manifest(session.client("s3"), releases, release_inputs(cfg).version)
    monkeypatch.setattr(tool, "machine_memory_bytes", lambda: 8 * 2**30)
    with pytest.raises(tool.PackageRefused, match="CPU job that would build it is not built"):
        tool.run(cfg, args(tmp_path), session)
    reason = capsys.readouterr().out
    assert "the package is 64.3 GB (4 models in bf16)" in reason
    assert "8.0 GiB" in reason and CPU_JOB_INSTANCE in reason


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
