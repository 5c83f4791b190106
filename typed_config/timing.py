"""Time in the config: 5-field local crons, IANA time zones, the recurring scheduled actions and
the release calendar, and the bound changes they make (:func:`bounds_changes`).

Application Auto Scaling semantics (PutScheduledAction, API reference:
https://docs.aws.amazon.com/autoscaling/application/APIReference/API_PutScheduledAction.html):
a scheduled action's ``Schedule`` is ``cron(...)`` (recurring) or ``at(...)`` (one-off),
read in its ``Timezone``; when it fires it sets the scalable target's MinCapacity and
MaxCapacity, which hold until another action changes them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from pydantic import AfterValidator, Field, field_validator

from typed_config.base import (
    NAME_PATTERN,
    Strict,
    VariantName,
    check_capacity_bounds,
    section_rule,
)


def _check_timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{value!r} is not an IANA time zone (e.g. Asia/Tokyo)") from None
    return value


#: An IANA time zone name (e.g. Asia/Tokyo), checked against the zone database.
TimeZoneName = Annotated[str, AfterValidator(_check_timezone)]
#: An instance count a scalable target's bounds may take.
Capacity = Annotated[int, Field(ge=1, le=100)]


def aas_cron(cron: str) -> str:
    """A 5-field cron (minute hour dom month dow, 0/7 = Sunday) as Application Auto Scaling's
    6-field ``cron(minute hour dom month dow year)``: one of dom/dow is ``?``, numeric
    days of week are 1 = Sunday .. 7 = Saturday, and ``*/n`` steps start from the field's minimum.
    """
    minute, hour, dom, month, dow = cron.split()

    def step_from(field: str, start: int) -> str:
        return f"{start}/{field[2:]}" if field.startswith("*/") else field

    def dow_number(match: re.Match[str]) -> str:
        return str(int(match.group()) % 7 + 1)

    dow = "?" if dow == "*" else re.sub(r"\d+", dow_number, dow)
    dom = "?" if dom == "*" and dow != "?" else step_from(dom, 1)
    return f"cron({step_from(minute, 0)} {step_from(hour, 0)} {dom} {step_from(month, 1)} {dow} *)"


def cron_fires(cron: str, timezone: str, after: datetime, until: datetime) -> list[datetime]:
    """Every firing of a 5-field local ``cron`` in (after, until], as aware local datetimes."""
    it = croniter(cron, after.astimezone(ZoneInfo(timezone)))
    out: list[datetime] = []
    while (nxt := it.get_next(datetime)) <= until:
        out.append(nxt)
    return out


#: A cron's five fields: name, accepted range (croniter's, which is what the schedules replay).
CRON_FIELDS = (
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 or SUN-SAT"),
)


def _cron_field_errors(cron: str) -> str:
    """Which of a 5-field cron's fields croniter refuses, each named with its range: each field
    is tried alone in an otherwise valid expression ("0 25 * * MON-FRI": the hour)."""
    fields = cron.split()
    bad = []
    for i, (name, accepted) in enumerate(CRON_FIELDS):
        probe = ["0", "0", "*", "*", "*"]
        probe[i] = fields[i]
        if not croniter.is_valid(" ".join(probe)):
            bad.append(f"{name} {fields[i]!r} is not valid (accepted: {accepted})")
    return f"{cron!r}: " + ("; ".join(bad) or "not a valid cron expression")


class ScheduledAction(Strict):
    """A recurring capacity change in local time: ``cron`` has 5 fields (m h dom mon dow)."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    """The schedule's name, unique among schedules and releases (part of the scheduled action's
    name)."""
    variant: VariantName = "primary"
    """The variant whose bounds the schedule sets."""
    cron: str
    """When it fires, 5 cron fields in ``timezone``: minute hour day-of-month month day-of-week,
    e.g. ``0 20 * * MON-FRI``."""
    timezone: TimeZoneName
    """An IANA time zone the cron is read in, e.g. ``America/New_York``, ``Asia/Tokyo`` (daylight
    saving followed)."""
    min_capacity: Capacity
    """The variant's minimum instances from this time on."""
    max_capacity: Capacity
    """The variant's maximum instances from this time on."""
    standby_instances: Annotated[int, Field(ge=0, le=50)] = 0
    """Instances kept provisioned above min_capacity from this action until the next one."""

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        if len(value.split()) != 5:
            raise ValueError(
                f"{value!r} has {len(value.split())} fields; a cron here has 5 "
                "(minute hour day-of-month month day-of-week)"
            )
        if not croniter.is_valid(value):
            raise ValueError(_cron_field_errors(value))
        _, _, dom, _, dow = value.split()
        if dom != "*" and dow != "*":
            raise ValueError(
                f"{value!r} restricts both day-of-month and day-of-week; Application Auto "
                "Scaling accepts only one of them (the other becomes '?')"
            )
        if "/" in dow or re.search(r"[LW#]", value):
            raise ValueError(f"{value!r}: steps in day-of-week and L/W/# are not supported")
        if re.search(r"(?<!\d)7(?!\d)", dow):
            raise ValueError(f"{value!r}: write Sunday as 0 or SUN, not 7")
        return value

    @property
    def written_min_capacity(self) -> int:
        """MinCapacity written to AAS: the floor plus the standby instances kept provisioned."""
        return self.min_capacity + self.standby_instances

    def last_fire(self, when: datetime) -> datetime:
        """The latest firing at or before ``when`` (aware), as an aware UTC datetime."""
        local = (when + timedelta(seconds=1)).astimezone(ZoneInfo(self.timezone))
        return croniter(self.cron, local).get_prev(datetime).astimezone(UTC)

    def first_fire_after(self, when: datetime) -> datetime:
        """The first firing at or after ``when`` (aware), as an aware UTC datetime."""
        local = (when - timedelta(seconds=1)).astimezone(ZoneInfo(self.timezone))
        return croniter(self.cron, local).get_next(datetime).astimezone(UTC)

    @section_rule
    def _bounds(self) -> ScheduledAction:
        floor = self.min_capacity + self.standby_instances
        if floor > self.max_capacity:
            raise ValueError(
                f"standby_instances: min_capacity + standby_instances ({floor}) must be <= "
                f"max_capacity ({self.max_capacity})"
            )
        return self


