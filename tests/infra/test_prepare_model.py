"""make prepare-model against SageMaker's API: the real SDK (sagemaker-core) builds the request,
botocore's Stubber answers CreateTrainingJob / DescribeTrainingJob as SageMaker would (and with
the faults a bad day brings); S3, STS and CloudWatch Logs are moto's. Each test asserts the end
state: what was printed, what was created, what was published."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from container.model_prep import artifact
from container.model_prep.compile_cache_step import ENGINE_FILE
from container.model_prep.manifest import write_manifest
from container.model_prep.release import ReleaseInputs
from stacks.constructs.endpoint import container_environment
from tools import prepare_model
from typed_config import ModelPrepConfig, artifact_location_uri, release_inputs

ACCOUNT = "123456789012"  # moto's
JOB_IMAGE = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/mangaassist-serving:model-prep-abc"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/prep"


class FakeSession(boto3.Session):
    """boto3 under moto, except SageMaker and CloudFormation: one stubbed client each, shared
    by the SDK (which asks the session for its client) and the tool."""

    def __init__(self) -> None:
        super().__init__(region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
        self.stubbed: dict[str, Any] = {}
        for name in ("sagemaker", "cloudformation"):
            client = super().client(name, region_name="us-east-1")
            self.stubbed[name] = (client, Stubber(client))
        self.created: list[dict[str, Any]] = []
        sm = self.stubbed["sagemaker"][0]
        sm.meta.events.register(
            "before-parameter-build.sagemaker.CreateTrainingJob",
            lambda params, **_: self.created.append(params),
        )

    def client(self, name: str, *args: Any, **kw: Any) -> Any:  # type: ignore[override]
        if name in self.stubbed:
            return self.stubbed[name][0]
        return super().client(name, *args, **kw)

    def stub(self, name: str) -> Stubber:
        return self.stubbed[name][1]


#: The release stack also exports the Bedrock import role; its output ends in "RoleArn" too
#: and comes first here, so a lookup by a loose suffix would take the wrong role.
IMPORT_ROLE = "arn:aws:iam::123456789012:role/bedrock-import"


def describe(name: str, status: str, secondary: str, reason: str | None = None) -> dict:
    now = datetime(2026, 11, 24, tzinfo=UTC)
    d: dict[str, Any] = {
        "TrainingJobName": name,
        "TrainingJobArn": f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:training-job/{name}",
        "ModelArtifacts": {"S3ModelArtifacts": "s3://x/y"},
        "TrainingJobStatus": status,
        "SecondaryStatus": secondary,
        "AlgorithmSpecification": {"TrainingImage": JOB_IMAGE, "TrainingInputMode": "File"},
        "ResourceConfig": {
            "InstanceType": "ml.g6e.xlarge",
            "InstanceCount": 1,
            "VolumeSizeInGB": 40,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 4500},
        "CreationTime": now,
    }
    if reason:
        d["FailureReason"] = reason
    return d


@pytest.fixture
def aws(monkeypatch):
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "t")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "t")
    from sagemaker.core.utils.utils import SageMakerClient

    SageMakerClient.reset()  # the SDK caches clients by id(session): a new test, new clients
    with mock_aws():
        session = FakeSession()
        yield session
    SageMakerClient.reset()


@pytest.fixture
def cfg(prod_cfg):
    prep = ModelPrepConfig(job_image=JOB_IMAGE, hf_token_secret="hf/token")
    return prod_cfg.model_copy(update={"model_prep": prep})


def stack_outputs(session: FakeSession, cfg) -> None:
    session.stub("cloudformation").add_response(
        "describe_stacks",
        {"Stacks": [{"StackName": f"{cfg.project}-{cfg.env}-model-release",
                     "CreationTime": datetime(2026, 11, 1, tzinfo=UTC),
                     "StackStatus": "CREATE_COMPLETE",
                     "Outputs": [{"OutputKey": "BedrockImportRoleArn", "OutputValue": IMPORT_ROLE},
                                 {"OutputKey": "ModelPrepRoleArn", "OutputValue": ROLE}]}]},
    )  # fmt: skip
    session.stub("cloudformation").activate()


def summary_of(name: str, status: str, created: datetime) -> dict[str, Any]:
    arn = f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:training-job/{name}"
    return {"TrainingJobName": name, "TrainingJobStatus": status, "CreationTime": created,
            "TrainingJobArn": arn}  # fmt: skip


def listed(session: FakeSession, *jobs: dict[str, Any], version: str | None = None) -> None:
    """ListTrainingJobs' answer: ``jobs`` (none: no job was ever started for the version)."""
    params = None
    if version is not None:
        params = {"NameContains": f"mangaassist-prod-prep-{version[2:]}",
                  "SortBy": "CreationTime", "SortOrder": "Descending"}  # fmt: skip
    session.stub("sagemaker").add_response(
        "list_training_jobs", {"TrainingJobSummaries": list(jobs)}, params
    )


