"""The gate's week (issue 42): each traffic scenario on every day whose bounds differ, the
unannounced spike at each such day's weakest hour; shares never above 100 %; the routing spill
threshold from the scaling target."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from simulator.assumptions import Assumptions
from simulator.fleet.scenarios import run_scenario, spike_hour
from simulator.run import minute_rejected_share, simulate, window_rejected_pct
from simulator.slo_gate import evaluate
from simulator.traces import spike_3x
from simulator.validation import old_policy_config
from simulator.week import day_groups
from sizing.fit_checks import parse_config
from sizing.scaling_target import concurrency_target, least_spill_threshold, spill_threshold
from typed_config import DeploymentConfig
from typed_config.base import ConfigError

DEV = Path(__file__).resolve().parents[2] / "config" / "dev.yaml"
FAST = Assumptions(decode_tokens_per_second=45.0, prefill_tokens_per_second=10_000.0)


def fixture(friday_evening: int = 2, **over: Any) -> DeploymentConfig:
    """An all-day floor of 4, raised to 8 every evening but Friday, whose evening schedule
    writes ``friday_evening``."""
    data: dict[str, Any] = yaml.safe_load(DEV.read_text())
    tz = "Asia/Tokyo"
    data["scaling"] = {
        "variants": {
            "primary": {"min_capacity": 2, "max_capacity": 30, "target_tracking": {"slos": []}},
            "canary": {"min_capacity": 1, "max_capacity": 1, "target_tracking": {"slos": []}},
        },
        "schedules": [
            {"name": "day", "cron": "0 0 * * *", "timezone": tz, "min_capacity": 4,
             "max_capacity": 30},
            {"name": "evening", "cron": "0 17 * * SUN-THU,SAT", "timezone": tz, "min_capacity": 8,
             "max_capacity": 30},
            {"name": "friday-evening", "cron": "0 17 * * FRI", "timezone": tz,
             "min_capacity": friday_evening, "max_capacity": 30},
            {"name": "evening-end", "cron": "0 23 * * *", "timezone": tz, "min_capacity": 4,
             "max_capacity": 30},
        ],
        "release_calendar": [],
    }  # fmt: skip
    data["variants"]["primary"].update(initial_weight=100, initial_instance_count=2)
    data["variants"]["canary"].update(initial_weight=0)
    data["fleet"] = {"scenarios": ["normal-day", "unannounced-3x"], "traffic_share": 0.3, **over}
    return parse_config(data, env="dev", source=DEV, base_dir=DEV.parent)


def test_days_whose_bounds_differ_are_replayed_apart() -> None:
    groups = day_groups(fixture())
    assert [g.days for g in groups] == [("Mon", "Tue", "Wed", "Thu", "Sat", "Sun"), ("Fri",)]
    assert sum(g.share_of_week for g in groups) == pytest.approx(1.0)
    # with Friday's evening as the others', one replay stands for the week
    same = day_groups(fixture(friday_evening=8))
    assert [g.days for g in same] == [("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")]


def test_the_spike_goes_to_fridays_evening_when_fridays_floor_is_lower() -> None:
    cfg = fixture()
    groups = {g.days[0]: g for g in day_groups(cfg)}
    # Friday's evening floor (2) is the week's lowest: the spike lands at the hour nearest 20:00
    assert spike_hour(cfg, groups["Fri"], FAST) == 20
    # the other days never go below 4: their weakest hours are outside the evening's 8
    assert spike_hour(cfg, groups["Mon"], FAST) not in range(17, 23)
    runs = run_scenario(cfg, "unannounced-3x", FAST)
    labels = [r.label for r in runs]
    assert "Fri: weakest hour 20:00 JST" in labels
    friday = next(r for r in runs if r.label.startswith("Fri"))
    assert friday.when(120).startswith("Fri 20:00 JST")
    # a miss there names the day and hour: too few instances for the spike on Friday evening
    tight = fixture(unannounced_spikes="held")
    data = tight.model_dump(mode="python")
    data["scaling"]["variants"]["primary"]["max_capacity"] = 3
    for s in data["scaling"]["schedules"]:
        s["max_capacity"] = 3
        s["min_capacity"] = min(s["min_capacity"], 3)
    data["fleet"]["traffic_share"] = 1.0
    tight_cfg = parse_config(data, env="dev", source=DEV, base_dir=DEV.parent)
    report = evaluate(tight_cfg, FAST, ["unannounced-3x"])
    fri = [m for m in report.misses if m.run.startswith("Fri")]
    at = spike_hour(tight_cfg, {g.days[0]: g for g in day_groups(tight_cfg)}["Fri"], FAST)
    assert fri and "Fri" in fri[0].line() and f"weakest hour {at:02d}:00 JST" in fri[0].line()


def test_the_normal_day_is_priced_over_the_week() -> None:
    cfg = fixture()
    report = evaluate(cfg, FAST, ["normal-day"])
    (day,) = report.verdicts
    others = "Mon, Tue, Wed, Thu, Sat, Sun"
    assert set(day.cost_usd) == {others, "Fri"}
    assert day.share_of_week == {others: 6 / 7, "Fri": 1 / 7}
    assert day.cost_usd["Fri"] < day.cost_usd[others]  # a lower evening floor
    week = sum(day.cost_usd[k] * day.share_of_week[k] for k in day.cost_usd)
    assert report.monthly_usd == pytest.approx(week * 730 / 24)
    assert min(day.cost_usd.values()) * 730 / 24 < report.monthly_usd


def test_a_minutes_rejected_share_is_never_above_100_percent() -> None:
    """The One Piece validation's old policy: a full queue whose instances leave drops queued
    requests, so a minute rejects more than it received (113.76 % read as arrivals alone)."""
    old = old_policy_config(fixture())
    res = simulate(old, spike_3x(), Assumptions(provision_seconds=480))
    run = res.runs["primary"]
    minutes, per = res.trace.minutes, 60 // run.tick_seconds
    rej = res.per_minute("rejected")
    arr = res.per_minute("arrivals")
    assert np.any(rej > arr), "the case the share fixes: more rejected than arrived in a minute"
    share = minute_rejected_share(res.runs, minutes, per)
    assert np.all((share >= 0) & (share <= 1)) and share.max() > 0.5
    deg = res.summary["degraded"]
    assert isinstance(deg, dict) and 0 < deg["peak_minute_rejected_pct"] <= 100
    assert 0 < deg["rejected_pct_in_window"] <= 100
    assert 0 < window_rejected_pct(res.runs, minutes, per, 0, minutes) <= 100


def _prefix(cfg: DeploymentConfig, threshold: int | None) -> DeploymentConfig:
    data = cfg.model_dump(mode="python", exclude_unset=True)
    data["variants"]["primary"]["routing"] = {
        "strategy": "PREFIX_AWARE",
        "prefix_length_bytes": 2048,
        **({"concurrency_threshold": threshold} if threshold is not None else {}),
    }
    return parse_config(data, env="dev", source=DEV, base_dir=DEV.parent)


def test_the_spill_threshold_is_the_scaling_target_rounded_up_unless_configured() -> None:
    base = fixture()
    derived = _prefix(base, None)
    least = least_spill_threshold(derived, "primary")
    assert least >= concurrency_target(derived, "primary") > least - 1
    assert spill_threshold(derived, "primary") == least
    assert spill_threshold(_prefix(base, least + 3), "primary") == least + 3
    assert spill_threshold(base, "primary") is None  # no prefix routing, no threshold


def test_a_spill_threshold_below_the_target_is_refused_naming_the_field_and_fix() -> None:
    base = fixture()
    least = least_spill_threshold(_prefix(base, None), "primary")
    with pytest.raises(ConfigError) as err:
        _prefix(base, least - 1)
    msg = str(err.value)
    assert "variants.primary.routing.concurrency_threshold" in msg
    assert f"below the variant's scaling target ({least} in flight" in msg
    assert f"set it to {least} or more, or leave it out" in msg


def test_the_spike_goes_where_the_fewest_instances_serve_not_the_lowest_floor() -> None:
    """An evening floor that drops at 23:00 leaves the evening's fleet in service (the step
    policy scales in one instance per 10 minutes): the hour with the fewest instances in service
    is outside the evening, whatever the floor says there."""
    cfg = fixture(friday_evening=8)
    (g,) = day_groups(cfg)
    hour = spike_hour(cfg, g, FAST)
    from simulator.fleet.scenarios import in_service_by_minute, normal_day_run

    n = in_service_by_minute(cfg, normal_day_run(cfg, g, FAST))
    mean = [float(n[h * 60 : h * 60 + 45].mean()) for h in range(1, 24)]
    assert float(n[hour * 60 : hour * 60 + 45].mean()) == pytest.approx(min(mean))
    assert hour not in range(17, 24)