class ReleaseEvent(Strict):
    """A known release: pre-scale ``prescale_hours`` before, restore ``restore_after_hours``
    after."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    """The release's name, unique among schedules and releases."""
    variant: VariantName = "primary"
    """The variant pre-scaled for the release."""
    at: datetime
    """When the release happens, an ISO 8601 local time (e.g. ``2026-12-01T19:00``) in
    ``timezone``."""
    timezone: TimeZoneName
    """An IANA time zone ``at`` is read in, e.g. ``Asia/Tokyo``."""
    prescale_hours: Annotated[float, Field(gt=0, le=48)] = 2
    """Hours before ``at`` the bounds are raised (0-48)."""
    restore_after_hours: Annotated[float, Field(gt=0, le=48)] = 4
    """Hours after ``at`` the recurring bounds are restored (0-48)."""
    min_capacity: Capacity
    """The variant's minimum instances during the release window."""
    max_capacity: Capacity
    """The variant's maximum instances during the release window."""

    @field_validator("at")
    @classmethod
    def _naive_local(cls, value: datetime) -> datetime:
        if value.tzinfo is not None:
            raise ValueError("write 'at' as local time without an offset; 'timezone' places it")
        return value

    @section_rule
    def _bounds(self) -> ReleaseEvent:
        check_capacity_bounds(self.min_capacity, self.max_capacity)
        return self

    @property
    def window(self) -> tuple[datetime, datetime]:
        """(pre-scale, restore) as aware datetimes in ``timezone`` (elapsed hours, DST-safe)."""
        tz = ZoneInfo(self.timezone)
        at = self.at.replace(tzinfo=tz).astimezone(UTC)
        return (
            (at - timedelta(hours=self.prescale_hours)).astimezone(tz),
            (at + timedelta(hours=self.restore_after_hours)).astimezone(tz),
        )


@dataclass(frozen=True)
class BoundsChange:
    """One scheduled action on ``variant``'s scalable target: each time ``when`` fires, the
    target's bounds become (``min_capacity``, ``max_capacity``)."""

    name: str
    """The schedule's or the release's name."""
    kind: Literal["recurring", "prescale", "restore"]
    """``recurring`` (a schedule), or the release's ``prescale`` / ``restore``."""
    variant: VariantName
    when: str | datetime
    """A 5-field local cron (recurring), or one aware local moment (one-off)."""
    timezone: str
    min_capacity: int
    max_capacity: int

    @property
    def action_name(self) -> str:
        """ScheduledActionName: the schedule's name, or ``<release>-prescale|restore``."""
        return self.name if self.kind == "recurring" else f"{self.name}-{self.kind}"

    @property
    def expression(self) -> str:
        """The ``Schedule`` written to Application Auto Scaling, local to ``timezone``."""
        if isinstance(self.when, str):
            return aas_cron(self.when)
        return f"at({self.when:%Y-%m-%dT%H:%M:%S})"

    def fires(self, after: datetime, until: datetime) -> list[datetime]:
        """When it sets the bounds up to ``until``: a recurring action's firings in
        (``after``, ``until``]; a one-off action's moment if at or before ``until``."""
        if isinstance(self.when, str):
            return cron_fires(self.when, self.timezone, after, until)
        return [self.when] if self.when <= until else []
