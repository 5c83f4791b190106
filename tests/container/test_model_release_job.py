"""The model-prep job's own entry point (container/model_prep/job.py), run as SageMaker would run it
(``train`` argument, inputs file, publish location) in local mode on the tiny model, publishing to
a real S3 API served on this machine (moto's server, started from the infra venv). Each test
asserts what the bucket holds afterwards: a whole release, or nothing a reader would accept.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _serving_support import ADAPTERS, BUCKET, CREDS, REPO, s3_client

from container.model_prep.release import ReleaseInputs, build_inputs

QUANT_PYTHON = os.environ.get("QUANT_PYTHON", sys.executable)


def write_inputs(tiny_src: Path, path: Path, *, min_agreement: float, adapters=None) -> str:
    adapters = adapters or [(n, f"local://{tiny_src / 'adapters' / n}", "v1", 8) for n in ADAPTERS]
    inputs = build_inputs(
        base_source=f"local://{tiny_src / 'base'}", base_revision="", quantization="awq",
        min_agreement=min_agreement, max_lora_rank=16, adapters=adapters,
        calibration=tiny_src / "calibration.jsonl", heldout=tiny_src / "heldout.jsonl",
    )  # fmt: skip
    path.write_text(json.dumps(inputs.to_json()))
    return inputs.version


def job(url: str, tiny_src: Path, inputs: Path, work: Path, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "container.model_prep.job", "train", "--local",
         "--inputs", str(inputs), "--publish", f"s3://{BUCKET}/models", "--endpoint-url", url,
         "--quant-python", QUANT_PYTHON, "--workdir", str(work),
         "--calibration", str(tiny_src / "calibration.jsonl"),
         "--heldout", str(tiny_src / "heldout.jsonl")],
        cwd=REPO, capture_output=True, text=True, timeout=900,
        env=env or {**os.environ, **CREDS, "PYTHONPATH": str(REPO)},
    )  # fmt: skip


def keys(url: str, version: str) -> list[str]:
    listed = s3_client(url).list_objects_v2(Bucket=BUCKET, Prefix=f"models/{version}/")
    return [o["Key"] for o in listed.get("Contents", [])]


def test_the_job_publishes_once_then_answers_already_published(s3_api, tiny_src, tmp_path):
    version = write_inputs(tiny_src, tmp_path / "inputs.json", min_agreement=0.5)
    first = job(s3_api, tiny_src, tmp_path / "inputs.json", tmp_path / "w1")
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"model-release: published s3://{BUCKET}/models/{version}/" in first.stdout
    published = keys(s3_api, version)
    assert f"models/{version}/manifest.json" in published
    manifest = json.loads(s3_client(s3_api).get_object(
        Bucket=BUCKET, Key=f"models/{version}/manifest.json")["Body"].read())  # fmt: skip
    assert manifest["version"] == version
    assert manifest["inputs"]["min_agreement"] == 0.5
    assert manifest["quality_gate"]["passed"] is True
    assert {"quality_report.json", "base/config.json"} <= set(manifest["files"])
    assert sorted(manifest["adapters"]) == sorted(ADAPTERS)

    again = job(s3_api, tiny_src, tmp_path / "inputs.json", tmp_path / "w2")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already published: nothing to do" in again.stdout
    assert "model-prep: fetch" not in again.stdout  # nothing prepared twice
    assert keys(s3_api, version) == published


def test_a_quality_gate_below_its_floor_publishes_nothing(s3_api, tiny_src, tmp_path) -> None:
    version = write_inputs(tiny_src, tmp_path / "inputs.json", min_agreement=0.999)
    done = job(s3_api, tiny_src, tmp_path / "inputs.json", tmp_path / "w")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == "model-prep FAILED: quality_gate.py exited 1"
    assert "quality gate FAILED: next-token agreement" in done.stderr
    assert keys(s3_api, version) == []


def test_an_adapter_of_another_rank_is_named_and_nothing_is_published(
    s3_api, tiny_src, tmp_path
) -> None:
    bad = [("too_wide", f"local://{tiny_src / 'bad_adapters' / 'too_wide'}", "v1", 32)]
    version = write_inputs(tiny_src, tmp_path / "inputs.json", min_agreement=0.5, adapters=bad)
    done = job(s3_api, tiny_src, tmp_path / "inputs.json", tmp_path / "w")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("model-prep FAILED: adapter too_wide") and "rank" in last, last
    assert keys(s3_api, version) == []


def test_no_credentials_are_named_before_any_preparation(s3_api, tiny_src, tmp_path) -> None:
    version = write_inputs(tiny_src, tmp_path / "inputs.json", min_agreement=0.55)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(PYTHONPATH=str(REPO), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_EC2_METADATA_DISABLED="true",
               AWS_DEFAULT_REGION="us-east-1")  # fmt: skip
    done = job(s3_api, tiny_src, tmp_path / "inputs.json", tmp_path / "w", env=env)
    assert done.returncode == 1
    assert "model-prep FAILED: NoCredentialsError" in done.stderr
    assert "model-prep: fetch" not in done.stdout
    assert keys(s3_api, version) == []


def test_inputs_whose_calibration_set_changed_are_refused(s3_api, tiny_src, tmp_path) -> None:
    """The version names the calibration set: a job given another must not publish under it."""
    write_inputs(tiny_src, tmp_path / "inputs.json", min_agreement=0.5)
    raw = json.loads((tmp_path / "inputs.json").read_text())
    raw["calibration_sha256"] = "0" * 64
    (tmp_path / "inputs.json").write_text(json.dumps(raw))
    version = ReleaseInputs.from_json(raw).version
    done = job(s3_api, tiny_src, tmp_path / "inputs.json", tmp_path / "w")
    assert done.returncode == 1
    assert "calibration set" in done.stderr and "differs from the one the version" in done.stderr
    assert keys(s3_api, version) == []
