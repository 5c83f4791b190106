"""Data capture lines as SageMaker writes them, read into the comparison's answers: whole and
streamed (server-sent events, captured BASE64) answers, errors, truncation, the default adapter,
and lines that are not data capture (a hold, naming the object and line)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from lambdas.canary_controller import capture
from lambdas.canary_controller.answer_timing_contract import FIELD

REPO = Path(__file__).resolve().parents[2]
#: The container's field as it writes it (container/serving/answer_timing.py).
TIMING = {FIELD: {"ttft_ms": 84.2, "e2e_ms": 1312.5, "queue_ms": 3.1}}


def line(request: dict, output: str | None, *, encoding: str = "JSON") -> str:
    data = {"endpointInput": {"data": json.dumps(request), "encoding": "JSON", "mode": "INPUT"}}
    if output is not None:
        text = base64.b64encode(output.encode()).decode() if encoding == "BASE64" else output
        data["endpointOutput"] = {"data": text, "encoding": encoding, "mode": "OUTPUT"}
    return json.dumps({"captureData": data, "eventMetadata": {"inferenceTime": "t"}})


def completion(
    text: str, finish: str = "stop", tokens: int | None = None, extra: dict | None = None
) -> str:
    body: dict = {"choices": [{"message": {"content": text}, "finish_reason": finish}]}
    if tokens is not None:
        body["usage"] = {"completion_tokens": tokens}
    return json.dumps({**body, **(extra or {})})


def sse(*events: dict) -> str:
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"


def chunk(content: str, finish: str | None = None, extra: dict | None = None) -> dict:
    return {"choices": [{"delta": {"content": content}, "finish_reason": finish}], **(extra or {})}


def test_a_whole_answer_names_its_adapter_length_and_finish() -> None:
    a = capture.parse_line(line({"model": "jp_style"}, completion("Vinland Saga", "length", 42)))
    assert (a.adapter, a.ok, a.length, a.truncated, a.text) == (
        "jp_style", True, 42, True, "Vinland Saga",
    )  # fmt: skip
    b = capture.parse_line(line({"messages": []}, completion("hi")))
    assert (b.adapter, b.length, b.truncated) == (capture.DEFAULT_ADAPTER_NAME, 2, False)


def test_a_streamed_answer_captured_base64_is_joined_from_its_events() -> None:
    events = [
        {"choices": [{"delta": {"content": "Try "}, "finish_reason": None}]},
        {"choices": [{"delta": {"content": "Berserk"}, "finish_reason": "length"}]},
        {"choices": [], "usage": {"completion_tokens": 7}},
    ]
    sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    a = capture.parse_line(line({"model": "manga_domain"}, sse, encoding="BASE64"))
    assert (a.ok, a.text, a.length, a.truncated) == (True, "Try Berserk", 7, True)


@pytest.mark.parametrize(
    "output",
    [None, "", json.dumps({"object": "error", "message": "boom", "code": 500}),
     json.dumps({"error": {"message": "overloaded"}}), "data: [DONE]\n\n"],
)  # fmt: skip
def test_an_error_or_no_answer_is_a_failed_answer(output: str | None) -> None:
    assert capture.parse_line(line({"model": "x"}, output)).ok is False


@pytest.mark.parametrize(
    ("text", "why"),
    [("not json", "not JSON"), (json.dumps({"captureData": 1}), "without captureData"),
     (json.dumps({"captureData": {"endpointInput": {"data": "[1]", "encoding": "JSON"}}}),
      "not a JSON object"),
     (json.dumps({"captureData": {"endpointInput": {"data": "%%", "encoding": "BASE64"}}}),
      "does not decode")],
)  # fmt: skip
def test_a_line_that_is_not_data_capture_is_named(text: str, why: str) -> None:
    body = line({"model": "x"}, completion("ok")) + "\n" + text + "\n"
    with pytest.raises(capture.CaptureError, match=rf"^s3key line 2: .*{why}"):
        capture.parse_object(body, "s3key")


def test_the_hour_partitions_of_a_window_and_the_variant_prefix() -> None:
    bucket, prefix = capture.variant_prefix("s3://b/datacapture/", "ep", "shadow")
    assert (bucket, prefix) == ("b", "datacapture/ep/shadow/")
    hours = list(capture.hour_prefixes(prefix, 1_800_000_000, 1_800_000_000 + 2 * 3600))
    assert hours == [
        "datacapture/ep/shadow/2027/01/15/08/",
        "datacapture/ep/shadow/2027/01/15/09/",
        "datacapture/ep/shadow/2027/01/15/10/",
    ]
    with pytest.raises(ValueError, match="not an s3:// URI"):
        capture.variant_prefix("https://b/x", "ep", "shadow")


def test_a_variant_is_read_newest_first_up_to_the_answers_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lambdas.canary_controller.shadow_compare import Answer

    monkeypatch.setattr(capture, "MAX_ANSWERS_PER_VARIANT", 5)
    objects = {
        f"dc/ep/shadow/2027/01/15/08/{i}.jsonl": capture.lines(
            [Answer(f"a{i}", True, length=i, text="x")] * 3
        )
        for i in range(4)
    }

    class S3:
        def get_paginator(self, name: str) -> object:
            assert name == "list_objects_v2"
            return self

        def paginate(self, Bucket: str, Prefix: str) -> list[dict]:
            return [{"Contents": [{"Key": k} for k in objects if k.startswith(Prefix)]}]

        def get_object(self, Bucket: str, Key: str) -> dict:
            import io

            return {"Body": io.BytesIO(objects[Key].encode())}

    got, read = capture.read_variant(S3(), "s3://b/dc", "ep", "shadow", 1_800_000_000,
                                     1_800_000_000)  # fmt: skip
    assert read == 2 and [a.adapter for a in got] == ["a3"] * 3 + ["a2"] * 2


def test_a_whole_answer_with_the_containers_times_fills_latency_and_ttft() -> None:
    a = capture.parse_line(line({"model": "jp_style"}, completion("Berserk", extra=TIMING)))
    assert (a.ok, a.ttft_ms, a.latency_ms, a.text) == (True, 84.2, 1312.5, "Berserk")


def test_a_streamed_answer_captured_base64_takes_its_times_from_its_last_event() -> None:
    streamed = sse(chunk("Try "), chunk("Berserk", "stop", TIMING))
    a = capture.parse_line(line({"model": "manga_domain"}, streamed, encoding="BASE64"))
    assert (a.ok, a.text, a.ttft_ms, a.latency_ms) == (True, "Try Berserk", 84.2, 1312.5)
    with_usage = sse(chunk("Hi", "stop"), {"choices": [], "usage": {"completion_tokens": 1},
                                           **TIMING})  # fmt: skip
    b = capture.parse_line(line({"model": "x"}, with_usage, encoding="BASE64"))
    assert (b.length, b.ttft_ms, b.latency_ms) == (1, 84.2, 1312.5)


@pytest.mark.parametrize(
    ("output", "encoding"),
    [(completion("Berserk"), "JSON"),  # a build from before the field
     (sse(chunk("Try "), chunk("Berserk", "stop")), "BASE64"),
     ("data: " + json.dumps(chunk("Try ")) + "\n\n", "BASE64"),  # a stream cut before its end
     (json.dumps({"object": "error", "message": "boom", "code": 500, **TIMING}), "JSON")],
)  # fmt: skip
def test_an_answer_without_times_or_a_failed_one_keeps_none(output: str, encoding: str) -> None:
    a = capture.parse_line(line({"model": "x"}, output, encoding=encoding))
    assert (a.ttft_ms, a.latency_ms) == (None, None)


@pytest.mark.parametrize(
    ("timing", "named"),
    [({"ttft_ms": "fast", "e2e_ms": 10}, "'timing.ttft_ms' must be a number"),
     ({"ttft_ms": 5}, "'timing.e2e_ms' must be a number"),
     ({"ttft_ms": 5, "e2e_ms": -1}, "'timing.e2e_ms' must not be negative"),
     ([5, 10], "'timing' must be an object")],
)  # fmt: skip
def test_a_malformed_timing_field_is_a_capture_error_naming_the_key(
    timing: object, named: str
) -> None:
    body = line({"model": "x"}, completion("ok", extra={FIELD: timing}))
    with pytest.raises(capture.CaptureError, match=rf"^s3key line 1: endpointOutput: {named}"):
        capture.parse_object(body, "s3key")


def test_the_writer_round_trips_the_times_and_leaves_them_out_when_missing() -> None:
    from lambdas.canary_controller.shadow_compare import Answer

    minute = 1_800_000_000 // 60
    timed = Answer("a", True, latency_ms=1000.0, ttft_ms=100.0, length=3, text="abc", minute=minute)
    untimed = Answer("a", True, length=3, text="abc")
    back = capture.parse_object(capture.lines([timed, untimed]), "k")
    assert back == [timed, untimed]


def test_each_answer_is_placed_in_the_minute_data_capture_stamped() -> None:
    """``eventMetadata.inferenceTime`` gives the answer's minute (its like-load class); a line
    without one is in no minute."""
    text = line({"model": "x"}, completion("ok", extra=TIMING))
    stamped = json.loads(text)
    stamped["eventMetadata"]["inferenceTime"] = "2027-01-15T08:00:59Z"
    assert capture.parse_line(json.dumps(stamped)).minute == 1_800_000_000 // 60
    assert capture.parse_line(text).minute is None  # "t" is no time


def test_the_lambdas_timing_contract_is_the_containers_file() -> None:
    """One definition: the Lambda package's module is a link to the container's (the CDK copies
    the file it points to into the asset; test_packaging imports it from there)."""
    link = REPO / "lambdas" / "canary_controller" / "answer_timing_contract.py"
    assert link.is_symlink()
    assert link.resolve() == REPO / "container" / "serving" / "answer_timing_contract.py"
