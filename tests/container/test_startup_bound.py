"""A start that exceeds its bound fails clearly (issue 46): the entrypoint stops waiting at
STARTUP_TIMEOUT_SECONDS (the bound SageMaker's startup health check holds too), says so in its log
and its state file, never turns the ping 200, kills the engine and exits 1. No engine: a process
that never serves stands in for a vLLM still compiling."""

from __future__ import annotations

import logging
import socket
import subprocess

from container.serving import settings
from container.serving.entrypoint import Supervisor
from container.serving.state import State, read_state


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_engine_not_healthy_within_the_bound_fails_startup_naming_it(tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    state = tmp_path / "state.json"
    sup = Supervisor(
        settings.load(
            {
                "VLLM_HOST": "127.0.0.1",
                "VLLM_PORT": str(free_port()),
                "STARTUP_TIMEOUT_SECONDS": "1",
                "SERVING_STATE_FILE": str(state),
            }
        )
    )
    sup.proc = subprocess.Popen(["sleep", "60"], start_new_session=True)  # never serves /health
    with caplog.at_level(logging.INFO, logger="serving.entrypoint"):
        code = sup.wait_engine()
    assert code == 1
    assert sup.proc.poll() is not None  # the engine's process group is killed
    assert not sup.ready
    got = read_state(state)
    assert got["status"] == State.UNHEALTHY.value  # the ping hook answers 503, never 200
    assert "engine not healthy within STARTUP_TIMEOUT_SECONDS=1 s" in str(got["reason"])
    assert "startup exceeded its bound" in caplog.text