def bucket(session: FakeSession, cfg) -> artifact.ArtifactLocation:
    where = artifact.ArtifactLocation.parse(artifact_location_uri(cfg, ACCOUNT))
    session.client("s3").create_bucket(Bucket=where.bucket)
    return where


def publish_for(session: FakeSession, where, version: str, tmp: Path) -> None:
    root = tmp / "prepared"
    (root / "base").mkdir(parents=True)
    (root / "base" / "config.json").write_text("{}")
    write_manifest(root, version=version, quality_gate={
        "next_token_agreement": 0.9731, "min_agreement": 0.9, "passed": True})  # fmt: skip
    artifact.publish(session.client("s3"), root, where, log=lambda _: None)


def job_logs(session: FakeSession, job_name: str, lines: list[str]) -> None:
    logs = session.client("logs")
    now_ms = int(time.time() * 1000)  # CloudWatch (and moto) refuse events older than 14 days
    logs.create_log_group(logGroupName=prepare_model.TRAINING_LOG_GROUP)
    stream = f"{job_name}/algo-1-1764000000"
    logs.create_log_stream(logGroupName=prepare_model.TRAINING_LOG_GROUP, logStreamName=stream)
    logs.put_log_events(
        logGroupName=prepare_model.TRAINING_LOG_GROUP,
        logStreamName=stream,
        logEvents=[{"timestamp": now_ms + i, "message": m} for i, m in enumerate(lines)],
    )


def run(cfg, session, lines: list[str]) -> int:
    return prepare_model.prepare(cfg, session, poll_seconds=0, out=lines.append,
                                 sleep=lambda _: None)  # fmt: skip


def test_already_published_answers_at_once_and_starts_nothing(aws, cfg, tmp_path) -> None:
    where = bucket(aws, cfg)
    version = release_inputs(cfg).version
    publish_for(aws, where, version, tmp_path)
    lines: list[str] = []
    assert run(cfg, aws, lines) == 0
    assert lines == [
        f"prepare-model: {where.uri(version)} already published: {version}: quality gate passed "
        f"(agreement 0.9731 >= 0.9), 0.0 MiB, 1 files"
    ]
    assert aws.created == []  # no job


def job_name_from(created: list[dict[str, Any]]) -> str:
    return str(created[0]["TrainingJobName"])


def test_a_failed_job_shows_its_reason_and_last_log_lines_and_publishes_nothing(
    aws, cfg, tmp_path, capsys
) -> None:
    where = bucket(aws, cfg)
    stack_outputs(aws, cfg)
    version = release_inputs(cfg).version
    sm = aws.stub("sagemaker")
    listed(aws)
    sm.add_response("create_training_job", {"TrainingJobArn": "arn:aws:sagemaker:x"})

    def on_create(params, **_):
        n = params["TrainingJobName"]
        # the SDK's own Describe after Create, then the watch's polls
        for status, secondary in (("InProgress", "Starting"), ("InProgress", "Training")):
            sm.add_response("describe_training_job", describe(n, status, secondary))
        reason = "AlgorithmError: model-prep FAILED: quality gate next-token agreement 0.81 < 0.9"
        sm.add_response("describe_training_job", describe(n, "Failed", "Failed", reason))
        job_logs(aws, n, [
            "model-prep: quantize: AWQ W4A16_ASYM on the calibration set ...",
            "quality gate FAILED: next-token agreement 0.8100 < 0.9",
            "model-prep FAILED: quality_gate.py exited 1"])  # fmt: skip

    aws.stubbed["sagemaker"][0].meta.events.register(
        "before-parameter-build.sagemaker.CreateTrainingJob", on_create
    )
    sm.activate()
    lines: list[str] = []
    assert run(cfg, aws, lines) == 1
    text = "\n".join(lines)
    assert f"prepare-model: {version} on ml.g6e.xlarge (max 1h15m00s)" in text
    name = job_name_from(aws.created)
    assert f"{name} InProgress/Training" in text
    assert "model-prep: quantize: AWQ W4A16_ASYM" in text  # the phase while it ran
    assert (
        f"prepare-model FAILED: {name} Failed: AlgorithmError: model-prep FAILED: quality gate "
        "next-token agreement 0.81 < 0.9"
    ) in text
    assert "  model-prep FAILED: quality_gate.py exited 1" in text  # the job's last lines
    assert artifact.read_manifest(aws.client("s3"), where, version) is None
    sm.assert_no_pending_responses()


