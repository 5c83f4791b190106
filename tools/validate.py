"""Validate synthesized templates: cfn-lint (0 errors, 0 warnings) and checkov (0 failed checks).

cdk-nag runs inside the synth (tools/synth.py fails on any unsuppressed finding). checkov runs
from its own venv (it downgrades packages pytest needs); skips are declared on the resources
themselves as ``Metadata.checkov.skip`` entries, each with a comment giving the reason.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from cfnlint.api import ManualArgs, lint


def templates_in(out: Path) -> list[Path]:
    found = sorted(out.glob("*.template.json"))
    if not found:
        raise SystemExit(f"no templates in {out}: run make synth first")
    return found


def run_cfn_lint(templates: list[Path], region: str) -> list[str]:
    problems = []
    for path in templates:
        for match in lint(path.read_text(), config=ManualArgs(regions=[region])):
            level = match.rule.severity
            if level in ("error", "warning"):
                problems.append(f"{path.name}: {match}")
    return problems


def run_checkov(checkov: Path, templates: list[Path]) -> tuple[int, list[str]]:
    """Return (passed count, failed check descriptions)."""
    passed, failed = 0, []
    for path in templates:
        proc = subprocess.run(
            [
                str(checkov),
                "-f",
                str(path),
                "--framework",
                "cloudformation",
                "--skip-download",
                "--quiet",
                "--compact",
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if not proc.stdout.strip():
            raise SystemExit(f"checkov produced no report for {path}: {proc.stderr[-2000:]}")
        reports = json.loads(proc.stdout)
        for report in reports if isinstance(reports, list) else [reports]:
            summary = report["summary"]
            if summary["parsing_errors"] or not summary["resource_count"]:
                raise SystemExit(f"checkov could not parse {path}: {summary}")
            passed += summary["passed"]
            for chk in report["results"]["failed_checks"]:
                failed.append(
                    f"{path.name}: {chk['check_id']} {chk['check_name']} ({chk['resource']})"
                )
    return passed, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--checkov", type=Path, required=True)
    args = parser.parse_args(argv)
    templates = templates_in(args.out)
    t0 = time.monotonic()
    plan = json.loads((args.out / "plan.json").read_text())
    lint = run_cfn_lint(templates, plan["region"])
    t1 = time.monotonic()
    passed, failed = run_checkov(args.checkov, templates)
    t2 = time.monotonic()
    print(f"cfn-lint: {len(templates)} templates, {len(lint)} errors/warnings ({t1 - t0:.1f} s)")
    for p in lint:
        print(f"  {p}")
    print(f"checkov: {passed} passed, {len(failed)} failed ({t2 - t1:.1f} s)")
    for f in failed:
        print(f"  {f}")
    return 1 if lint or failed else 0


if __name__ == "__main__":
    sys.exit(main())
