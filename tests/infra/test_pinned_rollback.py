"""An instance-type change's first deploy keeps the live type (make deploy pins it): its rollback
ModelLatency threshold must be one that type's healthy fleet stays under, or synth refuses the
interim deploy and the migration cannot start (issue 36: prod moved to ml.g6e.xlarge)."""

from __future__ import annotations

import math
from pathlib import Path

from sizing.deploy_options import DeployOptions
from sizing.fit_checks import load_config
from sizing.speed_plan import (
    ROLLBACK_LATENCY_HEADROOM,
    rollback_latency_problems,
    slowest_pool_p99,
)
from tests.fixtures import config_fixture

REPO = Path(__file__).resolve().parents[2]
PROD = load_config(config_fixture("prod"), env="prod")


def _pinned(ctx: dict[str, str]):  # type: ignore[no-untyped-def]
    return DeployOptions.from_context(ctx.get).apply(PROD)


def test_a_deploy_pinned_to_the_slower_live_type_carries_a_threshold_that_type_passes() -> None:
    pinned = _pinned({"pin_instance_type": "primary=ml.g5.xlarge,canary=ml.g5.xlarge"})
    assert pinned.variants.primary.instance_type == "ml.g5.xlarge"
    # the threshold the pinned type's healthy fleet needs (its slowest pool at its target, with
    # the headroom), never below the config's: raised only when that type needs more
    healthy = max(slowest_pool_p99(pinned, v)[0] for v in ("primary", "canary"))
    need = math.ceil(healthy * ROLLBACK_LATENCY_HEADROOM / 1000) * 1000
    assert pinned.deployment.rollback_model_latency_p99_ms == max(
        need, PROD.deployment.rollback_model_latency_p99_ms
    )
    assert rollback_latency_problems(pinned) == []


def test_the_threshold_is_never_lowered_and_an_unpinned_deploy_keeps_the_configs() -> None:
    same = _pinned({"pin_instance_type": "primary=ml.g6e.xlarge"})
    assert (
        same.deployment.rollback_model_latency_p99_ms
        == PROD.deployment.rollback_model_latency_p99_ms
    )
    tagged = DeployOptions.from_context({"image_tag": "abc1234"}.get).apply(PROD)
    assert (
        tagged.deployment.rollback_model_latency_p99_ms
        == PROD.deployment.rollback_model_latency_p99_ms
    )
