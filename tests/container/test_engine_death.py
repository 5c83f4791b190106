"""The engine dies under a ready server with traffic flowing (a CUDA OOM kills vLLM V1's
EngineCore process; here the process is killed with SIGKILL): every request is answered 503 with
Retry-After and a reason while /ping says 503, the entrypoint restarts the engine inside the
container, and requests get 200 again. Through the restart, a client opening a new connection
for every /ping is never refused or reset. Then the whole API server is killed (vLLM exits) and
restarted too; a third death past the restart budget (ENGINE_RESTART_MAX=2) exits the entrypoint
non-zero so SageMaker replaces the instance.

A second, short-lived server (no warmup) on its own port.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import psutil
from _serving_support import ENGINE_DEATH_PORT, Server, server_env, start_server

CHAT = {"messages": [{"role": "user", "content": "Recommend a manga."}], "max_tokens": 4}


def engine_cores(server: Server) -> list[psutil.Process]:
    children = psutil.Process(server.proc.pid).children(recursive=True)
    return [p for p in children if "EngineCore" in " ".join(p.cmdline()) + p.name()]


def traffic(url: str, stop: threading.Event, seen: list[tuple[float, int, str, str]]) -> None:
    """One request after another; records (time, status, retry-after, message) or a transport
    error as status 0."""
    with httpx.Client(timeout=60) as client:
        while not stop.is_set():
            try:
                r = client.post(f"{url}/invocations", json=CHAT)
                message = (
                    r.json().get("error", {}).get("message", "") if r.status_code != 200 else ""
                )
                seen.append(
                    (time.monotonic(), r.status_code, r.headers.get("retry-after", ""), message)
                )
            except httpx.TransportError as exc:
                seen.append((time.monotonic(), 0, "", repr(exc)))
            time.sleep(0.05)


def fresh_pings(url: str, stop: threading.Event, seen: list[int | str]) -> None:
    """A new connection for every /ping (as a load balancer's health checker opens them), a few
    hundred per second across a restart: the status, or the transport error's repr."""
    while not stop.is_set():
        try:
            seen.append(httpx.get(f"{url}/ping", timeout=10).status_code)
        except httpx.TransportError as exc:
            seen.append(repr(exc))
        time.sleep(0.002)


def api_server(server: Server) -> psutil.Process:
    """The entrypoint's vLLM API server (``vllm_server``), once the old one has retired."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        procs = [
            p
            for p in psutil.Process(server.proc.pid).children()
            if "vllm_server" in " ".join(p.cmdline())
        ]
        if len(procs) == 1:
            return procs[0]
        time.sleep(0.5)
    raise AssertionError(f"not one vLLM API server: {procs}")


def wait_for_log(server: Server, text: str, timeout: float = 60) -> None:
    server.log_with(text, timeout)


def api_server_killed_port_refused_then_served(server: Server) -> None:
    """The whole API server dies (vLLM exits). No server holds the port: the entrypoint binds it
    anew, so a connection is refused at once while the new server loads (it would otherwise
    wait in the accept queue until the client timed out), and then served."""
    stop = threading.Event()
    fresh: list[int | str] = []
    pinger = threading.Thread(target=fresh_pings, args=(server.url, stop, fresh), daemon=True)
    pinger.start()
    proc = api_server(server)
    killed = len(fresh)
    proc.kill()
    try:
        wait_for_log(server, "vLLM exited with -9; restarting the engine (2/2")
        deadline = time.monotonic() + 300
        while (
            time.monotonic() < deadline
            and not (  # the pinger may not have answered yet
                fresh and fresh[-1] == 200 and any(not isinstance(f, int) for f in fresh[killed:])
            )
        ):
            time.sleep(0.2)
    finally:
        stop.set()
        pinger.join(60)
    errors = [f for f in fresh[killed:] if not isinstance(f, int)]
    assert fresh[-1] == 200, fresh[-3:]
    assert any("ConnectError" in e for e in errors), (len(fresh), errors[:3])
    assert not any("Timeout" in e for e in errors), [e for e in errors if "Timeout" in e][:3]


def test_engine_killed_mid_traffic_503s_then_restarted_then_budget_exit(
    model_dir: Path, tmp_path: Path
) -> None:
    env = server_env(model_dir, ENGINE_DEATH_PORT, tmp_path / "state.json",
                     WARMUP_NUM_REQUESTS="0", ENGINE_RESTART_MAX="2")  # fmt: skip
    server = start_server(env, ENGINE_DEATH_PORT, tmp_path / "entrypoint.log")
    stop = threading.Event()
    seen: list[tuple[float, int, str, str]] = []
    worker = threading.Thread(target=traffic, args=(server.url, stop, seen), daemon=True)
    fresh: list[int | str] = []
    pinger = threading.Thread(target=fresh_pings, args=(server.url, stop, fresh), daemon=True)
    try:
        worker.start()
        deadline = time.monotonic() + 60
        while not any(s[1] == 200 for s in seen) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert any(s[1] == 200 for s in seen), seen[-3:]
        (core,) = engine_cores(server)
        pinger.start()
        killed_at = time.monotonic()
        core.kill()

        pings: list[tuple[int, str]] = []
        kept_alive: list[tuple[int, str]] = []  # non-200 pings that let the client keep the socket
        deadline = time.monotonic() + 300
        with httpx.Client(timeout=2) as client:
            while time.monotonic() < deadline:
                r = client.get(f"{server.url}/ping")  # a TransportError fails the test
                pings.append((r.status_code, r.text))
                if r.status_code != 200 and r.headers.get("connection") != "close":
                    kept_alive.append((r.status_code, r.text))
                after = [s for s in seen if s[0] > killed_at]
                if (
                    r.status_code == 200
                    and 503 in [p[0] for p in pings]
                    and any(s[1] == 200 for s in after)
                ):
                    break
                time.sleep(0.2)
        # vLLM notices the dead process within milliseconds: a ping sent before that is a 200.
        while pings and pings[0][0] == 200:
            pings.pop(0)
        wait_for_log(server, "old vLLM server retired")  # fresh pings ran through it
        # and go on past it long enough to count (the retire can take well under a second)
        deadline = time.monotonic() + 30
        while fresh.count(200) <= 10 and time.monotonic() < deadline:
            time.sleep(0.1)
        stop.set()
        worker.join(60)
        pinger.join(60)
        after = [s for s in seen if s[0] > killed_at]
        statuses = [s[1] for s in after]
        assert pings[0][0] == 503 and pings[-1][0] == 200, pings[:3] + pings[-3:]
        assert "inference engine dead" in pings[0][1] or "restarting" in pings[0][1]
        # No keep-alive while not ready: a connection held to the old server would be reset
        # when the entrypoint stops it.
        assert kept_alive == [], kept_alive[:3]
        # Not one fresh connection refused or reset while one server replaced the other.
        errors = [f for f in fresh if not isinstance(f, int)]
        print(f"fresh pings through the restart: {len(fresh)}, 200: {fresh.count(200)}, "
              f"503: {fresh.count(503)}, errors: {len(errors)}")  # fmt: skip
        assert fresh.count(200) > 10 and 503 in fresh and errors == [], (len(fresh), errors[:3])
        assert 503 in statuses and statuses[-1] == 200, statuses
        timeline = [(round(s[0] - killed_at, 2), s[1], s[3][:80]) for s in after if s[1] != 503]
        assert set(statuses) <= {200, 503}, timeline[:5]
        while statuses and statuses[0] == 200:  # answered before vLLM noticed the death
            statuses.pop(0)
        first_ok = statuses.index(200)
        assert first_ok > 0 and all(c == 503 for c in statuses[:first_ok])
        for _, status, retry_after, message in after:
            if status == 503:
                assert retry_after == "30" and "engine" in message and "restarting" in message
        log = server.log()
        assert "restarting the engine (1/2" in log and "phase=engine_restart" in log
        assert server.proc.poll() is None  # restarted inside the container, not exited
        emf = [json.loads(line) for line in log.splitlines() if line.startswith('{"_aws"')]
        deadline = time.monotonic() + 30
        while not any(d.get("EngineRestarts") for d in emf) and time.monotonic() < deadline:
            time.sleep(1)
            emf = [json.loads(ln) for ln in server.log().splitlines() if ln.startswith('{"_aws"')]
        assert any(d.get("EngineRestarts") == 1 for d in emf)

        api_server_killed_port_refused_then_served(server)

        # A third death within the window is past the budget: exit non-zero, state unhealthy.
        (core,) = engine_cores(server)
        core.kill()
        assert server.proc.wait(timeout=120) != 0
        assert "restart budget spent (2 restarts within 900s)" in server.log()
        assert json.loads((tmp_path / "state.json").read_text())["status"] == "unhealthy"
    finally:
        stop.set()
        server.stop()
