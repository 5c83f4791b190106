"""ImageStack: both image paths (built by CDK or an existing tag) as the endpoint's models see
them; the repository itself: tests/infra/test_construct_props.py."""

from __future__ import annotations

from stacks.config import ImageConfig, VariantConfig, Variants
from stacks.constructs.image import image_build_args

from .conftest import synth_templates


def test_build_mode_builds_container_dir_with_the_model_build_args(prod_cfg) -> None:
    args = image_build_args(prod_cfg)
    assert args["BASE_MODEL"] == "hf://meta-llama/Meta-Llama-3-8B-Instruct"
    assert args["QUANTIZATION"] == "awq"
    assert args["ADAPTERS"].split(",")[0] == (
        "manga_domain=s3://mangaassist-model-artifacts/lora/manga_domain_v3"
    )
    assert args["MAX_LORA_RANK"] == "16"
    # the versions go into the image's manifest; clients keep addressing the stable names
    assert args["ADAPTER_VERSIONS"] == "manga_domain=v3,general_support=v2,jp_style=v1"


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
