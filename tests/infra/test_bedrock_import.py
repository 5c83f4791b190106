"""make bedrock-import (tools/bedrock_import.py) against botocore's own Bedrock, Bedrock Runtime and
CloudFormation service models (Stubber: every request is validated against the real API shape)
and moto's S3: success, a failed import, a re-run with the same digest (no second import) and a
caller without the permission. Each test asserts the end state: what is recorded in the bucket,
which imports exist or were deleted, what the operator is told."""

from __future__ import annotations

import hashlib
import io
import json
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber
from moto import mock_aws

from container.model_prep import artifact, bedrock_rules
from tools import bedrock_import as tool
from tools.bedrock_package import package_location
from typed_config import DeploymentConfig, artifact_location_uri, release_inputs

from .conftest import load_env

ACCOUNT = "123456789012"
REGION = "us-east-1"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/mangaassist-dev-bedrock-import"
JOB = f"arn:aws:bedrock:{REGION}:{ACCOUNT}:model-import-job/abcdefgh1234"
MODEL_ARN = f"arn:aws:bedrock:{REGION}:{ACCOUNT}:imported-model/abcdefgh1234"
OLD_ARN = f"arn:aws:bedrock:{REGION}:{ACCOUNT}:imported-model/oldoldold123"
NOW = datetime(2026, 11, 28, 8, 0, tzinfo=UTC)
ANSWER = {"choices": [{"message": {"role": "assistant", "content": "Try Frieren."}}]}


class Clock:
    """A clock that only moves when the tool sleeps: no real waiting, no timed assertion."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def package_manifest(files_for: str = "merged/manga_domain") -> dict[str, Any]:
    facts = {"architecture": "LlamaForCausalLM", "kind": "text", "dtype": "bfloat16",
             "size_bytes": 16_063_572_204, "max_position_embeddings": 8192, "files": 6}  # fmt: skip
    files = {f"{files_for}/{f}": "0" * 64 for f in bedrock_rules.REQUIRED_FILES}
    files[f"{files_for}/model-00001-of-00004.safetensors"] = "0" * 64
    return {
        "format": bedrock_rules.PACKAGE_FORMAT,
        "models": {"manga_domain": {"path": "merged/manga_domain", **facts}},
        "files": files,
    }


@pytest.fixture
def cfg() -> DeploymentConfig:
    return load_env("dev")


@pytest.fixture
def aws(cfg):
    """moto's S3 with the dev package published; stubbed Bedrock, Runtime and CloudFormation."""
    with mock_aws():
        session = boto3.Session(region_name=REGION)
        s3 = session.client("s3")
        where = package_location(artifact_location_uri(cfg, ACCOUNT))
        s3.create_bucket(Bucket=where.bucket)
        version = release_inputs(cfg).version
        artifact.write_manifest_once(s3, where, version, {"version": version,
                                     **package_manifest()}, "u-1")  # fmt: skip
        raw = s3.get_object(Bucket=where.bucket, Key=where.key(version, "manifest.json"))
        digest = hashlib.sha256(raw["Body"].read()).hexdigest()
        clients = {
            name: session.client(name)
            for name in ("bedrock", "bedrock-runtime", "cloudformation", "s3", "sts")
        }
        stubs = {n: Stubber(clients[n]) for n in ("bedrock", "bedrock-runtime", "cloudformation")}
        for stub in stubs.values():
            stub.activate()
        yield clients, stubs, where, version, digest
        for stub in stubs.values():
            stub.deactivate()


def stack_outputs(stubs) -> None:
    stubs["cloudformation"].add_response(
        "describe_stacks",
        {"Stacks": [{"StackName": "mangaassist-dev-model-release", "CreationTime": NOW,
                     "StackStatus": "UPDATE_COMPLETE",
                     "Outputs": [{"OutputKey": "BedrockImportRoleArn", "OutputValue": ROLE}]}]},
        {"StackName": "mangaassist-dev-model-release"},
    )  # fmt: skip


