"""The plan as docs/plan.md and docs/capacity.md quote it is the plan `make synth ENV=prod` prints.

The capacity terms were refitted (issue 22) and every figure downstream of them moved: quoted
by hand, the pages would keep the old ones. Each line of a quoted plan block (the elisions
excepted) must be a line, or the start of a line, of what `sizing.plan.render_plan` prints for
config/prod.yaml today."""

from __future__ import annotations

from pathlib import Path

import pytest

from sizing.plan import build_plan, render_plan

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def printed(prod_cfg, prod_templates) -> list[str]:
    plan = build_plan(prod_cfg, {k: t.to_json() for k, t in prod_templates.items()})
    return [line.strip() for line in render_plan(plan).splitlines() if line.strip()]


def quoted_plan_lines(doc: Path) -> list[str]:
    """Lines of the fenced blocks that quote the plan (they hold 'memory per GPU:')."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    lines = []
    for block in blocks:
        if not any("memory per GPU:" in line for line in block):
            continue
        for line in block:
            text = line.strip()
            if not text or text.startswith(("$", "...", "synthesized ")) or "(34 in all" in text:
                continue
            lines.append(text.removesuffix(" ...").removesuffix("; ..."))
    return lines


@pytest.mark.parametrize("doc", ["docs/plan.md", "docs/capacity.md"])
def test_every_quoted_plan_line_is_printed_by_the_plan_today(doc, printed) -> None:
    quoted = quoted_plan_lines(REPO / doc)
    assert len(quoted) >= 8, f"{doc}: no plan block found"
    stale = [q for q in quoted if not any(p.startswith(q) for p in printed)]
    assert stale == [], f"{doc} quotes plan lines the plan no longer prints: {stale}"