def test_the_job_request_is_what_model_prep_configures(aws, cfg) -> None:
    """The SDK's CreateTrainingJob request, validated by botocore against SageMaker's model."""
    where = bucket(aws, cfg)
    stack_outputs(aws, cfg)
    spot = cfg.model_copy(
        update={
            "model_prep": cfg.model_prep.model_copy(
                update={
                    "use_spot": True,
                    "max_wait_seconds": 6 * 3600,
                    "instance_type": "ml.g5.4xlarge",
                }
            )
        }
    )
    sm = aws.stub("sagemaker")
    listed(aws)
    sm.add_client_error("create_training_job", "ResourceLimitExceeded",
                        "The account-level service limit 'ml.g5.4xlarge for training job usage' "
                        "is 0 Instances")  # fmt: skip
    sm.activate()
    lines: list[str] = []
    assert run(spot, aws, lines) == 1
    (req,) = aws.created
    assert req["RoleArn"] == ROLE
    assert req["AlgorithmSpecification"]["TrainingImage"] == JOB_IMAGE
    assert req["ResourceConfig"] == {"InstanceType": "ml.g5.4xlarge", "InstanceCount": 1,
                                     "VolumeSizeInGB": 40}  # fmt: skip
    assert req["StoppingCondition"] == {"MaxRuntimeInSeconds": 4500,
                                        "MaxWaitTimeInSeconds": 21600}  # fmt: skip
    assert req["EnableManagedSpotTraining"] is True
    (channel,) = req["InputDataConfig"]
    assert channel["ChannelName"] == "release"
    inputs_uri = channel["DataSource"]["S3DataSource"]["S3Uri"]
    key = inputs_uri.split("/", 3)[3] + "inputs.json"
    sent = json.loads(aws.client("s3").get_object(Bucket=where.bucket, Key=key)["Body"].read())
    assert ReleaseInputs.from_json(sent) == release_inputs(cfg)
    # the engine settings the job makes the compile cache with: the primary Model's environment
    engine = aws.client("s3").get_object(Bucket=where.bucket, Key=key.replace("inputs.json",
                                         ENGINE_FILE))["Body"].read()  # fmt: skip
    assert json.loads(engine) == container_environment(spot, "primary")
    assert json.loads(engine)["VLLM_MAX_NUM_SEQS"] == str(spot.engine.max_num_seqs)
    # the token's secret is named, never the token itself
    assert req["Environment"] == {"MODEL_ARTIFACT_LOCATION": artifact_location_uri(cfg, ACCOUNT),
                                  "HF_TOKEN_SECRET": "hf/token"}  # fmt: skip


def test_a_refused_create_is_named(aws, cfg, capsys) -> None:
    bucket(aws, cfg)
    stack_outputs(aws, cfg)
    sm = aws.stub("sagemaker")
    listed(aws)
    sm.add_client_error("create_training_job", "ResourceLimitExceeded",
                        "The account-level service limit 'ml.g6e.xlarge for training job "
                        "usage' is 0 Instances")  # fmt: skip
    sm.activate()
    assert run(cfg, aws, []) == 1
    err = capsys.readouterr().err
    assert "prepare-model FAILED: ResourceLimitExceeded:" in err
    assert "ml.g6e.xlarge for training job usage" in err


