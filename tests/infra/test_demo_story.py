"""`make demo` reads as a story within its line budget (issue 32: it printed 494 lines, ~180 of
them llmcompressor's progress bars, and each variant's identical memory breakdown twice).

Built from the pieces that print it: a real synth of config/prod.yaml into a temporary cdk.out
(the templates and plan.json the demo reads), tools/demo.py's own sections, each step's bound
on the lines it shows (enforced by tools/progress.py, tests/infra/test_progress.py) and the
serving step's bound (container/demo_lines.py, which tests/container/test_demo_serve.py holds a
real run of the demo's conversation to)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from container import demo_lines
from tools import demo
from tools.synth import synth


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cdk.out") / demo.ENV
    _, errors = synth(demo.ENV, out)
    assert errors == []
    return out


def test_the_story_fits_its_line_budget(synthesized: Path) -> None:
    middle = demo.story_middle(synthesized)
    steps = sum(step.max_lines() for step in demo.STEPS)
    total = len(demo.HEADER) + steps + len(middle) + len(demo.NEXT)
    assert total <= demo.LINE_BUDGET, (
        f"make demo prints up to {total} lines (budget {demo.LINE_BUDGET}): header "
        f"{len(demo.HEADER)}, steps {steps}, built + plan {len(middle)}, next {len(demo.NEXT)}"
    )
    assert demo.SERVE.max_lines() == 2 + demo_lines.MAX_LINES


def test_the_story_has_its_sections_in_order(synthesized: Path) -> None:
    middle = demo.story_middle(synthesized)
    assert [s.title[:3] for s in demo.STEPS] == ["1/3", "2/3", "3/3"]
    assert middle[0] == "Built:"
    built = middle[1 : middle.index(next(ln for ln in middle if ln.startswith("The plan")))]
    names = sorted(p.name.removesuffix(".template.json") for p in synthesized.glob("*.template*"))
    assert [ln.split()[0] for ln in built] == names and len(names) >= 4
    assert all(re.fullmatch(r"\s+\S+\s+\d+ resources", ln) for ln in built)
    assert demo.NEXT[0] == "What next:" and len(demo.NEXT) > 3
    # every step but the serving one writes its tools' output to a file it names
    assert [s.log is not None for s in demo.STEPS] == [True, True, False]


def test_the_plan_is_printed_once_with_its_alarms_as_counts(synthesized: Path) -> None:
    middle = demo.story_middle(synthesized)
    plan_start = next(i for i, ln in enumerate(middle) if ln.startswith("The plan"))
    assert str(synthesized / "plan.md") in middle[plan_start]
    plan = middle[plan_start + 1 :]
    assert sum("memory per GPU:" in ln for ln in plan) == 1  # the canary's is the primary's
    assert any(ln.strip().startswith("same as primary: model release, memory per GPU")
               for ln in plan)  # fmt: skip
    alarms = [ln for ln in plan if ln.startswith("  alarms")]
    assert len(alarms) == 1 and re.fullmatch(
        r"  alarms  (\d+): (\d+) critical, (\d+) warning, (\d+) that roll back a deployment or "
        r"scale",
        alarms[0],
    )
    assert not any(ln.strip().startswith("- [CRITICAL]") for ln in plan)
    assert (synthesized / "plan.md").read_text().count("- [CRITICAL]") >= 1  # the list is there


def test_the_next_steps_name_make_targets_that_exist() -> None:
    rules = set()
    for mk in [Path("Makefile"), *sorted(Path("mk").glob("*.mk"))]:
        rules |= set(re.findall(r"^([a-zA-Z0-9_-]+):", (demo.REPO_ROOT / mk).read_text(), re.M))
    named = {m.group(1) for ln in demo.NEXT if (m := re.match(r"\s+make (\S+)", ln))}
    assert named and named <= rules, named - rules
    assert {s.target for s in demo.STEPS} <= rules
