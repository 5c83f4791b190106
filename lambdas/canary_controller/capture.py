"""The shadow stage's evidence: both variants' answers as SageMaker data capture wrote them to S3,
read into ``shadow_compare.Answer``.

Where data capture writes (SageMaker developer guide, "Data capture",
https://docs.aws.amazon.com/sagemaker/latest/dg/model-monitor-data-capture.html, and its
"View data capture" page): JSON Lines objects under
``<DestinationS3Uri>/<endpoint>/<variant>/yyyy/mm/dd/hh/<file>.jsonl``, one line per captured
request: ``captureData.endpointInput`` and ``captureData.endpointOutput``, each with ``data``,
``encoding`` (``JSON`` for a content type listed in ``CaptureContentTypeHeader.JsonContentTypes``,
else ``BASE64``) and ``observedContentType``; ``eventMetadata.inferenceTime``. The data is
encrypted with the KMS key the endpoint config names (``DataCaptureConfig.KmsKeyId``), so the
reader needs ``kms:Decrypt`` on it as well as ``s3:GetObject``.

What one line becomes (the request and answer formats are the container's: vLLM's
OpenAI-compatible chat completions, whole or streamed as server-sent events):

- ``adapter``: the request body's ``model`` (the container's shaping hook routes on it; a request
  without one goes to the default adapter, named here as :data:`DEFAULT_ADAPTER_NAME`);
- ``ok``: an answer with ``choices``; an error object (``{"error": ...}`` or ``"object":
  "error"``), or no output captured, is a failed answer;
- ``length``: ``usage.completion_tokens`` when the answer carries it, else the text's characters
  (the same on both sides: both variants run the same container contract);
- ``truncated``: finish reason ``length`` (cut off by max_tokens);
- ``minute``: the epoch minute of ``eventMetadata.inferenceTime`` (``capture_minute``), which
  places the answer's times in a like-load class (``shadow_compare``); None without one;
- ``latency_ms`` / ``ttft_ms``: the answer's own end-to-end time and time to first token, from
  the ``timing`` field the serving container writes into the answer (``answer_timing_contract``:
  a whole answer's top-level key, a stream's last data event before ``[DONE]``). Data capture
  records no times of its own, so an answer without the field (a build from before it, an error,
  a stream cut before its end) keeps None: the comparison counts it as no evidence on latency.
  A field that is there but malformed is a :class:`CaptureError` naming the key.

A line that is not what data capture writes (not JSON, no ``captureData``, an input that is not
a JSON object) raises :class:`CaptureError`: the comparison cannot read its data, which holds the
stage (never a pass).

The stage's own probes (``probes``) are captured like any request: :func:`probe_id` finds them
(``eventMetadata.inferenceId``, the ``inferenceId`` data capture records for a caller's
InferenceId: developer guide, "Ingest Ground Truth labels and merge them with predictions",
https://docs.aws.amazon.com/sagemaker/latest/dg/model-monitor-model-quality-merge.html; or the
id in the captured request body), :func:`probes_found` lists them for the ground check, and the
comparison leaves them out (:func:`parse_object`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .answer_timing_contract import FIELD as TIMING_FIELD
from .answer_timing_contract import AnswerTiming, TimingError
from .answer_timing_contract import read as read_timing
from .shadow_compare import Answer, capture_minute

#: The adapter of a request whose body names none (the container's DEFAULT_ADAPTER answers it).
DEFAULT_ADAPTER_NAME = "(default)"
#: How every probe's InferenceId begins (``probes.probe_ids``).
PROBE_PREFIX = "shadow-stage-probe-"
#: The most objects one comparison reads per variant: a bound on the tick's time (the Lambda has
#: 60 s); a stage with more captured than this compares the newest (its figures say how many).
MAX_OBJECTS_PER_VARIANT = 400
#: The most answers one comparison keeps per variant, newest first: a bound on the Lambda's
#: memory (the primary's capture holds every sampled request of the whole fleet; at about 1 KB an
#: answer this is about 20 MB). A two-sample test at this size already sees a length shift far
#: below the configured KS distance.
MAX_ANSWERS_PER_VARIANT = 20_000


class CaptureError(ValueError):
    """Captured data that cannot be read as data capture writes it."""


def _decoded(part: dict[str, Any], where: str) -> str:
    data = part.get("data")
    if not isinstance(data, str):
        raise CaptureError(f"{where}: no 'data' string")
    if part.get("encoding") == "BASE64":
        try:
            return base64.b64decode(data, validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError) as exc:
            raise CaptureError(f"{where}: BASE64 data that does not decode ({exc})") from None
    return data


def _stream_events(text: str) -> list[dict[str, Any]]:
    """The JSON events of a server-sent-event answer (``data: {...}`` lines; ``[DONE]`` ends)."""
    events = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("data:"):
            continue
        payload = line.removeprefix("data:").strip()
        if payload == "[DONE]":
            break
        try:
            events.append(json.loads(payload))
        except json.JSONDecodeError:
            continue  # a partial last event (a cut stream) is not an answer's content
    return events


@dataclass(frozen=True)
class _Read:
    """What one captured answer says (:func:`_answer_of`)."""

    ok: bool
    text: str = ""
    tokens: int | None = None
    truncated: bool = False
    timing: AnswerTiming | None = None


FAILED = _Read(ok=False)


def _timing_of(events: list[Any]) -> AnswerTiming | None:
    """The times of the last event that carries them (a whole answer is one event)."""
    for event in reversed(events):
        if isinstance(event, dict) and TIMING_FIELD in event:
            try:
                return read_timing(event)
            except TimingError as exc:
                raise CaptureError(f"endpointOutput: {exc}") from None
    return None


def _answer_of(output: str | None) -> _Read:
    """What one captured answer says: ok, text, completion tokens, truncated, times."""
    if output is None or not output.strip():
        return FAILED
    body: Any
    try:
        body = json.loads(output)
        events = [body]
    except json.JSONDecodeError:
        events = _stream_events(output)
        if not events:
            return FAILED
        body = events[-1]
    if not isinstance(body, dict) or "error" in body or body.get("object") == "error":
        return FAILED
    texts, finish, tokens = [], None, None
    for event in events:
        if not isinstance(event, dict):
            continue
        for choice in event.get("choices") or []:
            piece = (choice.get("message") or choice.get("delta") or {}).get("content")
            if isinstance(piece, str):
                texts.append(piece)
            finish = choice.get("finish_reason") or finish
        usage = event.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            tokens = usage["completion_tokens"]
    if finish is None and not texts:
        return FAILED
    return _Read(True, "".join(texts), tokens, finish == "length", _timing_of(events))


def parse_line(line: str) -> Answer:
    """One data capture line as an :class:`Answer` (module docstring)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CaptureError(f"a line that is not JSON ({exc.msg})") from None
    capture = record.get("captureData") if isinstance(record, dict) else None
    if not isinstance(capture, dict) or not isinstance(capture.get("endpointInput"), dict):
        raise CaptureError("a line without captureData.endpointInput")
    try:
        request = json.loads(_decoded(capture["endpointInput"], "endpointInput"))
    except json.JSONDecodeError:
        raise CaptureError("endpointInput is not a JSON request body") from None
    if not isinstance(request, dict):
        raise CaptureError("endpointInput is not a JSON object")
    adapter = request.get("model") or DEFAULT_ADAPTER_NAME
    out = capture.get("endpointOutput")
    output = _decoded(out, "endpointOutput") if isinstance(out, dict) else None
    got = _answer_of(output)
    metadata = record.get("eventMetadata")
    at = metadata.get("inferenceTime") if isinstance(metadata, dict) else None
    length = got.tokens if got.tokens is not None else len(got.text)
    return Answer(
        adapter=str(adapter),
        ok=got.ok,
        latency_ms=got.timing.e2e_ms if got.timing else None,
        ttft_ms=got.timing.ttft_ms if got.timing else None,
        length=length,
        truncated=got.truncated,
        text=got.text,
        minute=capture_minute(at) if isinstance(at, str) else None,
    )


