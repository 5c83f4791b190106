"""Helpers: prod's engine and instances with a scaling section written by each test."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import yaml

from simulator.assumptions import Assumptions
from simulator.run import Result, simulate
from simulator.traces import Trace
from sizing.fit_checks import parse_config
from sizing.scaling_target import BRIEF_PREFIX_HIT_RATE
from tests.fixtures import config_fixture
from typed_config import DeploymentConfig

PROD = config_fixture("prod")
#: The constant per-instance speed the simulator defaulted to before issue 24 (45 tok/s decode,
#: 10,000 tok/s prefill: 73 sequences / 4.03 s = 1,086 requests/minute per ml.g5.xlarge). The
#: tests of scaling, deploy and rollout mechanics keep it: their hand-checked counts need a fixed,
#: easy capacity, not the speed model's (tests/infra/test_speed_model.py holds that one).
#: They start from the configured count (no warm start) and keep the brief's 72 % hit rate.
LEGACY_SPEED = Assumptions(
    decode_tokens_per_second=45.0,
    prefill_tokens_per_second=10_000.0,
    prefix_cache_hit_rate=BRIEF_PREFIX_HIT_RATE,
    warm_start=False,
)
#: Fast, easy-to-count assumptions: new instances serve 60 s after the decision.
FAST = replace(LEGACY_SPEED, provision_seconds=60, startup_seconds=0)

#: Scale in by one while under 100 invocations/instance for 5 minutes, at most every 5 minutes.
IDLE_IN: dict[str, Any] = {
    "name": "idle-in",
    "direction": "in",
    "metric": "InvocationsPerInstance",
    "comparison": "<",
    "threshold": 100,
    "period_seconds": 60,
    "evaluation_periods": 5,
    "cooldown_seconds": 300,
    "steps": [{"upper": 0, "change": -1}],
}


#: The fleet the mechanics tests were hand-checked on: prod's before issue 36 adopted the solved
#: ml.g6e.xlarge fleet (ml.g5.xlarge; primary 2..8 starting at 4, canary 2; the schedules and the
#: release calendar below). Kept here so the mechanics tests do not move with prod's fleet.
LEGACY_INSTANCE_TYPE = "ml.g5.xlarge"
#: What synth asks of an ml.g5.xlarge fleet (sizing.speed_plan.rollback_latency_problems): 1.25 x
#: the 67,247 ms p99 a healthy one shows at its target of 63 in flight, at the speed model's
#: pessimistic edge with LoRA's measured cost.
LEGACY_ROLLBACK_P99_MS = 85_000
LEGACY_SCHEDULES: list[dict[str, Any]] = [
    {"name": "jp-evening-peak", "cron": "45 17 * * SUN-THU,SAT", "timezone": "Asia/Tokyo",
     "min_capacity": 5, "standby_instances": 1, "max_capacity": 8},
    {"name": "jp-evening-end", "cron": "0 23 * * *", "timezone": "Asia/Tokyo",
     "min_capacity": 2, "max_capacity": 8},
    {"name": "jp-off-peak-floor", "cron": "0 1 * * *", "timezone": "Asia/Tokyo",
     "min_capacity": 2, "max_capacity": 6},
    {"name": "us-evening-peak", "cron": "45 17 * * *", "timezone": "America/New_York",
     "min_capacity": 4, "max_capacity": 8},
    {"name": "us-evening-end", "cron": "0 23 * * *", "timezone": "America/New_York",
     "min_capacity": 2, "max_capacity": 8},
    {"name": "friday-release-prescale", "cron": "0 16 * * FRI", "timezone": "Asia/Tokyo",
     "min_capacity": 7, "standby_instances": 1, "max_capacity": 8},
]  # fmt: skip
LEGACY_CALENDAR: list[dict[str, Any]] = [
    {"name": "one-piece-1170", "at": "2026-12-04T20:00:00", "timezone": "Asia/Tokyo",
     "prescale_hours": 2, "restore_after_hours": 3, "min_capacity": 8, "max_capacity": 8},
]  # fmt: skip


#: The solver tests' small fleet (tests/simulator/test_fleet_solver_*.py): dev's model on
#: ml.g5.xlarge, two evening schedules in two time zones.
SOLVER_TYPE = "ml.g5.xlarge"
SOLVER_SCHEDULES = (
    ("jp-evening-peak", "45 17 * * *", "Asia/Tokyo"),
    ("jp-evening-end", "0 23 * * *", "Asia/Tokyo"),
    ("us-evening-peak", "45 17 * * *", "America/New_York"),
    ("us-evening-end", "0 23 * * *", "America/New_York"),
)


def solver_fixture(
    share: float, tpot_ms: float, queue_ms: float, floors: dict[str, int] | None = None
) -> DeploymentConfig:
    """The solver tests' config: dev's model on :data:`SOLVER_TYPE`, the schedules of
    :data:`SOLVER_SCHEDULES` with each floor from ``floors`` (else 1), two scenarios at
    ``share`` of the brief's traffic, held to 0 rejected, the queue wait and TPOT p95 (the
    searched policies pinned: one solve per point; test_fleet_policies.py compares them)."""
    dev = config_fixture("dev")
    data: dict[str, Any] = yaml.safe_load(dev.read_text())
    floors = floors or {}
    data["scaling"] = {
        "variants": {
            "primary": {
                "min_capacity": 1, "max_capacity": 30, "target_tracking": {"slos": ["tpot_p95"]},
            },
            "canary": {"min_capacity": 1, "max_capacity": 1, "target_tracking": {"slos": []}},
        },
        "schedules": [
            {"name": n, "cron": c, "timezone": z, "min_capacity": floors.get(n, 1),
             "max_capacity": 30}
            for n, c, z in SOLVER_SCHEDULES
        ],
        "release_calendar": [],
    }  # fmt: skip
    data["variants"]["primary"]["initial_weight"] = 100
    data["variants"]["canary"]["initial_weight"] = 0
    data["monitoring"].update(slo_tpot_p95_ms=tpot_ms, slo_queue_wait_p95_ms=queue_ms)
    data["fleet"] = {
        "scenarios": ["normal-day", "unannounced-3x"],
        "traffic_share": share,
        "slos": ["rejected", "queue_wait_p95", "tpot_p95"],
        "policies": {"canary": "release-only", "scale_in": "follow-traffic"},
    }
    return parse_config(data, env="dev", source=dev, base_dir=dev.parent)


def _legacy_fleet_data() -> dict[str, Any]:
    """prod.yaml's engine, model, routing and policies on the legacy fleet (ml.g5.xlarge)."""
    data: dict[str, Any] = yaml.safe_load(PROD.read_text())
    variants = data["variants"]
    variants["primary"].update(instance_type=LEGACY_INSTANCE_TYPE, initial_instance_count=4)
    variants["canary"].update(instance_type=LEGACY_INSTANCE_TYPE, initial_instance_count=2)
    data["deployment"]["rollback_model_latency_p99_ms"] = LEGACY_ROLLBACK_P99_MS
    return data


