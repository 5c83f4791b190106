"""container/demo.py is never silent while the engine loads: it echoes the startup phases."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from container import demo


def test_the_demo_echoes_startup_phases_and_says_what_is_still_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The entrypoint logs a phase when it ends; the demo shows each one and a heartbeat."""
    monkeypatch.setattr(demo, "HEARTBEAT_SECONDS", 0.2)
    log = tmp_path / "entrypoint.log"
    log.write_text("INFO phase=validate duration=0.31s adapters=3\nINFO loading wei")
    stop = threading.Event()
    echo = threading.Thread(target=demo.echo_startup, args=(log, stop))
    echo.start()
    # the events, not a sleep: the phase echoed and two heartbeats after it (two looks at the
    # log, the second finding the phase already echoed); the deadline only bounds the wait
    text, deadline = "", time.monotonic() + 60
    while text.count("still starting") < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
        text += capsys.readouterr().out
    stop.set()
    echo.join()
    out = (text + capsys.readouterr().out).splitlines()
    assert out[0] == "demo:   startup validate duration=0.31s adapters=3"
    assert out.count("demo:   startup validate duration=0.31s adapters=3") == 1
    assert any(ln.startswith("demo:   still starting (vLLM loading the engine)") for ln in out)
