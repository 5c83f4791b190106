"""``make ci-approvals`` (tools/ci_approvals.py): the release refuses to start unless prod's
GitHub environments have required reviewers. ``gh api`` is replaced by a recorder that answers
as GitHub's REST API does (an environment with and without the rule, 404, a token without
``actions: read``); each case asserts the exit status and the annotation."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from typing import Any

import pytest

from tools import ci_approvals

REPO = "my-org/mangaassist-serving"


def environment(name: str, *reviewers: dict[str, Any], wait: int | None = None) -> dict[str, Any]:
    rules: list[dict[str, Any]] = []
    if wait is not None:
        rules.append({"id": 1, "node_id": "a", "type": "wait_timer", "wait_timer": wait})
    if reviewers:
        rules.append({"id": 2, "node_id": "b", "type": "required_reviewers",
                      "prevent_self_review": True,
                      "reviewers": [{"type": r.get("type", "User"), "reviewer": r}
                                    for r in reviewers]})  # fmt: skip
    return {"id": 7, "name": name, "protection_rules": rules}


class Gh:
    def __init__(self, answers: dict[str, tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(args))
        name = args[1].rsplit("/", 1)[-1]
        rc, out, err = self.answers[name]
        return subprocess.CompletedProcess(["gh", *args], rc, out, err)


def ok(env: dict[str, Any]) -> tuple[int, str, str]:
    return 0, json.dumps(env), ""


def run(gh: Gh, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = ci_approvals.main(["--environments", "prod,prod-promote"],
                           {"GITHUB_REPOSITORY": REPO}, gh)  # fmt: skip
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_both_environments_with_reviewers_pass(capsys) -> None:
    gh = Gh({"prod": ok(environment("prod", {"login": "alice"})),
             "prod-promote": ok(environment("prod-promote", {"slug": "release-owners",
                                                             "type": "Team"}))})  # fmt: skip
    rc, out, err = run(gh, capsys)
    assert rc == 0, err
    assert out.splitlines() == [
        "approvals: environment prod requires a review by one of alice",
        "approvals: environment prod-promote requires a review by one of release-owners",
    ]
    assert gh.calls == [["api", f"repos/{REPO}/environments/prod"],
                        ["api", f"repos/{REPO}/environments/prod-promote"]]  # fmt: skip


def test_an_environment_without_required_reviewers_is_refused_naming_the_setting(capsys) -> None:
    """A private repository on GitHub Free/Pro/Team: the environment exists, a wait timer at
    most, and no required_reviewers rule: its jobs would run unapproved."""
    gh = Gh({"prod": ok(environment("prod", wait=5)),
             "prod-promote": ok(environment("prod-promote", {"login": "alice"}))})  # fmt: skip
    rc, _, err = run(gh, capsys)
    assert rc == 2
    assert err.startswith("::error title=approvals (prod)::environment prod has no required "
                          "reviewers (Settings > Environments > prod > Deployment protection "
                          "rules > Required reviewers)")  # fmt: skip
    assert "public repositories only" in err
    assert "prod-promote" not in err


def test_a_missing_environment_and_an_unreadable_one_are_refused(capsys) -> None:
    denied = "gh: Resource not accessible by integration (HTTP 403)"
    gh = Gh({"prod": (1, "", "gh: Not Found (HTTP 404)"), "prod-promote": (1, "", denied)})
    rc, _, err = run(gh, capsys)
    assert rc == 2
    assert "environment prod does not exist in my-org/mangaassist-serving" in err
    assert "could not read environment prod-promote" in err
    assert "permissions: actions: read" in err


def test_outside_github_actions_it_says_so(capsys) -> None:
    assert ci_approvals.main(["--environments", "prod"], {}, Gh({})) == 2
    assert "GITHUB_REPOSITORY is not set" in capsys.readouterr().err
