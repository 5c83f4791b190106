"""A release's inputs on the command line (IMAGE_TAG=, ARTIFACT=): parsed like CDK context,
validated like the YAML, carried by every step of a deploy, printed in the plan; a tag that is
not in ECR is refused before anything changes."""

from __future__ import annotations

import re
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from sizing.deploy_options import DeployOptions
from tests.fixtures import config_fixture
from tools import deploy as tool
from tools import synth
from typed_config import ConfigError


def ctx(**values: str) -> DeployOptions:
    return DeployOptions.from_context(values.get)


def test_one_tag_for_every_variant_or_one_per_variant(prod_cfg) -> None:
    every = ctx(image_tag="sha-1").apply(prod_cfg)
    assert (every.image.mode, every.image.tag) == ("tag", "sha-1")
    assert every.image.repository_name == prod_cfg.image.repository_name
    canary = ctx(image_tag="canary=sha-2").apply(prod_cfg)
    assert canary.variants.canary.image_tag == "sha-2"
    assert canary.variants.primary.image_tag is None and canary.image.mode == "build"
    both = ctx(image_tag="primary=sha-1,canary=sha-2")
    assert both.as_context() == {"image_tag": "canary=sha-2,primary=sha-1"}
    assert ctx(**both.as_context()) == both


def test_the_model_artifact_pins_the_release_the_build_bakes(prod_cfg) -> None:
    from typed_config import artifact_version

    pinned = ctx(model_artifact="m-0123456789abcdef").apply(prod_cfg)
    assert pinned.model.artifact == "m-0123456789abcdef"
    assert artifact_version(pinned) == "m-0123456789abcdef"


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"image_tag": "bad tag!"}, "image.tag"),
        ({"image_tag": "canary=x y"}, "variants.canary.image_tag"),
        ({"model_artifact": "latest"}, "model.artifact"),
    ],
)
def test_bad_release_inputs_name_the_field(prod_cfg, given, named) -> None:
    with pytest.raises(ConfigError) as err:
        DeployOptions.from_context(given.get).apply(prod_cfg)
    # the config's file, the field and its line, the options that made it wrong
    message = str(err.value)
    assert message.startswith(f"deploy options {given} break the config:\n")
    assert "prod.yaml: 1 invalid value(s)" in message  # the file it was loaded from
    assert re.search(
        rf"^  {re.escape(named)}( \(line \d+\))?: '.*' is not an? .* \(with the "
        r"deploy options\)$",
        message,
        re.M,
    ), message


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("edge=sha-1", "unknown variant"),
        ("sha-1,canary=sha-2", "not both"),
        ("canary=a,canary=b", "given twice"),
    ],
)
def test_malformed_image_tag_context_is_refused(value: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        ctx(image_tag=value)


def test_every_deploy_step_carries_the_release_inputs(prod_cfg, tmp_path: Path) -> None:
    release = ctx(image_tag="canary=sha-2", model_artifact="m-0123456789abcdef")
    step = DeployOptions(suspend_scaling=frozenset({"primary"}))
    cmd = tool.cdk_deploy_command(prod_cfg, step.merged(release), tmp_path)
    contexts = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "-c"]
    assert "suspend_scaling=primary" in contexts
    assert "image_tag=canary=sha-2" in contexts
    assert "model_artifact=m-0123456789abcdef" in contexts


def test_synth_prints_the_release_inputs_in_the_plan(tmp_path: Path, capsys) -> None:
    release = ["--image-tag", "canary=sha-2", "--artifact", "m-0123456789abcdef"]
    frozen = str(config_fixture("prod"))
    rc = synth.main(["--env", "prod", "--config", frozen, "--out", str(tmp_path / "out"), *release])
    out = capsys.readouterr().out
    assert rc == 0
    assert "image: sha-2" in out  # the canary's line
    assert "model release: the release baked in image sha-2" in out
    assert "model release: m-0123456789abcdef: not fetched here" in out  # the primary's


def test_synth_takes_a_config_path(tmp_path: Path, capsys) -> None:
    """``make synth CONFIG=path``: a file outside config/ (an example, a draft), validated the
    same way; its errors name that file."""
    draft = tmp_path / "draft.yaml"
    text = (config_fixture("prod")).read_text()
    draft.write_text(text.replace("\nendpoint_name: ", "\nendpoint_name: draft-", 1))
    rc = synth.main(["--env", "prod", "--config", str(draft), "--out", str(tmp_path / "out")])
    assert rc == 0
    assert "draft-" in (tmp_path / "out" / "plan.json").read_text()
    broken = tmp_path / "broken.yaml"
    broken.write_text(text.replace("\nscaling:\n", "\nscalign:\n", 1))
    rc = synth.main(["--env", "prod", "--config", str(broken), "--out", str(tmp_path / "out2")])
    err = capsys.readouterr().err
    assert rc == 1
    assert f"{broken}: 1 invalid value(s)" in err and "did you mean 'scaling'?" in err


def ecr_stub(failures: list[str]) -> tuple[object, Stubber]:
    ecr = boto3.client("ecr", region_name="us-east-1", aws_access_key_id="t",
                       aws_secret_access_key="t")  # fmt: skip
    stub = Stubber(ecr)
    stub.add_response(
        "batch_get_image",
        {"images": [], "failures": [
            {"imageId": {"imageTag": t}, "failureCode": "ImageNotFound",
             "failureReason": "Requested image not found"} for t in failures]},
    )  # fmt: skip
    return ecr, stub


def test_a_tag_missing_from_ecr_is_refused_naming_it(prod_cfg) -> None:
    cfg = ctx(image_tag="sha-1").apply(prod_cfg)
    ecr, stub = ecr_stub(["sha-1"])
    with stub, pytest.raises(tool.DeployRefused, match=r"\['sha-1'\] not in ECR repository "
                             r"mangaassist-vllm-prod: build and push first"):  # fmt: skip
        tool.refuse_missing_image_tags(ecr, cfg)
    stub.assert_no_pending_responses()


def test_present_tags_pass_and_a_build_mode_deploy_asks_nothing(prod_cfg) -> None:
    cfg = ctx(image_tag="primary=sha-1,canary=sha-2").apply(prod_cfg)
    ecr, stub = ecr_stub([])
    with stub:
        tool.refuse_missing_image_tags(ecr, cfg)
    stub.assert_no_pending_responses()
    idle = Stubber(ecr)  # build mode, no variant tag: no ECR call at all
    with idle:
        tool.refuse_missing_image_tags(ecr, prod_cfg)
