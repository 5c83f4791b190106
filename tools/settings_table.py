"""The table of the serving container's environment variables in docs/serving.md, generated
from the settings class (container/serving/settings.py) the way vLLM generates its env docs from
vllm/envs.py, so the two cannot drift.

``python -m tools.settings_table`` prints the table; ``--write`` puts it into docs/serving.md
between the ``settings-table`` markers; ``--check`` exits 1 when docs/serving.md holds another
table.
"""

from __future__ import annotations

import argparse
import sys

from container.serving.settings import REGISTRY
from tools import REPO_ROOT

DOC = REPO_ROOT / "docs" / "serving.md"
START, END = "<!-- settings-table:start -->", "<!-- settings-table:end -->"
REGENERATE = "python -m tools.settings_table --write"


def markdown_table() -> str:
    """One row per variable: name, default (as the environment holds it), meaning."""
    rows = ["| Variable | Default | Meaning |", "| --- | --- | --- |"]
    for s in REGISTRY.values():
        default = f"`{s.default}`" if s.default else "(empty)"
        rows.append(f"| `{s.name}` | {default} | {s.doc.replace('|', '&#124;')} |")
    return "\n".join(rows) + "\n"


def table_in(text: str) -> str:
    """What the page holds between the markers (ValueError when they are missing)."""
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise ValueError(f"{DOC.name} needs one {START} before one {END}")
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def with_table(text: str, table: str) -> str:
    table_in(text)
    head, rest = text.split(START, 1)
    return f"{head}{START}\n{table}{END}{rest.split(END, 1)[1]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="update docs/serving.md in place")
    action.add_argument("--check", action="store_true", help="exit 1 when docs/serving.md differs")
    args = parser.parse_args(argv)
    table = markdown_table()
    if args.write:
        DOC.write_text(with_table(DOC.read_text(), table))
    elif args.check and table_in(DOC.read_text()) != table:
        print(f"docs/serving.md's settings table is out of date; regenerate: {REGENERATE}")
        return 1
    elif not args.check:
        sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
