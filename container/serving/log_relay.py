"""vLLM's output, relayed line by line to the container's stdout, so a clean stop reads as one.

A drain (SIGTERM on scale-in or a deployment) used to end in what looks like a crash:

- vLLM's ``AsyncLLM output_handler`` logs ``ERROR ... EngineDeadError`` with a traceback once
  its EngineCore has exited on request. docs/serving-failures.md presents EngineDeadError as the
  mark of an engine death, so an on-call reading a scale-in's log was sent the wrong way. While
  the entrypoint drains, that block (and only a block ending in EngineDeadError) becomes one INFO
  line saying what it is. Outside a drain it passes unchanged: there it is a real death.
- At interpreter exit nanobind (Triton's Python bindings) prints ~30 lines of ``nanobind: leaked
  ... functions!``; they become one line naming what they are.
- The last of them has no newline, so the entrypoint's next log line was glued to it. Every line
  relayed here ends with one.

The relay runs in a thread of the entrypoint per vLLM process. It never raises: a line it cannot
classify is written as it came (vLLM blocks on a full pipe, so the relay must keep reading).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import IO

_OUTPUT_HANDLER_FAILED = re.compile(
    r"^(?P<who>(?:\(\S+ pid=\d+\) )?)ERROR .*?(?P<where>\[async_llm\.py:\d+\]) "
    r"AsyncLLM output_handler failed"
)
_NANOBIND = re.compile(r"^(nanobind: |See https://nanobind\.readthedocs\.io| - )")
_NANOBIND_START = "nanobind: leaked"


class LogRelay:
    """Feed it vLLM's lines (:meth:`feed`), then :meth:`finish`; it calls ``write`` with whole
    lines, each ending in a newline. ``draining`` says whether the entrypoint is stopping."""

    def __init__(self, write: Callable[[str], None], draining: Callable[[], bool]) -> None:
        self._write = write
        self._draining = draining
        self._block: list[str] = []  # an output_handler traceback held during a drain
        self._block_where = ""
        self._block_who = ""
        self._nanobind = 0  # nanobind leak lines held

    def feed(self, line: str) -> None:
        line = line.rstrip("\r\n")
        if self._block:
            if self._block_where in line and "ERROR " in line:
                self._block.append(line)
                return
            self._end_block()
        if self._nanobind:
            if _NANOBIND.match(line):
                self._nanobind += 1
                return
            self._end_nanobind()
        if line.startswith(_NANOBIND_START):
            self._nanobind = 1
            return
        match = _OUTPUT_HANDLER_FAILED.match(line)
        if match and self._draining():
            self._block = [line]
            self._block_where = match.group("where")
            self._block_who = match.group("who")
            return
        self._emit(line)

    def finish(self) -> None:
        """The stream ended: whatever is held goes out."""
        if self._block:
            self._end_block()
        if self._nanobind:
            self._end_nanobind()

    def _emit(self, line: str) -> None:
        self._write(line + "\n")

    def _end_block(self) -> None:
        block, self._block = self._block, []
        if "EngineDeadError" in block[-1]:
            self._emit(
                f"{self._block_who}INFO [serving.log_relay] drain: vLLM's output handler ended "
                f"with its engine (EngineDeadError during the drain, {len(block)} log lines: "
                "expected at shutdown, not an engine death)"
            )
            return
        for line in block:
            self._emit(line)

    def _end_nanobind(self) -> None:
        count, self._nanobind = self._nanobind, 0
        self._emit(
            f"[serving.log_relay] interpreter exit: nanobind (Triton's Python bindings) reported "
            f"leaked objects in {count} lines, left out: known exit noise, harmless"
        )


def relay(
    source: IO[bytes], write: Callable[[str], None], draining: Callable[[], bool]
) -> threading.Thread:
    """Start a daemon thread that relays ``source`` (vLLM's stdout and stderr) until it closes."""
    lines = LogRelay(write, draining)

    def run() -> None:
        try:
            for raw in iter(source.readline, b""):
                try:
                    lines.feed(raw.decode("utf-8", errors="replace"))
                except Exception:  # never stop reading: vLLM would block on a full pipe
                    write(raw.decode("utf-8", errors="replace").rstrip("\r\n") + "\n")
            lines.finish()
        finally:
            source.close()

    thread = threading.Thread(target=run, name="vllm-log", daemon=True)
    thread.start()
    return thread