def not_imported(stubs, name: str) -> None:
    stubs["bedrock"].add_client_error(
        "get_imported_model", "ResourceNotFoundException", http_status_code=404,
        expected_params={"modelIdentifier": name},
    )  # fmt: skip
    stubs["bedrock"].add_response(
        "list_model_import_jobs", {"modelImportJobSummaries": []}, {"nameContains": name}
    )


def job_status(stubs, status: str, **extra: Any) -> None:
    stubs["bedrock"].add_response(
        "get_model_import_job",
        {"jobArn": JOB, "jobName": "job", "status": status, **extra},
        {"jobIdentifier": JOB},
    )


def imported(stubs, name: str, identifier: str) -> None:
    stubs["bedrock"].add_response(
        "get_imported_model",
        {"modelArn": MODEL_ARN, "modelName": name, "modelArchitecture": "llama",
         "customModelUnits": {"customModelUnitsPerModelCopy": 2, "customModelUnitsVersion": "1.0"}},
        {"modelIdentifier": identifier},
    )  # fmt: skip


def answers(stubs) -> None:
    raw = json.dumps(ANSWER).encode()
    stubs["bedrock-runtime"].add_response(
        "invoke_model",
        {"body": StreamingBody(io.BytesIO(raw), len(raw)), "contentType": "application/json"},
        {"modelId": MODEL_ARN, "body": ANY, "contentType": "application/json",
         "accept": "application/json"},
    )  # fmt: skip


def listed(stubs, names_arns: list[tuple[str, str]]) -> None:
    stubs["bedrock"].add_response(
        "list_imported_models",
        {"modelSummaries": [{"modelArn": arn, "modelName": n, "creationTime": NOW}
                            for n, arn in names_arns]},
        {"nameContains": "mangaassist-dev-"},
    )  # fmt: skip


def recorded(clients, where, version) -> dict[str, Any]:
    key = where.key(version, "imports/manga_domain.json")
    return json.loads(clients["s3"].get_object(Bucket=where.bucket, Key=key)["Body"].read())


def test_an_import_is_followed_to_its_end_recorded_smoked_and_older_imports_deleted(
    cfg, aws, capsys
) -> None:
    clients, stubs, where, version, digest = aws
    name = tool.imported_model_name(cfg, "manga_domain", digest)
    assert name == f"mangaassist-dev-manga-domain-{digest[:12]}"
    stale = "mangaassist-dev-manga-domain-0123456789ab"
    stack_outputs(stubs)
    not_imported(stubs, name)
    stubs["bedrock"].add_response(
        "create_model_import_job",
        {"jobArn": JOB},
        {
            "jobName": ANY,
            "importedModelName": name,
            "roleArn": ROLE,
            "modelDataSource": {
                "s3DataSource": {"s3Uri": f"{where.uri(version, 'u-1')}/merged/manga_domain/"}
            },
            "jobTags": ANY,
            "importedModelTags": [
                {"key": "model-release", "value": version},
                {"key": "bedrock-package-digest", "value": digest},
                {"key": "package-model", "value": "manga_domain"},
            ],
        },
    )
    job_status(stubs, "InProgress")
    job_status(stubs, "InProgress")
    job_status(stubs, "Completed", importedModelArn=MODEL_ARN)
    imported(stubs, name, MODEL_ARN)
    stubs["bedrock-runtime"].add_client_error(
        "invoke_model", "ModelNotReadyException", http_status_code=429,
        service_message="Model is not ready for inference. Wait and try your request again.",
    )  # fmt: skip
    answers(stubs)
    listed(stubs, [(name, MODEL_ARN), (stale, OLD_ARN), ("otherteam-dev-x-0123", OLD_ARN)])
    stubs["bedrock"].add_response("delete_imported_model", {}, {"modelIdentifier": OLD_ARN})

    clock = Clock()
    assert tool.run(cfg, clients, clock=clock, sleep=clock.sleep) == 0
    for stub in stubs.values():
        stub.assert_no_pending_responses()
    facts = recorded(clients, where, version)
    assert facts["imported_model_arn"] == MODEL_ARN and facts["package_digest"] == digest
    assert facts["release_version"] == version and facts["custom_model_units_per_copy"] == 2
    out = capsys.readouterr().out
    assert "InProgress (0 s)" in out and "Completed (60 s)" in out
    assert "not ready yet (cold start), retrying" in out
    assert f"deleted {stale}" in out and "otherteam" not in out


