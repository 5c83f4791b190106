"""The floors of the house, held by a test: each package imports only from the floors below it,
never from one above, never by an import inside a function (which would hide an arrow), and the
floors below the CDK import no CDK. (Issue 35: ``stacks/`` had done two jobs, and a circle ran
``typed_config.loader -> sizing.capacity -> spec`` through an import inside a function.)

Floors, bottom up:
1. ``container`` (the serving image and the preparation job), ``lambdas`` (the Lambda code) and
   ``clients`` (code a caller of the endpoint runs: the Bedrock fallback route);
2. ``typed_config``: the typed config, the instance catalog, names AWS fixes;
3. ``sizing``: the sizing and planning model (pure Python);
4. ``stacks`` (CDK only) and ``simulator``;
5. ``tools`` and ``app.py``: what make targets run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FLOOR = {"container": 1, "lambdas": 1, "clients": 1, "typed_config": 2, "sizing": 3,
         "stacks": 4, "simulator": 4, "tools": 5, "app": 5}  # fmt: skip
#: Third-party packages a floor must not import (spec and sizing run in the simulator, the
#: tools and the tests without CDK, and synth must not need boto3).
FORBIDDEN = {
    "typed_config": {"aws_cdk", "constructs", "cdk_nag", "boto3", "botocore"},
    "sizing": {"aws_cdk", "constructs", "cdk_nag", "boto3", "botocore"},
    "stacks": {"boto3", "botocore"},
}


def _sources() -> list[tuple[str, Path]]:
    out = [("app", REPO / "app.py")]
    for pkg in FLOOR:
        if pkg != "app":
            out += [(pkg, f) for f in sorted((REPO / pkg).rglob("*.py"))]
    return out


def _imports(path: Path) -> list[tuple[str, int, bool, bool]]:
    """(module, line, inside a function, under ``if TYPE_CHECKING``) of each absolute import."""
    tree = ast.parse(path.read_text())
    found: list[tuple[str, int, bool, bool]] = []

    def visit(node: ast.AST, in_function: bool, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            fn = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            typed = type_only or (
                isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
            )
            if isinstance(child, ast.Import):
                found.extend([(a.name, child.lineno, in_function, type_only) for a in child.names])
            elif isinstance(child, ast.ImportFrom) and not child.level and child.module:
                found.append((child.module, child.lineno, in_function, type_only))
            visit(child, fn, typed)

    visit(tree, False, False)
    return found


def _violations() -> list[str]:
    out = []
    for pkg, path in _sources():
        rel = path.relative_to(REPO)
        for module, line, in_function, type_only in _imports(path):
            top = module.split(".")[0]
            if top in FORBIDDEN.get(pkg, ()):
                out.append(f"{rel}:{line}: {pkg} imports {module} (not on this floor)")
            if top not in FLOOR or top == pkg:
                continue
            if FLOOR[top] >= FLOOR[pkg] and not type_only:
                out.append(f"{rel}:{line}: {pkg} (floor {FLOOR[pkg]}) imports {module} "
                           f"(floor {FLOOR[top]})")  # fmt: skip
            elif in_function and pkg in {"typed_config", "sizing", "stacks"}:
                out.append(f"{rel}:{line}: an import of {module} inside a function")
    return out


def test_no_import_runs_up_a_floor_or_hides_inside_a_function() -> None:
    assert _violations() == []


@pytest.mark.parametrize(
    ("pkg", "source", "expected"),
    [
        (
            "typed_config",
            "from sizing.capacity import estimate\n",
            "typed_config (floor 2) imports sizing.capacity",
        ),
        ("sizing", "import aws_cdk\n", "sizing imports aws_cdk"),
        ("stacks", "from tools.preflight import X\n", "stacks (floor 4) imports tools.preflight"),
        (
            "sizing",
            "def f():\n    from typed_config import X\n",
            "an import of typed_config inside a function",
        ),
    ],
)
def test_the_rule_catches_each_kind_of_arrow(tmp_path, monkeypatch, pkg, source, expected) -> None:  # type: ignore[no-untyped-def]
    """The check can fail: a planted file on each floor is named."""
    bad = tmp_path / pkg / "planted.py"
    bad.parent.mkdir()
    bad.write_text(source)
    monkeypatch.setattr(f"{__name__}._sources", lambda: [(pkg, bad)], raising=True)
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    assert any(expected in v for v in _violations()), _violations()
