"""``make release-adapter``, rehearsed on the fake account (issue 45, items 2 and 6): one adapter
version published, gated, rolled out with evidence and promoted; and rolled back alone, each
fault injected where it happens (the version's answers, which the metric the rules read counts;
an alarm; the AWS call that raises). Every end state: which version the live component serves,
the base component as it was, no endpoint config, model or image touched.

The account is tests/infra/fake_account.py with its inference components
(tests/infra/fake_components.py), refusing what SageMaker refuses (tests/sagemaker_refusals.py);
S3 and STS are moto's. The config is prod in the component shape
(config/examples/prod-components.yaml) with manga_domain's version raised to the one released and
:data:`ROLLOUT` as its ``inference_components.rollout``.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import shlex
import subprocess
import tarfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError
from moto import mock_aws

import tools.adapter_release.__main__ as cli
from container.model_prep.manifest import sha256, write_manifest
from sizing.fit_checks import load_config
from tools.adapter_release.publish import AdapterRefused, build_archive, prepared_adapter
from typed_config import artifact_bucket_name, config_path
from typed_config.generated_names import (
    ADAPTER_ARCHIVE,
    adapter_artifact_key,
    adapter_component_name,
    base_component_name,
)

from .fake_account import REGISTRY, Account

REPO = Path(__file__).resolve().parents[2]
#: prod in the component shape: the config an adapter release runs on.
COMPONENTS_CONFIG = REPO / "config/examples/prod-components.yaml"
T0 = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
ADAPTER, OLD, NEW = "manga_domain", "v3", "v4"
RELEASE = "m-0123456789abcdef"
MOTO_ACCOUNT = "123456789012"
#: The fixture's ``inference_components.rollout`` (typed_config/adapter_rollout.py).
ALARM = "mangaassist-prod-lora-manga-domain-5xx"
ROLLOUT = {
    "bake_minutes": 10,
    "evidence_timeout_minutes": 5,
    "watch_minutes": 10,
    "min_invocations": 20,
    "alarm_names": [ALARM],
}
#: Calls that would touch the base, the endpoint's config, its Models or the image.
FORBIDDEN = (
    "sagemaker.UpdateEndpoint",
    "sagemaker.CreateEndpointConfig",
    "cdk deploy",
    "docker",
    "sagemaker.UpdateEndpointWeightsAndCapacities",
    "cloudformation",
)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    raw = yaml.safe_load(COMPONENTS_CONFIG.read_text())
    (entry,) = [a for a in raw["adapters"] if a["name"] == ADAPTER]
    entry["version"] = NEW
    raw["inference_components"]["rollout"] = ROLLOUT
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "prod.yaml").write_text(yaml.safe_dump(raw))
    with mock_aws():
        cfg = load_config(config_path(tmp_path, "prod"), env="prod")
        image = f"{REGISTRY}/{cfg.image.repository_name}:a1b2c3"
        account = Account(tmp_path, "prod", images={"primary": image, "canary": image}, now=T0)
        bucket = artifact_bucket_name(cfg, MOTO_ACCOUNT)
        boto3.client("s3", region_name=cfg.region).create_bucket(Bucket=bucket)
        base = base_component_name(cfg.project, cfg.env)
        live = adapter_component_name(cfg.project, cfg.env, ADAPTER)
        account.seed_component(base, model="mangaassist-prod-base-model")
        account.seed_component(live, artifact=url(bucket, OLD), base=base)
        account.alarms_at[ALARM] = None
        account.calls.clear()
        yield account, cfg, bucket, base, live, prepared(tmp_path / "release")


def url(bucket: str, version: str) -> str:
    """An adapter component's ArtifactUrl for ``version`` (the shared contract)."""
    return f"s3://{bucket}/{adapter_artifact_key(ADAPTER, version)}"


