"""Readiness state shared by the entrypoint (writer) and the ping hook (reader).

The entrypoint and vLLM's server are two processes; a small JSON file replaced atomically is
the whole protocol. Standard library only.
"""

from __future__ import annotations

import json
import os
import time
from enum import StrEnum
from pathlib import Path


class State(StrEnum):
    INITIALIZING = "initializing"
    WARMING_UP = "warming_up"
    READY = "ready"
    DRAINING = "draining"
    RESTARTING = "restarting"
    UNHEALTHY = "unhealthy"


def write_state(path: str | Path, state: State, **detail: object) -> None:
    """Atomically replace the state file (rename is atomic on one filesystem)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"status": state.value, "since": time.time(), **detail}))
    os.replace(tmp, target)


def read_state(path: str | Path) -> dict[str, object]:
    """The current state; a missing or unreadable file reads as initializing."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {"status": State.INITIALIZING.value}
    if not isinstance(data, dict) or data.get("status") not in {s.value for s in State}:
        return {"status": State.INITIALIZING.value}
    return data
