"""The per-start bound of deploys and the canary controller's waits follows the measured start
(issue 46; sizing/ready_bound.py): relations on the frozen configs, a slower measured start
injected where the plan reads it (``sizing.scale_out_time.measured``), and the refusals of a
bound that no blue/green update could hold."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from simulator.assumptions import Assumptions
from sizing import scale_out_time
from sizing.engine_start import measured
from sizing.fit_checks import load_config
from sizing.plan import build_plan, render_plan
from sizing.plan_deploy import deploy_section
from sizing.ready_bound import MARGIN_SECONDS, ready_bound, ready_seconds, rollout_waits
from sizing.scale_out_time import ICE_SECONDS, render_scale_out, scale_out_section, time_to_serve
from tests.fixtures import CONFIG_DIR
from tests.infra.conftest import REPO_ROOT, parse
from tools import deploy as deploy_tool
from typed_config import VARIANT_NAMES, ConfigError, DeploymentConfig
from typed_config.deployment import MAX_EXECUTION_TIMEOUT_LIMIT_SECONDS
from typed_config.instance_start import ASSUMED_READY_SECONDS
from typed_config.operations import CAPACITY_WAIT_INSTANCE_STARTS

FIXTURES = sorted(CONFIG_DIR.glob("*.yaml"))
#: A config with a fallback pool on a type AWS published no figure for.
POOLS = REPO_ROOT / "config" / "examples" / "prod-pools.yaml"


def load(path: Path) -> DeploymentConfig:
    return load_config(path, env="prod" if path.stem.startswith("prod") else path.stem)


def slower_start(monkeypatch: pytest.MonkeyPatch, extra_seconds: float) -> None:
    """The committed measurement, every start ``extra_seconds`` slower (cold and warm)."""
    m = measured()
    slow = dataclasses.replace(
        m, cold_seconds=m.cold_seconds + extra_seconds, warm_seconds=m.warm_seconds + extra_seconds
    )
    monkeypatch.setattr(scale_out_time, "measured", lambda: slow)


@pytest.mark.parametrize("path", [*FIXTURES, POOLS], ids=lambda p: p.stem)
def test_the_bound_covers_every_variants_new_tag_start_plus_the_margin(path: Path) -> None:
    cfg = load(path)
    bound = ready_bound(cfg)
    for v in VARIANT_NAMES:
        for pool in cfg.variants[v].pools:
            t = time_to_serve(cfg, v, pool.instance_type)
            # the measured start at its pessimistic edge, cached or cold per the job's GPU
            start = measured().warm_seconds if t.planned_with_cache else measured().cold_seconds
            assert t.planned_uncached_seconds == pytest.approx(
                t.cached_seconds - 75 + start + measured().error_seconds + t.image_pull_seconds,
                abs=1,
            )
            passed_over = (pool.priority - 1) * ICE_SECONDS
            assert bound.seconds >= t.planned_uncached_seconds + passed_over + MARGIN_SECONDS
    assert bound.seconds >= ASSUMED_READY_SECONDS  # the assumed start stays the floor
    assert bound.seconds == max(bound.derived_seconds, ASSUMED_READY_SECONDS)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_every_consumer_reads_the_same_bound(path: Path) -> None:
    cfg = load(path)
    ready = ready_seconds(cfg)
    ro = cfg.rollout
    waits = rollout_waits(cfg)
    check = ro.check_interval_minutes
    assert waits.rollback_capacity_timeout_seconds == math.ceil(ready / 60 + check) * 60
    if ro.capacity_timeout_minutes is None:
        starts = CAPACITY_WAIT_INSTANCE_STARTS * ready / 60
        assert waits.capacity_timeout_seconds == math.ceil(starts + check) * 60
    assert Assumptions().new_tag_seconds(cfg) == ready
    assert deploy_section(cfg)["ready_bound_seconds"] == ready


def test_the_plan_no_longer_warns_that_a_new_tag_outlasts_the_bound() -> None:
    """The warning stays and can fire; the derived bound does not set it off."""
    for path in FIXTURES:
        cfg = load(path)
        text = render_plan(build_plan(cfg, {}))
        assert "WARNING: a new tag's instance serves" not in text
        assert "WARNING: with the measured engine start" not in text
        assert f"serve within {ready_seconds(cfg):g} s of launch" in text
    cfg = load(FIXTURES[0])
    t = time_to_serve(cfg, "primary")
    short = scale_out_section(cfg, "primary", deploy_bound_seconds=t.planned_uncached_seconds - 1)
    assert any(
        f"WARNING: a new tag's instance serves {t.planned_uncached_seconds:g} s after launch"
        in line
        for line in render_scale_out(short)
    )


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_a_slower_measured_start_raises_the_bound_the_deploy_estimate_and_the_waits(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = load(path)
    before = ready_bound(cfg)
    deploy_before = deploy_section(cfg)["minutes"]
    waits_before = rollout_waits(cfg)
    slower_start(monkeypatch, 300)
    after = ready_bound(cfg)
    assert after.derived_seconds == pytest.approx(before.derived_seconds + 300, abs=1)
    assert after.seconds > before.seconds and after.seconds >= after.derived_seconds
    assert deploy_section(cfg)["minutes"] > deploy_before
    waits = rollout_waits(cfg)
    assert waits.rollback_capacity_timeout_seconds > waits_before.rollback_capacity_timeout_seconds
    assert waits.updating_timeout_seconds > waits_before.updating_timeout_seconds
    if cfg.rollout.capacity_timeout_minutes is None:
        assert waits.capacity_timeout_seconds > waits_before.capacity_timeout_seconds


def test_the_deploy_tool_times_its_prescale_window_on_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = load(CONFIG_DIR / "prod.yaml")
    itype = cfg.variants.primary.instance_type
    live = deploy_tool.LiveEndpoint(
        "InService",
        "cfg-1",
        {
            "primary": deploy_tool.LiveVariant(itype, 4, 95.0, 8, 2),
            "canary": deploy_tool.LiveVariant(cfg.variants.canary.instance_type, 2, 5.0, 2, 2),
        },
    )
    seen: list[float] = []
    real = deploy_tool.update_phases

    def spy(target: DeploymentConfig, *, ready_seconds: float, fleet: int) -> Any:
        seen.append(ready_seconds)
        return real(target, ready_seconds=ready_seconds, fleet=fleet)

    monkeypatch.setattr(deploy_tool, "update_phases", spy)
    deploy_tool.plan_deploy(cfg, live, now=datetime(2026, 12, 1, 3, tzinfo=UTC))
    slower_start(monkeypatch, 300)
    deploy_tool.plan_deploy(cfg, live, now=datetime(2026, 12, 1, 3, tzinfo=UTC))
    assert seen[0] == pytest.approx(ready_bound(cfg).seconds - 300, abs=1)
    assert seen[1] == ready_bound(cfg).seconds


def test_an_update_that_outlasts_the_max_execution_timeout_is_refused_with_the_fix(
    mutate: Any,
) -> None:
    raw = mutate("deployment.max_execution_timeout_seconds", 1200)
    cfg = load(CONFIG_DIR / "prod.yaml")
    dep = cfg.deployment
    waits = dep.traffic_shift.wait_interval_seconds + dep.termination_wait_seconds
    assert waits <= 1200 < ready_seconds(cfg) + waits  # the config's own rule passes it
    with pytest.raises(ConfigError) as err:
        parse(raw)
    needed = math.ceil(ready_seconds(cfg) + waits)
    text = str(err.value)
    field = "deployment.max_execution_timeout_seconds"
    assert f"{field}: 1200 is shorter than a blue/green update" in text
    assert f"({needed} s in all)" in text
    assert f"set it to {needed} or more (SageMaker allows up to 28800)" in text


def test_a_bound_no_update_could_hold_names_awss_limit(
    mutate: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    slower_start(monkeypatch, MAX_EXECUTION_TIMEOUT_LIMIT_SECONDS)
    with pytest.raises(ConfigError) as err:
        parse(mutate("deployment.max_execution_timeout_seconds", 3600))
    text = str(err.value)
    assert "deployment.max_execution_timeout_seconds: 3600" in text
    assert "above SageMaker's limit (28800 s, BlueGreenUpdatePolicy)" in text
    assert "shorten deployment.traffic_shift.wait_interval_seconds" in text


def test_a_capacity_timeout_below_one_measured_start_is_refused(
    mutate: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The config's own rule holds the value to the assumed floor; the fit check to the derived
    bound (a start 300 s slower puts a gap between the two)."""
    slower_start(monkeypatch, 300)
    cfg = load(CONFIG_DIR / "prod.yaml")
    ro = cfg.rollout
    floor = ro.capacity_wait_minutes(1, ASSUMED_READY_SECONDS)
    least = ro.capacity_wait_minutes(1, ready_seconds(cfg))
    assert floor < least - 1
    with pytest.raises(ConfigError) as err:
        parse(mutate("rollout.capacity_timeout_minutes", least - 1))
    assert (
        f"rollout.capacity_timeout_minutes: {least - 1} is shorter than one instance start "
        f"({ready_seconds(cfg):g} s per start"
    ) in str(err.value)
    assert f"use {least} or more" in str(err.value)
    assert parse(mutate("rollout.capacity_timeout_minutes", least)).rollout.capacity_timeout_minutes


def test_the_refusal_names_the_file_and_the_line_of_the_field(tmp_path: Path) -> None:
    """Read from a file (as make synth reads config/<env>.yaml): the line of the field."""
    lines = (CONFIG_DIR / "prod.yaml").read_text().splitlines()
    [at] = [i for i, line in enumerate(lines) if "max_execution_timeout_seconds:" in line]
    lines[at] = "  max_execution_timeout_seconds: 1200"
    path = tmp_path / "prod.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env="prod")
    assert f"{path}: 1 invalid value(s)" in str(err.value)
    assert f"deployment.max_execution_timeout_seconds (line {at + 1}): 1200 is shorter" in str(
        err.value
    )
