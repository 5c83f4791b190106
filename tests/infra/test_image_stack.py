"""ImageStack: both image paths (built by CDK or an existing tag) as the endpoint's models see
them; the repository itself: tests/infra/test_construct_props.py."""

from __future__ import annotations

import json
from pathlib import Path

from stacks.constructs.image import image_build_args
from typed_config import ImageConfig, VariantConfig, Variants, artifact_dir, release_inputs

from .conftest import synth_templates


def test_build_mode_bakes_the_model_release_the_config_derives(prod_cfg) -> None:
    """No model source reaches the build: only the release version (its inputs' digest) and
    the LoRA rank; the release itself is a named build context, fetched outside the build."""
    args = image_build_args(prod_cfg)
    assert args == {
        "MODEL_ARTIFACT_VERSION": release_inputs(prod_cfg).version,
        "MAX_LORA_RANK": "16",
    }
    pinned = prod_cfg.model.model_copy(update={"artifact": "m-0123456789abcdef"})
    assert (
        image_build_args(prod_cfg.model_copy(update={"model": pinned}))["MODEL_ARTIFACT_VERSION"]
        == "m-0123456789abcdef"
    )
    by_uri = prod_cfg.model.model_copy(update={"artifact": "s3://b-1/x/y/m-00000000000000ff"})
    assert (
        image_build_args(prod_cfg.model_copy(update={"model": by_uri}))["MODEL_ARTIFACT_VERSION"]
        == "m-00000000000000ff"
    )


def test_an_adapter_version_changes_the_release_and_so_the_image(prod_cfg) -> None:
    bumped = [a.model_copy(update={"version": "v4"}) if a.name == "manga_domain" else a
              for a in prod_cfg.adapters]  # fmt: skip
    other = prod_cfg.model_copy(update={"adapters": bumped})
    assert release_inputs(other).version != release_inputs(prod_cfg).version


def test_the_asset_takes_the_release_as_a_named_build_context(prod_cfg) -> None:
    import aws_cdk as cdk

    from stacks.app_builder import build_stacks

    app = cdk.App()
    build_stacks(app, prod_cfg)
    asm = app.synth()
    (manifest,) = Path(asm.directory).glob("*-image.assets.json")
    docker = json.loads(manifest.read_text())["dockerImages"]
    (source,) = [d["source"] for d in docker.values()]
    version = release_inputs(prod_cfg).version
    assert source["dockerBuildContexts"] == {"model-artifact": str(artifact_dir(version))}
    assert source["dockerBuildArgs"]["MODEL_ARTIFACT_VERSION"] == version
    assert "dockerBuildSecrets" not in source  # no token: the build downloads nothing


def test_build_mode_models_run_the_cdk_asset_image(prod_templates) -> None:
    models = prod_templates["endpoint"].find_resources("AWS::SageMaker::Model")
    for res in models.values():
        image_uri = str(res["Properties"]["PrimaryContainer"]["Image"])
        assert "cdk-hnb659fds-container-assets" in image_uri


def test_tag_mode_models_run_the_tag_ci_pushed_and_canary_can_differ(prod_cfg) -> None:
    variants = Variants(
        primary=prod_cfg.variants.primary,
        canary=VariantConfig(**{**prod_cfg.variants.canary.model_dump(), "image_tag": "v2-rc1"}),
    )
    cfg = prod_cfg.model_copy(
        update={"image": ImageConfig(mode="tag", tag="v1"), "variants": variants}
    )
    tpl = synth_templates(cfg)["endpoint"]
    images = {
        res["Properties"]["PrimaryContainer"]["Environment"]["VARIANT_NAME"]: str(
            res["Properties"]["PrimaryContainer"]["Image"]
        )
        for res in tpl.find_resources("AWS::SageMaker::Model").values()
    }
    assert ":v1" in images["primary"] and ":v2-rc1" not in images["primary"]
    assert ":v2-rc1" in images["canary"] and ":v1" not in images["canary"]
    assert "cdk-hnb659fds-container-assets" not in images["primary"]
