"""Each SLO and each shadow-comparison threshold has one definition in the product's code; a test
fails when a second appears (issue 43 item 3: the simulator had kept its own 500 ms queue-wait
SLO beside ``monitoring.slo_queue_wait_p95_ms``'s 100 ms, and ``rollout.shadow.comparison``
repeated the Lambda's thresholds, with nothing tying them).

A *definition* is a number written where a name gets its value: a class attribute or module
constant (``slo_queue_wait_ms: float = 500.0``), a parameter's default, or a keyword argument
(``Thresholds(max_latency_p95_ratio=1.3)``). Each guarded name may be defined at its home only;
anywhere else it must be read from there (``cfg.monitoring``, ``Thresholds()``'s defaults).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from lambdas.canary_controller.shadow_compare import Thresholds
from typed_config.operations import MonitoringConfig
from typed_config.shadow import ShadowStage

REPO = Path(__file__).resolve().parents[2]
#: The product's code: every floor of tests/infra/test_floors.py.
PACKAGES = ("container", "lambdas", "clients", "typed_config", "sizing", "stacks", "simulator",
            "tools")  # fmt: skip

SHADOW_COMPARE = "lambdas/canary_controller/shadow_compare.py"
#: The comparison's thresholds: every number field of the Lambda's Thresholds.
THRESHOLD_NAMES = frozenset(
    f.name for f in dataclasses.fields(Thresholds) if f.name != "content_checks"
)
#: Where a threshold may be written: the Lambda's Thresholds, and one name that is another knob
#: (the canary steps' own 5XX evidence, ``rollout.max_error_rate_increase_percent``, which the
#: shadow stage's ``comparison.max_error_rate_increase_percent`` is not).
THRESHOLD_HOMES = {
    (SHADOW_COMPARE, "Thresholds"): THRESHOLD_NAMES,
    ("typed_config/operations.py", "RolloutConfig"): frozenset({"max_error_rate_increase_percent"}),
}

#: An SLO: any name that says it is one (``slo_ttft_p50_ms``, ``SLO_TTFT_P50_MS``, ...).
SLO_NAME = re.compile(r"^_?slo_", re.IGNORECASE)
SLO_HOME = ("typed_config/operations.py", "MonitoringConfig")


@dataclasses.dataclass(frozen=True)
class Definition:
    path: str
    owner: str  # the enclosing class or function ("" at module level)
    name: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.name} in {self.owner or 'the module'}"


def _has_number(node: ast.AST | None) -> bool:
    return node is not None and any(
        isinstance(n, ast.Constant)
        and isinstance(n.value, int | float)
        and not isinstance(n.value, bool)
        for n in ast.walk(node)
    )


def _bindings(node: ast.AST) -> list[tuple[str, ast.AST | None, int]]:
    """(name, the value it gets, line) of each binding ``node`` makes."""
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [(node.target.id, node.value, node.lineno)]
    if isinstance(node, ast.Assign):
        return [(t.id, node.value, node.lineno) for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.arguments):
        positional = [*node.posonlyargs, *node.args]
        defaults = [None] * (len(positional) - len(node.defaults)) + node.defaults
        pairs = [*zip(positional, defaults, strict=True)]
        pairs += zip(node.kwonlyargs, node.kw_defaults, strict=True)
        return [(a.arg, d, a.lineno) for a, d in pairs]
    if isinstance(node, ast.keyword) and node.arg:
        return [(node.arg, node.value, node.value.lineno)]
    return []


def definitions(source: str, path: str, wanted: Callable[[str], bool]) -> list[Definition]:
    """Each place in ``source`` where a name ``wanted`` accepts gets a value holding a number."""
    found: list[Definition] = []

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            found.extend(
                Definition(path, owner, name, line)
                for name, value, line in _bindings(child)
                if wanted(name) and _has_number(value)
            )
            scope = ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
            visit(child, child.name if isinstance(child, scope) else owner)

    visit(ast.parse(source), "")
    return found


def product_sources() -> Iterator[tuple[str, str]]:
    yield "app.py", (REPO / "app.py").read_text()
    for package in PACKAGES:
        for f in sorted((REPO / package).rglob("*.py")):
            yield f.relative_to(REPO).as_posix(), f.read_text()


def strays(homes: dict[tuple[str, str], frozenset[str]], wanted: Callable[[str], bool],
           sources: Iterator[tuple[str, str]]) -> list[str]:  # fmt: skip
    return [
        str(d)
        for path, text in sources
        for d in definitions(text, path, wanted)
        if d.name not in homes.get((d.path, d.owner), frozenset())
    ]


def test_each_shadow_threshold_is_written_in_the_lambdas_thresholds_only() -> None:
    assert strays(THRESHOLD_HOMES, THRESHOLD_NAMES.__contains__, product_sources()) == []


def test_each_slo_is_written_in_the_monitoring_section_only() -> None:
    slos = {n for n in MonitoringConfig.model_fields if SLO_NAME.match(n)}
    homes = {SLO_HOME: frozenset(slos)}
    assert strays(homes, lambda name: bool(SLO_NAME.match(name)), product_sources()) == []


def test_a_second_definition_is_found() -> None:
    """The scan itself: each way of writing a second definition is caught, and reading the one
    definition is not."""
    second = """
SLO_TTFT_P50_MS = 200.0
class Assumptions:
    slo_queue_wait_ms: float = 500.0
    slo_error_rate: float | None = None
def replay(cfg, slo_error_rate=0.001, *, max_ttft_p95_ratio=1.25): ...
limits = Thresholds(max_latency_p95_ratio=1.3, length_ks_alpha=DEFAULT.length_ks_alpha)
class ShadowComparison:
    max_length_ks_statistic: Annotated[float, Field(gt=0, lt=1)] = DEFAULT.max_length_ks_statistic
"""
    names = THRESHOLD_NAMES | {"SLO_TTFT_P50_MS", "slo_queue_wait_ms", "slo_error_rate"}
    found = {(d.owner, d.name) for d in definitions(second, "simulator/x.py", names.__contains__)}
    assert found == {
        ("", "SLO_TTFT_P50_MS"),
        ("Assumptions", "slo_queue_wait_ms"),
        ("replay", "slo_error_rate"),
        ("replay", "max_ttft_p95_ratio"),
        ("", "max_latency_p95_ratio"),
    }
    home = {("simulator/x.py", "Assumptions"): frozenset({"slo_queue_wait_ms"})}
    assert len(strays(home, names.__contains__, iter([("simulator/x.py", second)]))) == 4


def test_an_unset_shadow_stage_compares_with_the_lambdas_defaults() -> None:
    assert ShadowStage().thresholds == Thresholds()
