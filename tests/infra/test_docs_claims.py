"""What the docs say about a command's behaviour matches what the command does.

README "Day 2" once said `make deploy` does not check for a running rollout while "Deploy for
real" (and tools/deploy.py) refused a deploy during one: a reader following Day 2 would have
forced deploys through rollouts that were safe to wait for. Day 2 now lives in docs/day2.md. The
refusal itself is tested on the real controller (tests/lambdas/test_deploy_during_rollout.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fixtures import config_fixture

REPO = Path(__file__).resolve().parents[2]
#: The commit tests/fixtures/configs/prod.yaml was copied at (its first line names it).
FROZEN_AT = "4264626"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_doc_says_make_deploy_ignores_a_running_rollout(doc: Path) -> None:
    text = re.sub(r"\s+", " ", doc.read_text())
    assert not re.search(
        r"make deploy`? (does not|doesn't|never) check for a running rollout", text
    )


def test_day2_says_make_deploy_refuses_during_a_rollout() -> None:
    day2 = re.sub(r"\s+", " ", (REPO / "docs" / "day2.md").read_text())
    assert "`make deploy` refuses while the controller records a rollout RUNNING" in day2
    assert "SKIP_ROLLOUT_CHECK=1" in day2


def test_the_scaling_worked_example_diff_applies_to_the_prod_it_names() -> None:
    """docs/scaling.md's worked example is a change to prod.yaml as of the commit it names, kept
    as the frozen tests/fixtures/configs/prod.yaml (issue 32: it was a diff of an earlier prod
    that no longer matched; issue 43: a change to the shipped prod needs no doc or test edit):
    every hunk's old side (context and removed lines) is a run of consecutive lines of it."""
    doc = (REPO / "docs" / "scaling.md").read_text()
    diff = doc.split("### The change, in `config/prod.yaml`", 1)[1].split("```diff\n", 1)[1]
    diff = diff.split("\n```", 1)[0]
    prod = config_fixture("prod").read_text().splitlines()
    assert FROZEN_AT in prod[0] and f"as of commit {FROZEN_AT}" in doc
    hunks = [h for h in re.split(r"^@@ .* @@$", diff, flags=re.M) if h.strip()]
    assert len(hunks) >= 2
    for hunk in hunks:
        old = [ln[1:] for ln in hunk.strip("\n").splitlines() if ln[:1] in (" ", "-")]
        starts = [i for i, ln in enumerate(prod) if ln == old[0]]
        assert any(prod[i : i + len(old)] == old for i in starts), (
            f"docs/scaling.md's worked diff no longer applies to the frozen prod:\n{hunk}"
        )