def test_a_completed_job_is_read_back_from_s3(aws, cfg, tmp_path) -> None:
    where = bucket(aws, cfg)
    stack_outputs(aws, cfg)
    version = release_inputs(cfg).version
    sm = aws.stub("sagemaker")
    listed(aws)
    sm.add_response("create_training_job", {"TrainingJobArn": "arn:aws:sagemaker:x"})

    def on_create(params, **_):
        n = params["TrainingJobName"]
        sm.add_response("describe_training_job", describe(n, "InProgress", "Starting"))
        sm.add_response("describe_training_job", describe(n, "Completed", "Completed"))
        publish_for(aws, where, version, tmp_path)  # what the job does

    aws.stubbed["sagemaker"][0].meta.events.register(
        "before-parameter-build.sagemaker.CreateTrainingJob", on_create
    )
    sm.activate()
    lines: list[str] = []
    assert run(cfg, aws, lines) == 0
    assert lines[-1] == (
        f"prepare-model: published {version}: quality gate passed (agreement 0.9731 >= 0.9), "
        f"0.0 MiB, 1 files (by {job_name_from(aws.created)})"
    )


def test_a_completed_job_that_published_nothing_is_a_failure(aws, cfg) -> None:
    bucket(aws, cfg)
    stack_outputs(aws, cfg)
    sm = aws.stub("sagemaker")
    listed(aws)
    sm.add_response("create_training_job", {"TrainingJobArn": "arn:aws:sagemaker:x"})
    aws.stubbed["sagemaker"][0].meta.events.register(
        "before-parameter-build.sagemaker.CreateTrainingJob",
        lambda params, **_: [sm.add_response("describe_training_job", describe(
            params["TrainingJobName"], "Completed", "Completed")) for _ in range(2)],
    )  # fmt: skip
    sm.activate()
    lines: list[str] = []
    assert run(cfg, aws, lines) == 1
    assert "completed but" in lines[-1] and "has no manifest" in lines[-1]


def test_a_moving_revision_is_refused_before_any_aws_call(cfg, capsys, monkeypatch) -> None:
    moving = cfg.model_copy(update={"model": cfg.model.model_copy(update={"revision": "main"})})

    class NoAws:
        def client(self, *a, **k):
            pytest.fail("called AWS")

    assert prepare_model.prepare(moving, NoAws(), out=lambda _: None) == 1
    assert "model.revision: 'main' can move" in capsys.readouterr().err


def test_no_credentials_are_named_before_any_work(cfg, capsys, monkeypatch, tmp_path) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert prepare_model.prepare(cfg, boto3.Session(region_name="us-east-1")) == 1
    assert "prepare-model FAILED: no AWS credentials" in capsys.readouterr().err


def test_the_job_image_tag_follows_the_job_code() -> None:
    tag = prepare_model.job_image_tag()
    assert tag.startswith("model-prep-") and len(tag) == len("model-prep-") + 12
    assert prepare_model.job_image_tag() == tag


class Logs:
    """CloudWatch Logs with no stream yet (the instance is starting)."""

    def filter_log_events(self, **_: Any) -> dict[str, Any]:
        return {"events": []}


def test_the_watch_reads_again_after_a_dropped_connection_or_throttling() -> None:
    from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

    answers: list[Any] = [
        EndpointConnectionError(endpoint_url="https://api.sagemaker.us-east-1.amazonaws.com"),
        ReadTimeoutError(endpoint_url="https://api.sagemaker.us-east-1.amazonaws.com"),
        ClientError(
            {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}},
            "DescribeTrainingJob",
        ),
        {"TrainingJobStatus": "Completed", "SecondaryStatus": "Completed"},
    ]

    def describe() -> dict[str, Any]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    lines: list[str] = []
    final = prepare_model.watch(describe, Logs(), "job-1", poll_seconds=0,
                                sleep=lambda _: None, out=lines.append)  # fmt: skip
    assert final["TrainingJobStatus"] == "Completed" and answers == []
    assert [line.split("(")[1].split(")")[0] for line in lines[:3]] == [
        "EndpointConnectionError", "ReadTimeoutError", "ThrottlingException"]  # fmt: skip
    assert lines[-1].startswith("prepare-model: job-1 Completed/Completed")


