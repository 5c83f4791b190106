"""Trace CSV input: round trip, and every malformed line named in the error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.traces import BUILTIN, TraceError, load_csv, resolve, write_csv

GOOD = (
    "timestamp,requests_per_minute\n2026-12-04T20:00:00+09:00,100\n2026-12-04T20:01:00+09:00,200\n"
)


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "trace.csv"
    p.write_text(text)
    return p


def test_good_csv_loads_in_utc(tmp_path: Path) -> None:
    tr = load_csv(write(tmp_path, GOOD))
    assert tr.start.isoformat() == "2026-12-04T11:00:00+00:00"
    assert tr.rpm.tolist() == [100.0, 200.0]
    assert tr.prompt_tokens is None


def test_builtin_round_trips_through_csv(tmp_path: Path) -> None:
    tr = BUILTIN["unannounced-3x"]
    path = tmp_path / "x.csv"
    write_csv(tr, path)
    back = load_csv(path)
    assert back.start == tr.start
    assert np.allclose(back.rpm, tr.rpm, atol=0.05)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "line 1: empty file"),
        ("time,rpm\n", "line 1: header needs"),
        ("timestamp,requests_per_minute,mean_prompt_tokens\n", "line 1: give both"),
        (GOOD + "2026-12-04T20:02:00+09:00,abc\n", "line 4: requests_per_minute 'abc' is not"),
        (GOOD + "2026-12-04T20:02:00+09:00,-5\n", "line 4: requests_per_minute '-5' must be"),
        (
            GOOD + "2026-12-04T20:04:00+09:00,5\n",
            "line 4: timestamp 2026-12-04T20:04:00+09:00 is not one minute after",
        ),
        (GOOD + "2026-12-04T20:02:00,5\n", "line 4: timestamp '2026-12-04T20:02:00' needs a UTC"),
        (GOOD + "yesterday,5\n", "line 4: timestamp 'yesterday' is not ISO 8601"),
        (GOOD + "2026-12-04T20:02:00+09:00,5,6\n", "line 4: 3 fields, the header has 2"),
        ("timestamp,requests_per_minute\n", "no data rows"),
        (
            "timestamp,requests_per_minute,mean_prompt_tokens,mean_output_tokens\n"
            "2026-12-04T20:00:00Z,5,0,180\n",
            "line 2: mean_prompt_tokens '0' must be a positive",
        ),
    ],
)
def test_bad_csv_names_the_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(TraceError) as err:
        load_csv(write(tmp_path, text))
    assert message in str(err.value)
    assert "trace.csv" in str(err.value)


def test_unknown_trace_name_lists_builtins() -> None:
    with pytest.raises(TraceError, match="normal-day"):
        resolve("no-such-trace")


def test_builtins_are_whole_minutes_with_expected_levels() -> None:
    spike = BUILTIN["unannounced-3x"].rpm
    assert spike[0] == 2000 and spike[120 + 14] == 6000 and spike.max() == 6000
    night = BUILTIN["off-peak-night"].rpm[4 * 60 : 8 * 60]  # 02:00-06:00 JST
    assert 400 < night.mean() < 650
