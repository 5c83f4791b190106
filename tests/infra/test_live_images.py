"""Which image each variant gets from ``make deploy`` against what it runs (tools/live_images.py),
and the deploy refused while a COMPLETED rollout waits for its promotion (tools/deploy.py).

The defect these catch: after a CI release (``IMAGE_TAG=<sha>`` on the command line) the YAML
still says ``image.mode: build``, so the next config-only ``make deploy`` would have replaced
the release's image on every variant with one built from whatever commit is checked out."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from sizing.deploy_options import DeployOptions
from tools import deploy as deploy_tool
from tools.live_images import ImageRefused, repository_tag, resolve
from typed_config import ConfigError

from .conftest import load_env, parse, raw_config

REGISTRY = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
REPO = "mangaassist-vllm-prod"
ASSET = f"{REGISTRY}/cdk-hnb659fds-container-assets-123456789012-us-east-1:0a1b2c"


def tagged(tag: str) -> str:
    return f"{REGISTRY}/{REPO}:{tag}"


@pytest.fixture(scope="module")
def prod() -> Any:
    cfg = load_env("prod")
    assert cfg.image.mode == "build" and cfg.image.repository_name == REPO
    return cfg


def test_a_config_change_without_image_tag_is_refused_where_it_would_replace_a_release(
    prod: Any,
) -> None:
    live = {"primary": tagged("sha1"), "canary": tagged("sha1")}
    with pytest.raises(ImageRefused) as err:
        resolve(prod, DeployOptions(), live)
    message = str(err.value)
    assert f"primary runs {tagged('sha1')}" in message
    assert "IMAGE_TAG=live" in message and "nothing was changed" in message


def test_image_tag_live_keeps_what_each_variant_runs(prod: Any) -> None:
    live = {"primary": tagged("sha1"), "canary": tagged("sha2")}
    kept = resolve(prod, DeployOptions(image_tags={"": "live"}), live)
    assert kept.image_tags == {"primary": "sha1", "canary": "sha2"}
    cfg = kept.apply(prod)
    assert (cfg.variants.primary.image_tag, cfg.variants.canary.image_tag) == ("sha1", "sha2")
    # one variant's live tag, the other named
    mixed = resolve(prod, DeployOptions(image_tags={"primary": "live", "canary": "sha3"}), live)
    assert mixed.image_tags == {"primary": "sha1", "canary": "sha3"}


def test_live_for_a_variant_that_runs_no_tag_of_the_repository_is_refused(prod: Any) -> None:
    with pytest.raises(ImageRefused, match=r"canary runs .*container-assets.*not a tag of"):
        resolve(
            prod, DeployOptions(image_tags={"": "live"}), {"primary": tagged("a"), "canary": ASSET}
        )
    with pytest.raises(ImageRefused, match="nothing yet"):
        resolve(prod, DeployOptions(image_tags={"": "live"}), {})


def test_naming_one_variant_keeps_the_others_release_tag(prod: Any) -> None:
    live = {"primary": tagged("promoted"), "canary": tagged("promoted")}
    out = resolve(prod, DeployOptions(image_tags={"canary": "new"}), live)
    assert out.image_tags == {"primary": "promoted", "canary": "new"}


def test_a_first_release_that_names_the_canary_starts_both_variants_on_it(prod: Any) -> None:
    """No endpoint yet: nothing to keep, so CI's canary deploy (IMAGE_TAG=canary=<sha>) starts
    the primary on the same tag instead of a CDK build prod refuses."""
    out = resolve(prod, DeployOptions(image_tags={"canary": "sha1"}), {})
    assert out.image_tags == {"primary": "sha1", "canary": "sha1"}
    cfg = out.apply(prod)
    assert (cfg.variants.primary.image_tag, cfg.variants.canary.image_tag) == ("sha1", "sha1")


def test_one_tag_for_every_variant_stays_image_mode_tag(prod: Any) -> None:
    out = resolve(prod, DeployOptions(image_tags={"": "sha9"}), {"primary": ASSET, "canary": ASSET})
    assert out.image_tags == {"": "sha9"}
    assert out.apply(prod).image.mode == "tag"


def test_what_the_yaml_names_or_builds_over_a_cdk_image_deploys_as_written(prod: Any) -> None:
    raw = raw_config("prod")
    raw["image"]["deploy_builds"] = True
    builds = parse(raw)
    # CDK-built images live: a build-mode deploy rebuilds, as it always did
    assert resolve(builds, DeployOptions(), {"primary": ASSET, "canary": ASSET}).image_tags == {}
    # a first deploy: nothing live
    assert resolve(builds, DeployOptions(), {}).image_tags == {}
    # the YAML names the tag: a decision, deployed over a release's image
    raw = raw_config("prod")
    raw["image"] = {"mode": "tag", "tag": "yaml-tag", "repository_name": REPO}
    pinned = parse(raw)
    live = {"primary": tagged("sha1"), "canary": tagged("sha1")}
    assert resolve(pinned, DeployOptions(), live).image_tags == {}


def test_prod_ships_only_pushed_tags(prod: Any) -> None:
    """image.deploy_builds: false: CDK would publish a built image to its asset repository (no
    scan on push, no customer key); a deploy that leaves any variant on it is refused."""
    assert prod.image.deploy_builds is False
    for live in ({}, {"primary": ASSET, "canary": ASSET}):
        with pytest.raises(ImageRefused, match=r"image\.deploy_builds: false, and primary, canary"):
            resolve(prod, DeployOptions(), live)
    with pytest.raises(ImageRefused, match="and primary would get"):
        resolve(
            prod, DeployOptions(image_tags={"canary": "sha1"}), {"primary": ASSET, "canary": ASSET}
        )
    assert resolve(prod, DeployOptions(image_tags={"": "sha1"}), {}).image_tags == {"": "sha1"}


def test_live_is_resolved_by_make_deploy_only() -> None:
    """make synth and make diff read no endpoint: 'live' there is refused, not taken as a tag."""
    with pytest.raises(ConfigError, match="'live' means the tag each variant runs now"):
        DeployOptions(image_tags={"": "live"}).apply(load_env("prod"))


def test_repository_tag_reads_only_this_repositorys_tags() -> None:
    assert repository_tag(tagged("abc"), REPO) == "abc"
    assert repository_tag(ASSET, REPO) is None
    assert repository_tag(f"{REGISTRY}/{REPO}@sha256:{'0' * 64}", REPO) is None
    assert repository_tag(f"{REGISTRY}/other:abc", REPO) is None
    assert repository_tag(tagged("abc"), None) is None


class Controller:
    """The controller's status answer (Lambda Invoke's response format)."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record

    def invoke(self, **_: Any) -> dict[str, Any]:
        return {"StatusCode": 200, "Payload": io.BytesIO(json.dumps(self.record).encode())}