def test_a_rerun_with_the_same_digest_imports_nothing_again(cfg, aws, capsys) -> None:
    clients, stubs, _, _, digest = aws
    name = tool.imported_model_name(cfg, "manga_domain", digest)
    stack_outputs(stubs)
    imported(stubs, name, name)  # found by its name: this digest is imported
    answers(stubs)
    listed(stubs, [(name, MODEL_ARN)])
    clock = Clock()
    assert tool.run(cfg, clients, clock=clock, sleep=clock.sleep) == 0
    for stub in stubs.values():
        stub.assert_no_pending_responses()  # no create_model_import_job was stubbed or made
    assert "already imported for digest" in capsys.readouterr().out


def test_a_failed_import_is_named_and_nothing_is_recorded_or_deleted(cfg, aws) -> None:
    clients, stubs, where, version, digest = aws
    name = tool.imported_model_name(cfg, "manga_domain", digest)
    stack_outputs(stubs)
    not_imported(stubs, name)
    stubs["bedrock"].add_response("create_model_import_job", {"jobArn": JOB}, {
        "jobName": ANY, "importedModelName": name, "roleArn": ROLE, "modelDataSource": ANY,
        "jobTags": ANY, "importedModelTags": ANY})  # fmt: skip
    job_status(stubs, "Failed", failureMessage="Unsupported model architecture")
    clock = Clock()
    with pytest.raises(tool.ImportRefused, match="failed: Unsupported model architecture"):
        tool.run(cfg, clients, clock=clock, sleep=clock.sleep)
    for stub in stubs.values():
        stub.assert_no_pending_responses()  # no smoke, no list, no delete
    with pytest.raises(clients["s3"].exceptions.NoSuchKey):
        recorded(clients, where, version)


def test_a_caller_without_the_permission_is_told_which_action(cfg, aws) -> None:
    clients, stubs, where, version, digest = aws
    name = tool.imported_model_name(cfg, "manga_domain", digest)
    stack_outputs(stubs)
    not_imported(stubs, name)
    stubs["bedrock"].add_client_error(
        "create_model_import_job", "AccessDeniedException", http_status_code=403,
        service_message="User is not authorized to perform: bedrock:CreateModelImportJob",
    )  # fmt: skip
    with pytest.raises(tool.ImportRefused, match=r"^bedrock:CreateModelImportJob was refused"):
        tool.run(cfg, clients)
    for stub in stubs.values():
        stub.assert_no_pending_responses()
    with pytest.raises(clients["s3"].exceptions.NoSuchKey):
        recorded(clients, where, version)


def test_an_unpublished_package_or_a_model_it_lacks_is_refused_before_any_import(cfg) -> None:
    with mock_aws():
        session = boto3.Session(region_name=REGION)
        clients = {n: session.client(n) for n in ("s3", "sts", "bedrock", "cloudformation")}
        where = package_location(artifact_location_uri(cfg, ACCOUNT))
        clients["s3"].create_bucket(Bucket=where.bucket)
        with pytest.raises(tool.ImportRefused, match="run make bedrock-package ENV=dev first"):
            tool.run(cfg, clients)
        version = release_inputs(cfg).version
        artifact.write_manifest_once(clients["s3"], where, version, {"version": version,
                                     **package_manifest("merged/other")}, "u-1")  # fmt: skip
        with pytest.raises(tool.ImportRefused) as caught:
            tool.run(cfg, clients)
        assert "merged/manga_domain/tokenizer.json: not in the package's manifest" in str(
            caught.value
        )


def test_names_fit_bedrock_and_keep_the_digest() -> None:
    cfg = load_env("dev")
    long = tool.imported_model_name(cfg, "x_" * 40, "f" * 64)
    assert len(long) <= 63 and long.endswith("-ffffffffffff")
    assert tool.job_name(long, 0).endswith("-19700101000000") and len(tool.job_name(long, 0)) <= 63
