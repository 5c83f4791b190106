"""``python -m sizing.speed_evidence`` (make speed-evidence) on the committed evidence: every
measured point, predicted, with its error, and the plan's band."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from sizing import lora_fit, speed_calibration, speed_evidence
from sizing.speed_model import GPUS


@pytest.fixture(scope="module")
def out() -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert speed_evidence.main(["--env", "dev"]) == 0
    return buf.getvalue()


def test_prints_every_h100_figure_with_its_error(out: str) -> None:
    h100 = out.split("== the speed model against published")[0]
    for e in speed_calibration.errors():
        assert re.search(rf"{re.escape(e.name)}\s+{e.figure}\s+\S+\s+\S+\s+[+-]\d+%", h100)


def test_prints_every_published_point(out: str) -> None:
    for p in speed_evidence.load():
        assert p.id in out


def test_prints_every_lora_point_of_every_run_with_its_error(out: str) -> None:
    lora = out.split("== LoRA's added time")[1].split("== the plan's band")[0]
    rows = [ln for ln in lora.splitlines() if re.match(r"\s*(http|in-process|fp8-kv)\s+\d", ln)]
    assert len(rows) == len(lora_fit.evidence())
    assert all(re.search(r"-?\d+\.\d%", r) for r in rows)
    assert "PRODUCTION PATH" in lora and "the LoRA form's error (planned on)" in lora


def test_prints_the_combined_band_for_every_gpu(out: str) -> None:
    band = out.split("== the plan's band")[1]
    for gpu in GPUS:
        line = next(ln for ln in band.splitlines() if ln.strip().startswith(gpu))
        m = re.search(r"x([\d.]+)\.\.x([\d.]+) \(.*worst cases multiplied x([\d.]+)", line)
        assert m, line
        lo, hi, worst = map(float, m.groups())
        assert worst < lo < 1 < hi