def legacy_prod() -> DeploymentConfig:
    """prod.yaml with the pre-issue-36 fleet: ml.g5.xlarge, primary 2..8 (4 at start), canary
    2..2, the evening floor 5 + 1 standby, the Friday prescale 7 + 1, the release at 8. Prod's
    policies otherwise (step policies, one scale-in authority); the concurrency target has no SLO
    bound (0.85 x the KV cache's 73 on an A10G), as prod's ttft_p50 did not bind there."""
    data = _legacy_fleet_data()
    scaling = data["scaling"]
    for name, lo, hi in (("primary", 2, 8), ("canary", 2, 2)):
        scaling["variants"][name].update(min_capacity=lo, max_capacity=hi)
        scaling["variants"][name]["target_tracking"]["slos"] = []
    scaling["schedules"] = [dict(s) for s in LEGACY_SCHEDULES]
    scaling["release_calendar"] = [dict(c) for c in LEGACY_CALENDAR]
    return parse_config(data, env="prod", source=PROD, base_dir=PROD.parent)


def make_cfg(
    primary: dict[str, Any],
    *,
    schedules: list[dict[str, Any]] | None = None,
    calendar: list[dict[str, Any]] | None = None,
    initial: int | None = None,
) -> DeploymentConfig:
    """prod.yaml on the legacy fleet (ml.g5.xlarge, canary 2..2) with only the scaling section
    (and the primary's initial count) replaced."""
    data = _legacy_fleet_data()
    primary = {"target_tracking": None, **primary}
    data["variants"]["primary"]["initial_instance_count"] = initial or primary["min_capacity"]
    data["variants"]["canary"]["initial_weight"] = 0  # all traffic on the primary
    data["scaling"] = {
        "variants": {
            "primary": primary,
            "canary": {"min_capacity": 2, "max_capacity": 2, "target_tracking": None},
        },
        "schedules": schedules or [],
        "release_calendar": calendar or [],
    }
    return parse_config(data, env="prod", source=PROD, base_dir=PROD.parent)


def flat_trace(
    levels: list[tuple[int, float]], start: datetime | None = None, name: str = "t"
) -> Trace:
    """``levels``: (minutes, requests/minute) segments, one after the other."""
    rpm = np.concatenate([np.full(m, float(v)) for m, v in levels])
    return Trace(name, start or datetime(2026, 12, 1, 0, 0, tzinfo=UTC), rpm)


def jst(y: int, mo: int, d: int, h: int, mi: int = 0) -> datetime:
    return datetime(y, mo, d, h, mi, tzinfo=ZoneInfo("Asia/Tokyo")).astimezone(UTC)


def run(cfg: DeploymentConfig, trace: Trace, a: Assumptions = FAST) -> Result:
    return simulate(cfg, trace, a)


def in_service_at_minute(res: Result, minute: float) -> int:
    r = res.runs["primary"]
    return int(r.series["in_service"][int(minute * 60 // r.tick_seconds)])


def desired_at_minute(res: Result, minute: float) -> int:
    r = res.runs["primary"]
    return int(r.series["desired"][int(minute * 60 // r.tick_seconds)])