def probe_id(line: str) -> str | None:
    """The stage probe one captured line records (module docstring), else None: the
    ``inferenceId`` of its ``eventMetadata``, or the id in its request body. A line without the
    probe prefix is not parsed at all."""
    if PROBE_PREFIX not in line:
        return None
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    metadata = record.get("eventMetadata") if isinstance(record, dict) else None
    marked = metadata.get("inferenceId") if isinstance(metadata, dict) else None
    if isinstance(marked, str) and marked.startswith(PROBE_PREFIX):
        return marked
    capture = record.get("captureData") if isinstance(record, dict) else None
    part = capture.get("endpointInput") if isinstance(capture, dict) else None
    try:
        text = _decoded(part, "endpointInput") if isinstance(part, dict) else ""
    except CaptureError:
        return None
    at = text.find(PROBE_PREFIX)
    if at < 0:
        return None
    end = at + len(PROBE_PREFIX)
    while end < len(text) and (text[end].isalnum() or text[end] == "-"):
        end += 1
    return text[at:end]


def parse_object(body: str, key: str) -> list[Answer]:
    """Every line of one captured object but the stage's probes (:func:`probe_id`); an
    unreadable line names the object and the line."""
    answers = []
    for number, line in enumerate(body.splitlines(), start=1):
        if not line.strip() or probe_id(line) is not None:
            continue
        try:
            answers.append(parse_line(line))
        except CaptureError as exc:
            raise CaptureError(f"{key} line {number}: {exc}") from None
    return answers


def hour_prefixes(prefix: str, start: int, end: int) -> Iterator[str]:
    """``<prefix>yyyy/mm/dd/hh/`` for every hour from ``start`` to ``end`` (epoch seconds, UTC)."""
    hour = datetime.fromtimestamp(start, UTC).replace(minute=0, second=0, microsecond=0)
    last = datetime.fromtimestamp(end, UTC)
    while hour <= last:
        yield f"{prefix}{hour:%Y/%m/%d/%H}/"
        hour += timedelta(hours=1)