def prepared(root: Path, *, agreement: float = 0.95, weights: str = "weights of v4") -> Path:
    """A prepared release (as container/model_prep/prepare.py writes one) holding manga_domain
    at the new version and general_support, with the gate's figures for each."""
    for rel, text in {
        "base/config.json": "{}",
        f"lora/{ADAPTER}/adapter_config.json": json.dumps({"r": 16}),
        f"lora/{ADAPTER}/adapter_model.safetensors": weights,
        "lora/general_support/adapter_config.json": json.dumps({"r": 16}),
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    figures = {
        "next_token_agreement": 0.97,
        "perplexity_reference": 3.0,
        "perplexity_candidate": 3.1,
    }
    write_manifest(
        root,
        version=RELEASE,
        quantization="awq-w4a16-asym-g128 (compressed-tensors pack-quantized)",
        quality_gate={
            **figures,
            "min_agreement": 0.9,
            "passed": agreement >= 0.9,
            "adapters": {
                ADAPTER: {**figures, "next_token_agreement": agreement},
                "general_support": figures,
            },
        },
        adapters={ADAPTER: {"version": NEW, "rank": 16}, "general_support": {"version": "v2"}},
    )
    return root


def release(world: Any, *extra: str) -> tuple[int, list[str]]:
    account, _, _, _, _, root = world
    argv = ["--env", "prod", "--adapter", ADAPTER, "--version", NEW, *extra]
    rc = cli.main(argv, clients=account.clients(), release_root=root, root=account.root)
    return rc, list(account.calls)


def served(world: Any) -> dict[str, Any]:
    account = world[0]
    return {name: (c["artifact"], c["status"]) for name, c in account.components.items()}


def untouched(world: Any, calls: list[str]) -> None:
    """No call changed the base component, the endpoint's config, its Models or the image."""
    account, _, _, base, _, _ = world
    assert not [c for c in calls if c.startswith(FORBIDDEN)], calls
    assert not [c for c in calls if c.endswith(f" {base}") and "Invoke" not in c], calls
    assert account.components[base]["spec"]["ModelName"] == "mangaassist-prod-base-model"
    assert account.components[base]["status"] == "InService"


def test_one_adapter_version_is_published_gated_and_promoted_end_to_end(world: Any) -> None:
    account, cfg, bucket, base, live, _ = world
    before = copy.deepcopy(account.components[base])
    rc, calls = release(world)
    assert rc == 0
    new_url = url(bucket, NEW)
    assert served(world) == {base: (None, "InService"), live: (new_url, "InService")}
    assert account.components[base] == before
    untouched(world, calls)
    # the order: candidate created, probes to both, evidence read, the swap, candidate deleted
    changes = [
        c
        for c in calls
        if c.split()[0].endswith(("Create", "Update", "Delete")) or "InferenceComponent " in c
    ]
    assert [c.split()[0] for c in changes] == [
        "sagemaker.CreateInferenceComponent",
        "sagemaker.UpdateInferenceComponent",
        "sagemaker.DeleteInferenceComponent",
    ]
    assert changes[0].endswith(f"{live}-next") and changes[1].endswith(live)
    first_metric = calls.index("cloudwatch.GetMetricData")
    probes = [i for i, c in enumerate(calls) if c.startswith("sagemaker-runtime.InvokeEndpoint")]
    assert len(probes) == 2 * ROLLOUT["min_invocations"] and max(probes) < first_metric
    assert calls.index(changes[1]) > first_metric
    # published on its own as one archive (the ArtifactUrl) with a manifest of its digests
    s3 = boto3.client("s3", region_name=cfg.region)
    prefix = f"adapters/{ADAPTER}/{NEW}/"
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert listed == {prefix + ADAPTER_ARCHIVE, prefix + "manifest.json"}
    manifest = json.loads(s3.get_object(Bucket=bucket, Key=prefix + "manifest.json")["Body"].read())
    body = s3.get_object(Bucket=bucket, Key=prefix + ADAPTER_ARCHIVE)["Body"].read()
    assert manifest["release"] == RELEASE
    assert manifest["archive"]["sha256"] == hashlib.sha256(body).hexdigest()
    assert manifest["archive"]["bytes"] == len(body)
    unpacked = members(body)  # the PEFT files at the archive's root, as the release holds them
    assert (
        set(unpacked)
        == set(manifest["files"])
        == {
            "adapter_config.json",
            "adapter_model.safetensors",
        }
    )
    assert {n: hashlib.sha256(b).hexdigest() for n, b in unpacked.items()} == manifest["files"]
    # a second run finds it live and changes nothing
    account.calls.clear()
    rc, again = release(world)
    assert rc == 0 and not [c for c in again if "Create" in c or "Update" in c or "Put" in c]


def test_a_version_answering_5xx_is_rolled_back_by_the_metric_the_rules_read(
    world: Any, capsys: Any
) -> None:
    account, _, bucket, base, live, _ = world
    old_url = url(bucket, OLD)
    account.bad_artifacts.add(url(bucket, NEW))
    rc, calls = release(world)
    assert rc == 1
    assert "evidence: canary 5XX rate 100.00% exceeds" in capsys.readouterr().err
    assert served(world) == {base: (None, "InService"), live: (old_url, "InService")}
    assert not [c for c in calls if c.startswith("sagemaker.UpdateInferenceComponent")]
    assert calls[-1].startswith("sagemaker.DescribeInferenceComponent")  # waited until it was gone
    untouched(world, calls)


def test_an_alarm_after_the_swap_puts_the_previous_version_back(world: Any) -> None:
    account, _, bucket, base, live, _ = world
    old_url = url(bucket, OLD)
    # the alarm goes off after the bake and the evidence: during the watch of the live component
    account.alarms_at[ALARM] = account.now + (ROLLOUT["bake_minutes"] + 6) * 60
    rc, calls = release(world)
    assert rc == 1
    updates = [c for c in calls if c.startswith("sagemaker.UpdateInferenceComponent")]
    assert updates == [f"sagemaker.UpdateInferenceComponent {live}"] * 2
    assert served(world) == {base: (None, "InService"), live: (old_url, "InService")}
    untouched(world, calls)


def test_a_swap_the_aws_call_refuses_leaves_the_live_version_and_drops_the_candidate(
    world: Any,
) -> None:
    account, _, bucket, base, live, _ = world
    account.fail(f"sagemaker.UpdateInferenceComponent {live}", ("ThrottlingException", 400))
    rc, calls = release(world)
    assert rc == 1
    assert f"sagemaker.UpdateInferenceComponent {live} (failed: ThrottlingException)" in calls
    assert served(world) == {
        base: (None, "InService"),
        live: (url(bucket, OLD), "InService"),
    }
    untouched(world, calls)


def test_an_adapter_below_the_quality_floor_is_neither_published_nor_rolled_out(
    world: Any, capsys: Any
) -> None:
    account, cfg, bucket, _, _, root = world
    failing = prepared(root.parent / "failing", agreement=0.8)
    rc = cli.main(
        ["--env", "prod", "--adapter", ADAPTER, "--version", NEW],
        clients=account.clients(),
        release_root=failing,
        root=account.root,
    )
    assert rc == 1
    assert f"adapter {ADAPTER}: next-token agreement 0.8000 < 0.9" in capsys.readouterr().err
    assert "Contents" not in boto3.client("s3", region_name=cfg.region).list_objects_v2(
        Bucket=bucket
    )
    assert account.calls == []


def test_a_variant_shape_endpoint_is_refused_before_any_change(world: Any, capsys: Any) -> None:
    account, _, _, base, live, _ = world
    del account.components[live], account.components[base]
    rc, calls = release(world)
    assert rc == 1 and "runs the variant shape" in capsys.readouterr().err
    assert calls == ["sagemaker.DescribeInferenceComponent"]


def test_a_dry_run_reads_and_writes_nothing(world: Any) -> None:
    _, cfg, bucket, _, _, _ = world
    rc, calls = release(world, "--dry-run")
    assert rc == 0
    assert all(c.startswith("sagemaker.DescribeInferenceComponent") for c in calls), calls
    assert "Contents" not in boto3.client("s3", region_name=cfg.region).list_objects_v2(
        Bucket=bucket
    )


def members(archive: bytes) -> dict[str, bytes]:
    """``{name: content}`` of a published adapter archive; every member a plain file with no
    date, owner or directory of its own (what makes the archive reproducible)."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        infos = tar.getmembers()
        assert [i.name for i in infos] == sorted(i.name for i in infos)
        assert all(
            i.isfile()
            and (i.mtime, i.uid, i.gid, i.uname, i.gname, i.mode) == (0, 0, 0, "", "", 0o644)
            and "/" not in i.name
            for i in infos
        ), [(i.name, i.mtime, i.uid, i.mode) for i in infos]
        return {i.name: tar.extractfile(i).read() for i in infos}  # type: ignore[union-attr]


def test_the_same_files_make_the_same_archive_whatever_their_dates(tmp_path: Path) -> None:
    adapter = prepared_adapter(prepared(tmp_path / "release"), ADAPTER, NEW)
    first = build_archive(adapter, tmp_path / "first.tar.gz")
    for f in adapter.root.iterdir():
        os.utime(f, (1_900_000_000, 1_900_000_000))  # touched: another date on disk
    assert build_archive(adapter, tmp_path / "again.tar.gz") == first
    assert (tmp_path / "first.tar.gz").read_bytes() == (tmp_path / "again.tar.gz").read_bytes()
    assert set(members((tmp_path / "first.tar.gz").read_bytes())) == set(adapter.files)
    other = prepared_adapter(prepared(tmp_path / "other", weights="weights of v5"), ADAPTER, NEW)
    assert build_archive(other, tmp_path / "other.tar.gz") != first


def test_a_file_changed_since_the_release_was_verified_is_not_archived(tmp_path: Path) -> None:
    adapter = prepared_adapter(prepared(tmp_path / "release"), ADAPTER, NEW)
    (adapter.root / "adapter_model.safetensors").write_text("tampered")
    with pytest.raises(AdapterRefused, match=r"adapter_model\.safetensors: sha256 differs"):
        build_archive(adapter, tmp_path / "a.tar.gz")


def _objects(cfg: Any, bucket: str) -> dict[str, bytes]:
    s3 = boto3.client("s3", region_name=cfg.region)
    return {
        o["Key"]: s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
        for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    }


def test_a_version_published_with_other_files_is_refused_and_left_as_it_was(
    world: Any, capsys: Any
) -> None:
    account, cfg, bucket, _, _, root = world
    assert release(world)[0] == 0
    published = _objects(cfg, bucket)
    account.calls.clear()
    rc = cli.main(
        ["--env", "prod", "--adapter", ADAPTER, "--version", NEW],
        clients=account.clients(),
        release_root=prepared(root.parent / "retrained", weights="other weights, same version"),
        root=account.root,
    )
    assert rc == 1
    assert f"{url(bucket, NEW)} is published with other files" in capsys.readouterr().err
    assert _objects(cfg, bucket) == published
    assert not [c for c in account.calls if c.startswith("sagemaker.")]


def test_an_archive_a_stopped_run_left_is_taken_only_if_it_is_this_one(
    world: Any, tmp_path: Path, capsys: Any
) -> None:
    _, cfg, bucket, _, live, root = world
    s3 = boto3.client("s3", region_name=cfg.region)
    key = adapter_artifact_key(ADAPTER, NEW)
    # another content under the key and no manifest: never overwritten
    other = prepared_adapter(prepared(tmp_path / "other", weights="other"), ADAPTER, NEW)
    build_archive(other, tmp_path / "other.tar.gz")
    s3.put_object(Bucket=bucket, Key=key, Body=(tmp_path / "other.tar.gz").read_bytes())
    assert release(world)[0] == 1
    assert "exists with no manifest.json and other content" in capsys.readouterr().err
    assert set(_objects(cfg, bucket)) == {key}
    # this very archive (a run stopped before its manifest): kept, the manifest written
    build_archive(prepared_adapter(root, ADAPTER, NEW), tmp_path / "this.tar.gz")
    s3.put_object(Bucket=bucket, Key=key, Body=(tmp_path / "this.tar.gz").read_bytes())
    assert release(world)[0] == 0
    manifest = json.loads(_objects(cfg, bucket)[f"adapters/{ADAPTER}/{NEW}/manifest.json"])
    assert manifest["archive"]["sha256"] == sha256(tmp_path / "this.tar.gz")
    assert served(world)[live] == (url(bucket, NEW), "InService")


def test_a_version_other_than_the_configs_is_refused_naming_the_field(
    world: Any, capsys: Any
) -> None:
    account, _, _, _, _, root = world
    rc = cli.main(
        ["--env", "prod", "--adapter", ADAPTER, "--version", "v5"],
        clients=account.clients(),
        release_root=root,
        root=account.root,
    )
    assert rc == 2
    assert f"adapters.{ADAPTER}.version is '{NEW}', not 'v5'" in capsys.readouterr().err


# ---------------------------------------------------------------- the account refuses as SageMaker


def test_the_account_refuses_what_sagemaker_refuses_for_components(world: Any) -> None:
    account, cfg, _, base, live, _ = world
    sm = account.clients()["sagemaker"]

    def refused(call: Any, **params: Any) -> str:
        with pytest.raises(ClientError) as caught:
            call(**params)
        assert caught.value.response["Error"]["Code"] == "ValidationException"
        return str(caught.value)

    adapter = {"Container": {"ArtifactUrl": f"s3://b/{adapter_artifact_key('x', 'v1')}"}}
    # the service model's constraints (pattern and length of a name, the range of a bake)
    assert "regular expression pattern" in refused(
        sm.create_inference_component,
        InferenceComponentName="lora_x",
        EndpointName=cfg.endpoint_name,
        Specification={**adapter, "BaseInferenceComponentName": base},
    )
    assert "length less than or equal to 63" in refused(
        sm.delete_inference_component, InferenceComponentName="x" * 64
    )
    assert "less than or equal to 3600" in refused(
        sm.update_inference_component,
        InferenceComponentName=live,
        DeploymentConfig={
            "RollingUpdatePolicy": {
                "MaximumBatchSize": {"Type": "COPY_COUNT", "Value": 1},
                "WaitIntervalInSeconds": 4000,
            }
        },
    )
    # an adapter needs its base, and no compute of its own
    assert "Could not find base inference component" in refused(
        sm.create_inference_component,
        InferenceComponentName="lora-x",
        EndpointName=cfg.endpoint_name,
        Specification={**adapter, "BaseInferenceComponentName": "nope"},
    )
    assert "omit ComputeResourceRequirements" in refused(
        sm.create_inference_component,
        InferenceComponentName="lora-x",
        EndpointName=cfg.endpoint_name,
        Specification={
            **adapter,
            "BaseInferenceComponentName": base,
            "ComputeResourceRequirements": {"MinMemoryRequiredInMb": 1024},
        },
    )
    # a name exists once; a component changes only when settled
    assert "already existing" in refused(
        sm.create_inference_component,
        InferenceComponentName=live,
        EndpointName=cfg.endpoint_name,
        Specification={**adapter, "BaseInferenceComponentName": base},
    )
    sm.update_inference_component(
        InferenceComponentName=live, Specification={**adapter, "BaseInferenceComponentName": base}
    )
    assert "is Updating: it cannot be updated" in refused(
        sm.update_inference_component,
        InferenceComponentName=live,
        Specification={**adapter, "BaseInferenceComponentName": base},
    )
    sm.create_inference_component(
        InferenceComponentName="lora-y",
        EndpointName=cfg.endpoint_name,
        Specification={**adapter, "BaseInferenceComponentName": base},
    )
    assert "is Creating: it cannot be deleted" in refused(
        sm.delete_inference_component, InferenceComponentName="lora-y"
    )
    account.sleep(600)
    sm.delete_inference_component(InferenceComponentName="lora-y")  # settled: taken


def test_an_adapter_component_on_a_prefix_not_an_archive_fails_to_load(world: Any) -> None:
    """The URL before issue 45's archive (a prefix of loose files) fails the component."""
    account, cfg, _, base, _, _ = world
    sm = account.clients()["sagemaker"]
    for name, where in (
        ("lora-x", "s3://b/adapters/x/v1/"),
        ("lora-y", f"s3://b/{adapter_artifact_key('y', 'v1')}"),
    ):
        sm.create_inference_component(
            InferenceComponentName=name,
            EndpointName=cfg.endpoint_name,
            Specification={"BaseInferenceComponentName": base, "Container": {"ArtifactUrl": where}},
        )
    account.sleep(600)
    status = {
        n: sm.describe_inference_component(InferenceComponentName=n)["InferenceComponentStatus"]
        for n in ("lora-x", "lora-y")
    }
    assert status == {"lora-x": "Failed", "lora-y": "InService"}


def test_make_release_adapter_runs_the_tool_with_its_arguments() -> None:
    done = subprocess.run(
        [
            "make",
            "-n",
            "--no-print-directory",
            "release-adapter",
            "ENV=prod",
            f"ADAPTER={ADAPTER}",
            f"VERSION={NEW}",
            "DRY_RUN=1",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [shlex.split(line) for line in done.stdout.replace("\\\n", " ").splitlines()]
    (argv,) = [a for a in lines if a[1:3] == ["-m", "tools.adapter_release"]]
    assert argv[3:] == ["--env", "prod", "--adapter", ADAPTER, "--version", NEW, "--dry-run"]
