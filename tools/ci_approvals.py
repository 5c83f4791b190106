"""``make ci-approvals ENVIRONMENTS=prod,prod-promote``: the release refuses to start unless each
GitHub environment that gates prod has required reviewers.

Why. The release deploys prod behind GitHub environments (``prod``: the canary, ``prod-promote``:
the promotion). An environment's required reviewers exist only where GitHub offers them: "If you
are on a GitHub Free, GitHub Pro, or GitHub Team plan, other deployment protection rules, such
as a wait timer or required reviewers, are only available for public repositories" (GitHub REST
API, "REST API endpoints for deployment environments"). On a private repository on those plans,
or where nobody set them, a job that names the environment runs at once: prod would deploy on
every push to main, and nothing would say so.

How. ``gh api repos/{owner}/{repo}/environments/{name}`` ("Get an environment": its
``protection_rules``; a rule of ``type`` ``required_reviewers`` lists its ``reviewers``; the
token needs "Actions" repository permission read, the workflow's ``actions: read``). A missing
environment, one without that rule or with no reviewer in it is refused, naming the setting
(Settings > Environments > <name> > Deployment protection rules > Required reviewers); so is an
answer that cannot be read (the check must not pass by default). Writes a GitHub ``::error``
annotation and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]

SETTING = "Settings > Environments > {name} > Deployment protection rules > Required reviewers"


class NoApprovals(Exception):
    """An environment does not gate its jobs behind a reviewer; the message names the setting."""


def _gh(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["gh", *args], capture_output=True, text=True, check=False)


def reviewers(repository: str, name: str, run: Runner = _gh) -> list[str]:
    """The required reviewers of environment ``name`` (logins or team slugs); raises
    :class:`NoApprovals` when there are none or the answer cannot be read."""
    done = run(["api", f"repos/{repository}/environments/{name}"])
    setting = SETTING.format(name=name)
    if done.returncode != 0:
        text = (done.stderr or done.stdout).strip()
        if "HTTP 404" in text or "Not Found" in text:
            raise NoApprovals(
                f"environment {name} does not exist in {repository}: create it with required "
                f"reviewers ({setting}), or every job naming it runs unapproved"
            )
        raise NoApprovals(
            f"could not read environment {name} of {repository} ({text or 'gh exited '}"
            f"{'' if text else done.returncode}): the job needs `permissions: actions: read` "
            "and GH_TOKEN; the release does not start without knowing prod is gated"
        )
    try:
        env = json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise NoApprovals(f"environment {name}: gh answered no JSON ({exc})") from exc
    names: list[str] = []
    for rule in env.get("protection_rules") or []:
        if rule.get("type") != "required_reviewers":
            continue
        for r in rule.get("reviewers") or []:
            who = r.get("reviewer") or {}
            names.append(str(who.get("login") or who.get("slug") or who.get("name") or "?"))
    if not names:
        raise NoApprovals(
            f"environment {name} has no required reviewers ({setting}): its jobs would deploy "
            "prod without an approval. On GitHub Free, Pro or Team, required reviewers exist "
            "for public repositories only"
        )
    return names


def main(
    argv: list[str] | None = None,
    environ: dict[str, str] | None = None,
    run: Runner = _gh,
) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--environments", required=True, help="comma-separated names")
    args = parser.parse_args(argv)
    env = dict(os.environ if environ is None else environ)
    repository = env.get("GITHUB_REPOSITORY", "")
    if not repository:
        print("::error title=approvals::GITHUB_REPOSITORY is not set (run in GitHub Actions)",
              file=sys.stderr)  # fmt: skip
        return 2
    status = 0
    for name in [n.strip() for n in args.environments.split(",") if n.strip()]:
        try:
            who = reviewers(repository, name, run)
        except NoApprovals as exc:
            print(f"::error title=approvals ({name})::{exc}", file=sys.stderr)
            status = 2
            continue
        print(f"approvals: environment {name} requires a review by one of {', '.join(who)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
