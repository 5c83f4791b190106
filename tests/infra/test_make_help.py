"""`make help` lists every public target: each rule line in Makefile and mk/*.mk carries
`## <group> | <what it does>`, and the help output shows it under its group."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RULE = re.compile(r"^([a-z][a-z0-9-]*):(?![=])(.*)$", re.M)


def public_rules() -> dict[str, str]:
    rules: dict[str, str] = {}
    for mk in [REPO / "Makefile", *sorted((REPO / "mk").glob("*.mk"))]:
        for name, rest in RULE.findall(mk.read_text()):
            rules[name] = rest
    return rules


def test_every_public_target_is_documented_and_listed_by_make_help() -> None:
    rules = public_rules()
    assert {"demo", "test", "synth", "deploy", "run-image", "canary-start"} <= rules.keys()
    # A `## ...` after a line-continuation backslash would turn "\\" into a prerequisite.
    assert not [name for name, rest in rules.items() if "\\ ##" in rest]
    undocumented = sorted(name for name, rest in rules.items() if "## " not in rest)
    assert undocumented == [], f"add `## <group> | <text>` to these rule lines: {undocumented}"
    out = subprocess.run(
        ["make", "--no-print-directory", "help"], cwd=REPO, capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip
    listed = set(re.findall(r"^  make (\S+)", out, re.M))
    assert listed == rules.keys()
    assert out.index("get started:") < out.index("deploy:") < out.index("development:")


def test_documented_rule_lines_still_resolve_their_prerequisites() -> None:
    """A help comment must not change what a rule depends on: `make -n` of every public target
    (nothing runs) finds a rule for each prerequisite."""
    targets = sorted(public_rules())
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "ENV=prod", *targets], cwd=REPO,
        capture_output=True, text=True,
    )  # fmt: skip
    assert "No rule to make target" not in done.stderr, done.stderr


def _help_groups() -> dict[str, set[str]]:
    out = subprocess.run(
        ["make", "--no-print-directory", "help"], cwd=REPO, capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip
    groups: dict[str, set[str]] = {}
    current = ""
    for line in out.splitlines():
        if re.match(r"^\S.*:$", line):
            current = line[:-1]
            groups[current] = set()
        elif m := re.match(r"^  make (\S+)", line):
            groups[current].add(m.group(1))
    return groups


def test_ci_only_targets_are_in_the_ci_group_not_deploy() -> None:
    """The targets only a workflow runs (their job outputs, runner checks) sit apart from the
    commands a person deploys with."""
    groups = _help_groups()
    ci = {"runner-disk", "ci-approvals", "ci-config", "release-record", "promote-image",
          "promote-model"}  # fmt: skip
    assert ci <= groups["ci"]
    assert not ci & groups["deploy"]
    assert {"deploy", "synth", "deploy-execution-policy"} <= groups["deploy"]


def test_distclean_removes_every_venv_node_modules_and_build_and_clean_keeps_them() -> None:
    """make clean removes caches only; make distclean also the venvs (several GiB), whichever
    mk/*.mk defines them, node_modules and build/."""

    def removed(target: str) -> set[str]:
        dry = subprocess.run(
            ["make", "-n", "--no-print-directory", target], cwd=REPO, capture_output=True,
            text=True, check=True,
        ).stdout  # fmt: skip
        (rm,) = [line for line in dry.splitlines() if line.startswith("rm -rf ")]
        return set(rm.split()[2:])

    venvs = {".venv", ".venv-serving", ".venv-quant", ".venv-checkov"}
    assert "cdk.out" in removed("clean")
    assert not (venvs | {"node_modules", "build"}) & removed("clean")
    assert venvs | {"node_modules", "build", "cdk.out"} <= removed("distclean")
