"""Operator scenarios run by ``python -m simulator scenarios`` (and `make simulate`).

Each entry: ``name -> write(cfg, assumptions, out_dir, *, charts) -> text table``; it writes
``<name>.json`` and its charts to ``out_dir``. Add a scenario by adding one line here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from simulator.assumptions import Assumptions
from simulator.scenarios import deploy, pools
from typed_config import DeploymentConfig


class Scenario(Protocol):
    def __call__(
        self, cfg: DeploymentConfig, a: Assumptions, out: Path, *, charts: bool = True
    ) -> str: ...


SCENARIOS: dict[str, Scenario] = {
    deploy.NAME: deploy.write,
    pools.NAME: pools.write,
}
