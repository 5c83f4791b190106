"""Config errors a person fixes in one pass (issue 32): realistic mistakes in prod.yaml, each
reported with the field as the file shows it (a list item by its name, or counted from 1), the
line to fix, and what the rule is; and the plan's warning when the canary and the primary differ
in what a fair comparison needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from sizing.fair_comparison import comparison_warnings
from sizing.fit_checks import load_config
from sizing.plan import build_plan, render_plan
from tests.fixtures import config_fixture
from typed_config import ConfigError
from typed_config.error_report import item_label, item_path

from .conftest import REPO_ROOT

PROD = (config_fixture("prod")).read_text()


def _edited(tmp_path: Path, old: str, new: str) -> Path:
    assert PROD.count(old) == 1, old
    path = tmp_path / "prod.yaml"
    path.write_text(PROD.replace(old, new))
    return path


def _line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _errors(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as err:
        load_config(path, env="prod")
    lines = str(err.value).splitlines()
    assert lines[0] == f"{path}: {len(lines) - 1} invalid value(s)"
    return lines[1:]


def test_a_schedule_is_named_by_its_name_with_its_line(tmp_path) -> None:
    path = _edited(tmp_path, 'cron: "45 17 * * *", timezone: America/New_York',
                   'cron: "45 25 * * *", timezone: America/New_York')  # fmt: skip
    at = _line(path, "name: us-evening-peak")
    assert _errors(path) == [
        f"  scaling.schedules[us-evening-peak].cron (line {at}): '45 25 * * *': hour '25' is not "
        "valid (accepted: 0-23)"
    ]


def test_a_schedule_below_the_floor_names_both_figures_and_the_floor(tmp_path) -> None:
    old = 'us-evening-end, cron: "0 23 * * *", timezone: America/New_York, min_capacity: 2'
    path = _edited(tmp_path, old, old.replace("min_capacity: 2", "min_capacity: 1"))
    at = _line(path, "name: us-evening-end")
    assert _errors(path) == [
        f"  scaling.schedules[us-evening-end].min_capacity (line {at}): 1 is below "
        "scaling.variants.primary.min_capacity (2), the floor the endpoint must never go under"
    ]


def test_an_unnamed_list_item_is_counted_from_one_inside_its_named_parent(tmp_path) -> None:
    path = _edited(tmp_path, "- {lower: 30, upper: 80, change: 4}", "- {lower: 30, upper: 80}")
    at = _line(path, "- {lower: 30, upper: 80}")
    assert _errors(path) == [
        "  scaling.variants.primary.step_policies[queue-depth-out].steps[item 2].change "
        f"(line {at}): Field required"
    ]


def test_overlapping_steps_say_which_step_and_the_rule(tmp_path) -> None:
    path = _edited(
        tmp_path, "- {lower: 30, upper: 80, change: 4}", "- {lower: 20, upper: 80, change: 4}"
    )
    at = _line(path, "- {lower: 20, upper: 80")
    (only,) = _errors(path)
    assert only == (
        "  scaling.variants.primary.step_policies[queue-depth-out].steps[item 2].lower "
        f"(line {at}): 20.0 and the step before it overlap: its upper is 30.0; each step's "
        "lower must be the upper of the one before"
    )


def test_an_adapter_of_another_rank_is_named_not_the_whole_list(tmp_path) -> None:
    path = _edited(tmp_path, "general_support_v2, rank: 16}", "general_support_v2, rank: 32}")
    at = _line(path, "name: general_support")
    assert _errors(path) == [
        f"  adapters[general_support].rank (line {at}): 32 differs from the other adapters' 16: "
        "all adapters must share one rank (vLLM sizes every LoRA slot by the largest)",
        f"  adapters[general_support].rank (line {at}): 32 exceeds engine.max_lora_rank (16) "
        "(raise engine.max_lora_rank, which every LoRA slot's memory is sized by)",
    ]


def test_a_release_window_a_schedule_would_undo_names_both_by_name(tmp_path) -> None:
    path = _edited(tmp_path, "prescale_hours: 2, restore_after_hours: 3",
                   "prescale_hours: 5, restore_after_hours: 3")  # fmt: skip
    at = _line(path, "name: one-piece-1170")
    # 15:00-20:00 on Friday 2026-12-04: the Friday pre-scale (16:00) and the evening peak, which
    # runs every day (17:45), both fire inside it; each is named with the release's line
    errors = _errors(path)
    head = f"  scaling.release_calendar[one-piece-1170] (line {at}): the schedule "
    assert [e.startswith(head) for e in errors] == [True, True]
    assert any(
        "friday-release-prescale fires at 2026-12-04 16:00 Asia/Tokyo inside the pre-scale window"
        in e
        for e in errors
    )
    assert any("jp-evening-peak fires at 2026-12-04 17:45 Asia/Tokyo" in e for e in errors)


def test_instance_pools_are_named_by_their_type(tmp_path) -> None:
    path = _edited(
        tmp_path,
        "    instance_type: ml.g6e.xlarge\n    initial_instance_count: 4\n",
        "    instance_type: ml.g6e.xlarge\n    instance_pools:\n"
        "      - {instance_type: ml.g6e.xlarge, priority: 1}\n"
        "      - {instance_type: ml.g5.xlarge, priority: 1}\n"
        "    initial_instance_count: 4\n",
    )
    at = _line(path, "{instance_type: ml.g5.xlarge, priority: 1}")
    (only,) = _errors(path)
    assert only.startswith(
        f"  variants.primary.instance_pools[ml.g5.xlarge].priority (line {at}): 1 is already "
        "pool item 1's"
    )


def test_item_names_fall_back_to_their_place_counted_from_one() -> None:
    assert item_label({"name": "peak", "instance_type": "x"}, 0) == "peak"
    assert item_label({"instance_type": "ml.g5.xlarge"}, 3) == "ml.g5.xlarge"
    assert item_label({"lower": 0}, 0) == "item 1"
    assert item_label("DesiredCount", 1) == "DesiredCount"  # a short scalar: itself
    assert item_label("x" * 41, 1) == "item 2"
    assert item_label(3, 0) == "item 1"
    data = {"notifications": {"emails": ["a@example.com", "nope"]}}
    assert item_path(["notifications", "emails", 1], data) == "notifications.emails[nope]"
    # a path the data does not reach (a missing key) still reads, without names
    assert item_path(["scaling", "schedules", 0, "cron"], {}) == "scaling.schedules[item 1].cron"


# -- what primary and canary must share for the canary's figures to judge the release -------


def test_a_canary_routed_differently_is_a_plan_warning_saying_what_to_do(tmp_path) -> None:
    path = _edited(
        tmp_path, "routing: *prefix_routing}", "routing: {strategy: LEAST_OUTSTANDING_REQUESTS}}"
    )
    cfg = load_config(path, env="prod")
    (warning,) = comparison_warnings(cfg)
    assert warning.startswith(
        "variants.canary.routing (strategy=LEAST_OUTSTANDING_REQUESTS) differs from "
        "variants.primary.routing (strategy=PREFIX_AWARE, prefix_length_bytes=2048)"
    )
    assert (
        "reads as the release's" in warning and "Give the canary the primary's routing" in warning
    )
    assert render_plan(build_plan(cfg, {})).count(warning) == 1


def test_a_canary_on_another_type_or_target_is_warned_too(tmp_path) -> None:
    path = _edited(
        tmp_path,
        "canary: {instance_type: ml.g6e.xlarge, initial_instance_count: 3",
        "canary: {instance_type: ml.g5.xlarge, initial_instance_count: 3",
    )
    warnings = comparison_warnings(load_config(path, env="prod"))
    assert any(
        w.startswith("the canary runs on ml.g5.xlarge, the primary on ml.g6e.xlarge")
        for w in warnings
    )
    # an A10G's KV cache binds lower than an L40S's max_num_seqs: another target too
    assert any(
        w.startswith("the canary is scaled to hold 62.05 in flight per instance, the primary 108.8")
        for w in warnings
    )


def test_the_committed_configs_compare_like_for_like() -> None:
    for env in ("dev", "prod"):
        assert comparison_warnings(load_config(REPO_ROOT / "config" / f"{env}.yaml", env=env)) == []
