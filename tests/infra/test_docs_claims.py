"""What the docs say about a command's behaviour matches what the command does.

README "Day 2" once said `make deploy` does not check for a running rollout while "Deploy for
real" (and tools/deploy.py) refused a deploy during one: a reader following Day 2 would have
forced deploys through rollouts that were safe to wait for. Day 2 now lives in docs/day2.md. The
refusal itself is tested on the real controller (tests/lambdas/test_deploy_during_rollout.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
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