COMPLETED = {"rollout_id": "r-1", "status": "COMPLETED", "last_decision": "complete"}


def test_a_completed_rollout_refuses_another_image_for_the_canary(prod: Any) -> None:
    """COMPLETED, not promoted: the canary serves its last step (up to 100 %). A deploy that
    gives it another image would put an unbaked image on that traffic."""
    live = {"primary": tagged("old"), "canary": tagged("baked")}
    cfg = DeployOptions(image_tags={"primary": "old", "canary": "next"}).apply(prod)
    with pytest.raises(deploy_tool.DeployRefused) as err:
        deploy_tool.refuse_during_rollout(Controller(COMPLETED), cfg, live)
    message = str(err.value)
    assert "'r-1' COMPLETED and is not promoted yet" in message
    assert "make promote ENV=prod" in message and "make canary-rollback ENV=prod" in message


def test_the_promotion_and_config_changes_that_keep_the_canary_go_ahead(prod: Any) -> None:
    live = {"primary": tagged("old"), "canary": tagged("baked")}
    promotion = DeployOptions(image_tags={"": "baked"}, reset=("DesiredWeight",)).apply(prod)
    deploy_tool.refuse_during_rollout(Controller(COMPLETED), promotion, live)
    keep = resolve(prod, DeployOptions(image_tags={"": "live"}), live).apply(prod)
    deploy_tool.refuse_during_rollout(Controller(COMPLETED), keep, live)
    # after the promotion the record is ROLLED_BACK (promoted): any image goes
    promoted = {"rollout_id": "r-1", "status": "ROLLED_BACK", "rollback_reason": "promoted"}
    other = DeployOptions(image_tags={"canary": "next"}).apply(prod)
    deploy_tool.refuse_during_rollout(Controller(promoted), other, live)
