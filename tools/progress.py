"""`tools/progress.py`: the lines that say what a long `make` step is doing and how far along it is.

The first `make demo` or `make test` on a fresh machine spends minutes building virtualenvs,
installing the CDK CLI and preparing the tiny model. Each such step runs through this wrapper:

    [+0:04] .venv: pip install -r requirements.txt ...
    [+0:05]   .venv: pip install -r requirements.txt: downloading aws_cdk_lib-...whl (59.8 MB)
    [+0:06]   .venv: pip install -r requirements.txt: 10 packages resolved (last: moto==5.2.5)
    [+0:12]   .venv: pip install -r requirements.txt: installing 76 packages
    [+0:51] .venv: pip install -r requirements.txt done in 0:46

``+M:SS`` counts from the start of the outermost ``make`` (``PROGRESS_T0``, exported by the
Makefile), so nested makes share one clock. With ``--pip`` the command is pip: its own output
(one "Collecting"/"Downloading" line per package) is condensed to a line every
``--every`` packages plus one for each download of 50 MB or more, and "Installing collected
packages" is announced with the count. Any other command's output passes through unchanged. On
failure the whole captured pip output is printed, so nothing is lost.

With ``--log FILE`` the command's whole output (pip's, llmcompressor's progress bars, vLLM's
log) goes to FILE instead of the screen, and the screen gets only the lines matching ``--show``
(at most ``--show-max`` of them; the rest are counted and left in the log), pip's condensed
notes, and the end line naming the file. On failure the last :data:`FAILURE_TAIL` lines are
printed with the file's name, so the reason is on the screen and the rest one ``less`` away.

Standard library only: it runs with the system Python before any venv exists.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

#: Downloads at least this large get a line of their own (torch, vllm, the CUDA-free wheels).
BIG_DOWNLOAD_MB = 50.0
_COLLECTING = re.compile(r"^Collecting (\S+)")
_DOWNLOADING = re.compile(r"^\s*Downloading (\S+) \(([\d.]+) (kB|MB|GB)\)")
_INSTALLING = re.compile(r"^Installing collected packages: (.*)$")
_UNIT_MB = {"kB": 1 / 1024, "MB": 1.0, "GB": 1024.0}
#: With ``--log``: the lines of a failed command's output printed on the screen.
FAILURE_TAIL = 30
#: Terminal escape sequences (progress bars' colours and cursor moves): never shown.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def clock(seconds: float) -> str:
    """``M:SS`` (or ``H:MM:SS``) for a duration."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def stamp(t0: float, now: float | None = None) -> str:
    return f"[+{clock((time.time() if now is None else now) - t0)}]"


def condense_pip(lines: Iterable[str], *, every: int = 10) -> Iterator[str]:
    """The progress lines worth showing from pip's output, in order (without time stamps)."""
    collected = 0
    last = ""
    for raw in lines:
        line = raw.rstrip("\n")
        if m := _COLLECTING.match(line):
            collected += 1
            last = m.group(1)
            if collected % every == 0:
                yield f"{collected} packages resolved (last: {last})"
        elif m := _DOWNLOADING.match(line):
            size_mb = float(m.group(2)) * _UNIT_MB[m.group(3)]
            if size_mb >= BIG_DOWNLOAD_MB:
                yield f"downloading {m.group(1).rsplit('/', 1)[-1]} ({size_mb:.1f} MB)"
        elif m := _INSTALLING.match(line):
            count = len([p for p in m.group(1).split(",") if p.strip()])
            yield f"installing {count} package{'' if count == 1 else 's'}"


def run(
    phase: str,
    command: list[str],
    *,
    pip: bool,
    every: int,
    out: TextIO,
    log: Path | None = None,
    show: re.Pattern[str] | None = None,
    show_max: int = 10,
) -> int:
    """Run ``command`` between a start and an end line; see the module docstring."""
    t0 = float(os.environ.get("PROGRESS_T0") or time.time())
    started = time.time()
    print(f"{stamp(t0)} {phase} ...", file=out, flush=True)
    if not pip and log is None:
        code = subprocess.call(command)
    else:
        code, captured = _captured(phase, command, t0, pip=pip, every=every, out=out, log=log,
                                   show=show, show_max=show_max)  # fmt: skip
        if code != 0:
            tail = captured if log is None else captured[-FAILURE_TAIL:]
            out.write("".join(_ANSI.sub("", line) for line in tail))
            if log is not None:
                print(f"(the last {len(tail)} lines; all of it: {log})", file=out)
    verdict = "done" if code == 0 else f"FAILED (exit {code})"
    where = f" (log: {log})" if log is not None else ""
    print(f"{stamp(t0)} {phase} {verdict} in {clock(time.time() - started)}{where}", file=out,
          flush=True)  # fmt: skip
    return code


def _captured(
    phase: str,
    command: list[str],
    t0: float,
    *,
    pip: bool,
    every: int,
    out: TextIO,
    log: Path | None,
    show: re.Pattern[str] | None,
    show_max: int,
) -> tuple[int, list[str]]:
    """Run ``command`` with its output piped: into ``log`` when given, pip's notes and the
    ``show`` lines onto ``out``. Returns the exit code and every line it printed."""
    captured: list[str] = []
    sink = None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        sink = log.open("a")
        sink.write(f"== {time.strftime('%Y-%m-%dT%H:%M:%S')} {phase}: {' '.join(command)}\n")
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
        errors="replace",
    )  # fmt: skip
    stdout = proc.stdout
    assert stdout is not None  # stdout=PIPE
    shown = hidden = 0

    def tee() -> Iterator[str]:
        nonlocal shown, hidden
        for line in stdout:
            captured.append(line)
            if sink is not None:
                sink.write(line)
            if show is not None and show.search(text := _ANSI.sub("", line).rstrip()):
                if shown < show_max:
                    print(f"{stamp(t0)}   {text}", file=out, flush=True)
                    shown += 1
                else:
                    hidden += 1
            yield line

    try:
        if pip:
            for note in condense_pip(tee(), every=every):
                print(f"{stamp(t0)}   {phase}: {note}", file=out, flush=True)
        else:
            for _ in tee():
                pass
        code = proc.wait()
    finally:
        if sink is not None:
            sink.close()
    if hidden:
        print(f"{stamp(t0)}   ({hidden} more such lines in {log})", file=out, flush=True)
    return code, captured


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--phase", required=True, help="what the step does, as the user reads it")
    p.add_argument("--pip", action="store_true", help="the command is pip: condense its output")
    p.add_argument("--every", type=int, default=10, help="with --pip: a line per N packages")
    p.add_argument("--log", type=Path, help="append the output to this file, not the screen")
    p.add_argument("--show", help="with --log: a regular expression; matching lines are shown")
    p.add_argument("--show-max", type=int, default=10, help="with --show: at most N lines shown")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("a command after -- is required")
    if args.every < 1:
        p.error("--every must be at least 1")
    if args.show and args.log is None:
        p.error("--show needs --log (without it every line is shown)")
    show = re.compile(args.show) if args.show else None
    return run(args.phase, command, pip=args.pip, every=args.every, out=sys.stdout, log=args.log,
               show=show, show_max=args.show_max)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