def test_the_watch_gives_up_naming_the_job_that_keeps_running() -> None:
    from botocore.exceptions import EndpointConnectionError

    def describe() -> dict[str, Any]:
        raise EndpointConnectionError(endpoint_url="https://api.sagemaker.us-east-1.amazonaws.com")

    lines: list[str] = []
    with pytest.raises(prepare_model.PrepareError) as err:
        prepare_model.watch(describe, Logs(), "job-1", poll_seconds=0, sleep=lambda _: None,
                            out=lines.append)  # fmt: skip
    assert str(err.value) == (
        f"{prepare_model.STATUS_READ_ATTEMPTS} reads of job-1's status failed in a row (last: "
        "EndpointConnectionError); the job keeps running: aws sagemaker describe-training-job "
        "--training-job-name job-1"
    )
    assert len(lines) == prepare_model.STATUS_READ_ATTEMPTS - 1


def test_a_watch_whose_session_expires_says_how_to_resume_and_the_rerun_follows_the_same_job(
    aws, cfg, tmp_path, capsys
) -> None:
    """Issue 31: the job outlives the role's session. The first run's watch gets
    ExpiredTokenException and stops at once (no ten retries), naming the job and the command;
    the re-run finds the job InProgress through ListTrainingJobs and follows it to the end.
    One CreateTrainingJob in all."""
    where = bucket(aws, cfg)
    stack_outputs(aws, cfg)
    version = release_inputs(cfg).version
    sm = aws.stub("sagemaker")
    listed(aws, version=version)  # the first run: no job yet
    sm.add_response("create_training_job", {"TrainingJobArn": "arn:aws:sagemaker:x"})
    created = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)

    def on_create(params, **_):
        n = params["TrainingJobName"]
        sm.add_response("describe_training_job", describe(n, "InProgress", "Starting"))  # SDK's
        sm.add_response("describe_training_job", describe(n, "InProgress", "Training"))
        sm.add_client_error("describe_training_job", "ExpiredTokenException",
                            "The security token included in the request is expired",
                            http_status_code=403)  # fmt: skip
        # The re-run: the job is found running, followed, and publishes.
        listed(aws, summary_of("mangaassist-prod-prep-0000000000000000-1", "Failed", created),
               summary_of(n, "InProgress", created), version=version)  # fmt: skip
        sm.add_response("describe_training_job", describe(n, "InProgress", "Uploading"))
        sm.add_response("describe_training_job", describe(n, "Completed", "Completed"))

    aws.stubbed["sagemaker"][0].meta.events.register(
        "before-parameter-build.sagemaker.CreateTrainingJob", on_create
    )
    sm.activate()
    first: list[str] = []
    assert run(cfg, aws, first) == 1
    name = job_name_from(aws.created)
    err = capsys.readouterr().err
    assert err.strip() == (
        f"prepare-model FAILED: the AWS credentials expired while following {name} "
        "(ExpiredTokenException); the job keeps running in SageMaker. With fresh credentials, "
        "`make prepare-model ENV=prod` follows the same job (it never starts a second one for "
        "this version); in CI, re-run the failed job"
    )
    # The job publishes while the re-run follows it (after the re-run's manifest read).
    aws.stubbed["sagemaker"][0].meta.events.register(
        "after-call.sagemaker.ListTrainingJobs",
        lambda **_: publish_for(aws, where, version, tmp_path),
    )
    again: list[str] = []
    assert run(cfg, aws, again) == 0
    assert again[0] == (
        f"prepare-model: {name} is already preparing {version} (InProgress, created "
        "2026-11-24 09:00:00 UTC): following it, no second job"
    )
    assert again[-1].endswith(f"(by {name})")
    assert len(aws.created) == 1  # one job in the end
    sm.assert_no_pending_responses()


def test_a_completed_job_that_published_nothing_is_named_on_a_rerun_and_not_repeated(
    aws, cfg
) -> None:
    where = bucket(aws, cfg)
    version = release_inputs(cfg).version
    name = f"mangaassist-prod-prep-{version[2:]}-1124090000"
    listed(aws, summary_of(name, "Completed", datetime(2026, 11, 24, tzinfo=UTC)),
           version=version)  # fmt: skip
    aws.stub("sagemaker").activate()
    lines: list[str] = []
    assert run(cfg, aws, lines) == 1
    assert lines == [
        f"prepare-model FAILED: {name} completed but {where.uri(version)} has no manifest"
    ]
    assert aws.created == []