def variant_prefix(destination: str, endpoint: str, variant: str) -> tuple[str, str]:
    """(bucket, key prefix) of one variant's captured objects under ``destination``
    (``s3://bucket/prefix``)."""
    if not destination.startswith("s3://"):
        raise ValueError(f"capture destination {destination!r} is not an s3:// URI")
    bucket, _, prefix = destination.removeprefix("s3://").partition("/")
    prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
    return bucket, f"{prefix}{endpoint}/{variant}/"


def read_variant(
    s3: Any, destination: str, endpoint: str, variant: str, start: int, end: int
) -> tuple[list[Answer], int]:
    """The answers one variant's captured objects hold for ``[start, end]`` (hour partitions), and
    how many objects were read. S3 errors raise (the caller holds the stage); so does a line
    :func:`parse_line` cannot read."""
    bucket, prefix = variant_prefix(destination, endpoint, variant)
    keys = sorted(o["Key"] for o in _listed(s3, bucket, prefix, start, end))
    keys = keys[-MAX_OBJECTS_PER_VARIANT:]
    answers: list[Answer] = []
    read = 0
    for key in reversed(keys):  # newest first, until the answers' bound
        if len(answers) >= MAX_ANSWERS_PER_VARIANT:
            break
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode("utf-8")
        answers.extend(parse_object(body, key))
        read += 1
    return answers[:MAX_ANSWERS_PER_VARIANT], read


def objects_written(
    s3: Any, destination: str, endpoint: str, variant: str, start: int, end: int
) -> int:
    """How many capture objects of ``variant`` the hour partitions of ``[start, end]`` hold,
    without reading them (the shadow stage's ground check: an object written earlier in
    ``start``'s hour counts too). S3 errors raise."""
    bucket, prefix = variant_prefix(destination, endpoint, variant)
    return sum(1 for _ in _listed(s3, bucket, prefix, start, end))


def probes_found(
    s3: Any, destination: str, endpoint: str, variant: str, start: int, end: int,
    wanted: set[str],
) -> tuple[set[str], int]:  # fmt: skip
    """Which of the probes ``wanted`` the captured objects of ``variant`` in the hour partitions
    of ``[start, end]`` record, and how many objects were read: those last modified at ``start``
    or later (the probes were sent then), oldest first, at most :data:`MAX_OBJECTS_PER_VARIANT`,
    stopping once all are found. S3 errors raise."""
    bucket, prefix = variant_prefix(destination, endpoint, variant)
    listed = [o for o in _listed(s3, bucket, prefix, start, end)
              if o["LastModified"].timestamp() >= start]  # fmt: skip
    listed.sort(key=lambda o: (o["LastModified"], o["Key"]))
    found: set[str] = set()
    read = 0
    for o in listed[:MAX_OBJECTS_PER_VARIANT]:
        if found >= wanted:
            break
        text = s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read().decode("utf-8")
        read += 1
        for line in text.splitlines():
            marked = probe_id(line)
            if marked in wanted:
                found.add(marked)
    return found, read


def _listed(s3: Any, bucket: str, prefix: str, start: int, end: int) -> Iterator[dict[str, Any]]:
    for hour in hour_prefixes(prefix, start, end):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=hour):
            yield from page.get("Contents", [])


def capture_line(
    request: dict[str, Any], response: dict[str, Any] | str | None, *, at: str = "",
    inference_id: str | None = None,
) -> str:  # fmt: skip
    """One line as data capture writes it (JSON encoding): the tests' and the rehearsal's writer,
    the inverse of :func:`parse_line`."""
    capture: dict[str, Any] = {
        "endpointInput": {
            "observedContentType": "application/json",
            "mode": "INPUT",
            "data": json.dumps(request),
            "encoding": "JSON",
        }
    }
    if response is not None:
        capture["endpointOutput"] = {
            "observedContentType": "application/json",
            "mode": "OUTPUT",
            "data": response if isinstance(response, str) else json.dumps(response),
            "encoding": "JSON",
        }
    metadata = {"inferenceTime": at, **({"inferenceId": inference_id} if inference_id else {})}
    return json.dumps({"captureData": capture, "eventMetadata": metadata, "eventVersion": "0"})


def lines(answers: Iterable[Answer]) -> str:
    """Captured lines for ``answers`` (a chat completion each, with the container's ``timing``
    field when the answer has both times, captured in the answer's ``minute``): the tests'
    data."""
    out = []
    for a in answers:
        response: dict[str, Any] = (
            {
                "object": "chat.completion",
                "choices": [
                    {
                        "message": {"role": "assistant", "content": a.text},
                        "finish_reason": "length" if a.truncated else "stop",
                    }
                ],
                "usage": {"completion_tokens": a.length},
            }
            if a.ok
            else {"object": "error", "message": "engine error", "code": 500}
        )
        if a.ok and a.latency_ms is not None and a.ttft_ms is not None:
            response[TIMING_FIELD] = AnswerTiming(a.ttft_ms, a.latency_ms).as_field()
        at = (
            ""
            if a.minute is None
            else f"{datetime.fromtimestamp(a.minute * 60, UTC):%Y-%m-%dT%H:%M:%SZ}"
        )
        out.append(capture_line({"model": a.adapter, "messages": []}, response, at=at))
    return "\n".join(out) + "\n"
