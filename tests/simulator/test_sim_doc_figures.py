"""docs/simulator.md's "Results on prod" table is what `make simulate ENV=prod` computes today.

The capacity refit of issue 22 moved these figures (announced-release 5,602 -> 9,755 rejected);
quoted by hand they would have stayed stale. Each row is recomputed here with the same code and
config `make simulate` uses (default assumptions, every built-in trace)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulator.assumptions import Assumptions
from simulator.run import simulate
from simulator.traces import BUILTIN, resolve
from sizing.fit import load_config
from tests.fixtures import config_fixture

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "simulator.md"
ROW = re.compile(
    r"^\| ([a-z0-9-]+) \| ([\d,]+) \| ([\d,]+)(?: \(([\d.]+)%\))? \| (\d+) \| ([\d.]+) "
    r"\| \$([\d,.]+) \|$"
)


def quoted_rows() -> dict[str, tuple[str, ...]]:
    section = DOC.read_text().split("## Results on prod", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.groups()[1:] for line in section.splitlines() if (m := ROW.match(line))}


def test_the_table_quotes_every_built_in_trace() -> None:
    assert set(quoted_rows()) == set(BUILTIN)


@pytest.mark.parametrize("trace", list(BUILTIN))
def test_each_quoted_row_is_what_the_simulator_computes(trace: str) -> None:
    cfg = load_config(config_fixture("prod"), env="prod")
    s = simulate(cfg, resolve(trace), Assumptions()).summary
    requests, rejected, pct, minutes, hours, cost = quoted_rows()[trace]
    assert int(requests.replace(",", "")) == s["requests"]
    assert int(rejected.replace(",", "")) == s["rejected_429"]
    if pct is not None:
        assert float(pct) == pytest.approx(s["rejected_pct"], abs=0.0005)
    assert int(minutes) == s["minutes_over_slo"]
    assert float(hours) == pytest.approx(s["instance_hours"], abs=0.005)
    assert float(cost.replace(",", "")) == pytest.approx(s["cost_usd"], abs=0.005)
