"""The engine dies under a ready server: /ping turns 503 (unhealthy) and the entrypoint exits
non-zero so SageMaker replaces the instance. A second, short-lived server (no warmup)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import psutil
import pytest
from _serving_support import ENGINE_DEATH_PORT, server_env, start_server


def test_engine_killed_ping_503_and_entrypoint_exits_nonzero(
    model_dir: Path, tmp_path: Path
) -> None:
    env = server_env(model_dir, ENGINE_DEATH_PORT, tmp_path / "state.json", WARMUP_NUM_REQUESTS="0")
    server = start_server(env, ENGINE_DEATH_PORT, tmp_path / "entrypoint.log")
    try:
        children = psutil.Process(server.proc.pid).children(recursive=True)
        cores = [p for p in children if "EngineCore" in " ".join(p.cmdline()) + p.name()]
        assert cores, [p.name() for p in children]
        cores[0].kill()
        seen = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and seen is None:
            try:
                r = httpx.get(f"{server.url}/ping", timeout=2)
                if r.status_code != 200:
                    seen = (r.status_code, r.json())
            except httpx.TransportError:
                pytest.fail("server went away before /ping ever reported the dead engine")
            time.sleep(0.02)
        assert seen == (503, {"status": "unhealthy"})
        code = server.proc.wait(timeout=60)
        assert code != 0
        assert "state=unhealthy" in server.log()
    finally:
        server.stop()
