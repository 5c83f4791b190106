"""Rollout statuses are spelled once (lambdas/canary_controller/names.py) and imported everywhere
else: the controller's modules, the operator CLI, and the stacks' state machine."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from lambdas.canary_controller import handler, names, rules, store

REPO = Path(__file__).resolve().parents[2]
CONTROLLER = REPO / "lambdas" / "canary_controller"


def test_each_status_constant_is_its_own_name_and_a_rollout_status() -> None:
    assert get_args(names.RolloutStatus) == names.ROLLOUT_STATUSES
    assert len(set(names.ROLLOUT_STATUSES)) == len(names.ROLLOUT_STATUSES)
    for status in names.ROLLOUT_STATUSES:
        assert getattr(names, status) == status
    assert set(names.LOCKED) | set(names.ENDED) | {names.SUPERSEDED} == set(names.ROLLOUT_STATUSES)
    assert not set(names.LOCKED) & set(names.ENDED)


def test_the_controller_keeps_exporting_the_statuses_it_exported_before() -> None:
    for module in (rules, handler):
        for status in ("RUNNING", "ROLLING_BACK", "COMPLETED", "ROLLED_BACK", "FAILED"):
            assert getattr(module, status) is getattr(names, status)
    assert rules.LOCKED is names.LOCKED and rules.ENDED is names.ENDED
    assert store.SUPERSEDED is names.SUPERSEDED and handler.SUPERSEDED is names.SUPERSEDED


def test_every_status_a_decision_records_is_a_rollout_status() -> None:
    for kind in ("abort", "complete", "restore", "rollback"):
        moved = rules.transition({}, rules.Decision(kind, "why"), now=0)
        assert moved["status"] in names.ROLLOUT_STATUSES


def test_no_status_is_spelled_outside_names_py() -> None:
    sources = [*CONTROLLER.glob("*.py"), REPO / "tools" / "canary.py"]
    spelled = re.compile("[\"'](" + "|".join(names.ROLLOUT_STATUSES) + ")[\"']")
    found = {
        f"{path.relative_to(REPO)}: {m.group(0)}"
        for path in sources
        if path.name != "names.py"
        for m in spelled.finditer(path.read_text())
    }
    assert not found, sorted(found)
