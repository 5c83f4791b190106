"""What the fleet bills: the one cost model the plan and the simulator share.

A SageMaker endpoint bills every instance it has launched, per second, at its on-demand price
(starting and draining instances included). Two things set how many there are:

- the floors: each variant's scalable target MinCapacity over time, as the recurring schedules
  and the release calendar write it (``min_capacity + standby_instances``,
  :mod:`sizing.bounds_timeline`); below it nothing is ever billed. The plan can price these
  offline, from the config alone: :func:`plan_cost`.
- the day's scaling above the floors, which depends on traffic: the simulator's replay of a day
  bills what it launched, minute by minute, with the same conversion (:func:`monthly`) and
  reports how much of it the floors are (:func:`floor_cost`).

A month is AWS's own convention, ``HOURS_PER_MONTH`` (730 h = 8,760 / 12), for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from sizing.bounds_timeline import timeline
from typed_config import VARIANT_NAMES, DeploymentConfig, VariantName
from typed_config.catalog import HOURS_PER_MONTH, INSTANCE_CATALOG

#: Where the plan's priced week starts: the simulator's normal day (simulator/traces.py starts
#: its ``normal-day`` trace here too), a Tuesday 00:00 in Tokyo, Monday morning in UTC.
REFERENCE_START = datetime(2026, 12, 1, 0, 0, tzinfo=ZoneInfo("Asia/Tokyo"))
#: The plan prices a whole week: schedules restricted to some weekdays (dev's MON-FRI, prod's
#: Friday release pre-scale) then count as often as they fire in a month.
PLAN_WINDOW = timedelta(days=7)


@dataclass(frozen=True)
class MonthByEdge:
    """The one monthly figure (the normal day replayed with the fleet's scaling) at each edge of
    the speed model's error band (sizing.serving_speed): the pessimistic one is what the product
    plans and decides on; the central estimate is what the same fleet bills if the engine runs
    as the model expects, the optimistic edge if it runs at the band's fast end. Same fleet,
    same floors: a faster engine holds fewer instances above them, so it bills no more."""

    pessimistic: float
    central: float
    optimistic: float

    def as_dict(self) -> dict[str, float]:
        return {
            "pessimistic": round(self.pessimistic, 2),
            "central": round(self.central, 2),
            "optimistic": round(self.optimistic, 2),
        }


def monthly(cost_usd: float, minutes: float) -> float:
    """``cost_usd`` billed over ``minutes``, as a month of ``HOURS_PER_MONTH`` hours."""
    return cost_usd * HOURS_PER_MONTH * 60 / minutes


def floor_instance_hours(
    cfg: DeploymentConfig, variant: VariantName, start: datetime, end: datetime
) -> float:
    """Instance-hours of ``variant``'s MinCapacity over [start, end): the bounds the scheduled
    actions leave at ``start``, then each firing's, held until the next."""
    # in UTC: aware datetimes of one zone subtract as wall times, wrong across a DST change
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    (low, _, _), changes = timeline(cfg.scaling, variant, start, end)
    hours, at, floor = 0.0, start, low
    for c in changes:
        if c.at >= end:
            break
        hours += floor * (c.at - at).total_seconds() / 3600
        at, floor = c.at, c.min_capacity
    return hours + floor * (end - at).total_seconds() / 3600


def price_per_hour(cfg: DeploymentConfig, variant: VariantName) -> float:
    """The on-demand price the plan and the simulator bill ``variant`` at: its instance type
    (its first pool's, when it has instance pools)."""
    return INSTANCE_CATALOG[cfg.variants[variant].instance_type].price_per_hour


@dataclass(frozen=True)
class FloorCost:
    """The floors' cost over one window, per variant and in all."""

    start: datetime
    end: datetime
    usd: dict[str, float]

    @property
    def minutes(self) -> float:
        return (self.end.astimezone(UTC) - self.start.astimezone(UTC)).total_seconds() / 60

    @property
    def total_usd(self) -> float:
        return sum(self.usd.values())

    @property
    def monthly_usd(self) -> float:
        return monthly(self.total_usd, self.minutes)


def floor_cost(cfg: DeploymentConfig, start: datetime, end: datetime) -> FloorCost:
    """What the floors alone bill over [start, end), every variant at its own price."""
    return FloorCost(
        start,
        end,
        {
            v: floor_instance_hours(cfg, v, start, end) * price_per_hour(cfg, v)
            for v in VARIANT_NAMES
        },
    )


def recurring_only(cfg: DeploymentConfig) -> DeploymentConfig:
    """``cfg`` without its release calendar: what recurs every week."""
    scaling = cfg.scaling.model_copy(update={"release_calendar": []})
    return cfg.model_copy(update={"scaling": scaling})


def plan_cost(cfg: DeploymentConfig) -> FloorCost:
    """The plan's monthly figure: the floors the recurring schedules hold over the week from
    :data:`REFERENCE_START`. A release is a one-off: scaled to a month it would count four
    times (:func:`release_costs` prices each once)."""
    return floor_cost(recurring_only(cfg), REFERENCE_START, REFERENCE_START + PLAN_WINDOW)


@dataclass(frozen=True)
class ReleaseCost:
    """What one release of the calendar adds to the floors, once: its pre-scale window priced
    with and without it."""

    name: str
    at: datetime
    usd: float


def release_costs(cfg: DeploymentConfig) -> list[ReleaseCost]:
    """Each release's one-off cost above the recurring floors, over its pre-scale window."""
    base = recurring_only(cfg)
    out = []
    for r in cfg.scaling.release_calendar:
        start, end = r.window
        extra = floor_cost(cfg, start, end).total_usd - floor_cost(base, start, end).total_usd
        out.append(ReleaseCost(r.name, r.at.replace(tzinfo=ZoneInfo(r.timezone)), extra))
    return out


def ceiling_monthly(cfg: DeploymentConfig) -> float:
    """Every variant at its own ``max_capacity`` all month: what the bounds let it cost at most
    (the schedules may write lower maxima; the plan warns when they never reach this one)."""
    return sum(
        cfg.scaling.variants[v].max_capacity * price_per_hour(cfg, v) * HOURS_PER_MONTH
        for v in VARIANT_NAMES
    )


def release_hours(cfg: DeploymentConfig) -> float:
    """Hours one release holds the canary raised: the shadow stage's least time (when the config
    has one), then every canary step baked (rollout.steps_percent x rollout.bake_minutes)."""
    ro = cfg.rollout
    minutes = len(ro.steps_percent) * ro.bake_minutes
    if ro.shadow is not None:
        minutes += ro.shadow.min_minutes
    return minutes / 60


def release_canary_monthly(cfg: DeploymentConfig) -> float:
    """What a canary raised only while a release runs (rollout.canary_instances) adds to a month:
    its instances above its own floor, for ``fleet.releases_per_month`` releases of
    :func:`release_hours` each (0 without rollout.canary_instances)."""
    raised = cfg.rollout.canary_instances
    if raised is None:
        return 0.0
    extra = max(0, raised - cfg.scaling.variants["canary"].min_capacity)
    return extra * price_per_hour(cfg, "canary") * release_hours(cfg) * cfg.fleet.releases_per_month
