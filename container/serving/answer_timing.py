"""Each answer's own times written into the answer, where SageMaker's data capture records them
(the field and its keys: ``answer_timing_contract.py``).

Why in the body: data capture records a request's and an answer's bodies and nothing else per
request, and the shadow comparison needs each answer's TTFT and end-to-end time per adapter
(CloudWatch's ModelLatency is per variant, and has no TTFT).

Two pieces, joined by a context variable that the shaping hook sets for each engine request:

- **The engine probe** (:func:`install_engine_probe`, called by ``vllm_server`` before vLLM
  starts): vLLM's ``AsyncLLM.generate`` wrapped so that each ``RequestOutput`` it yields is seen
  by the request's :class:`Clock`. A whole (non-streamed) answer gets one output only, at the
  end, so the first token's time comes from vLLM's own per-request statistics
  (``RequestOutput.metrics``, a ``RequestStateStats``: ``arrival_time`` + ``first_token_latency``
  is the wall-clock stamp of the engine iteration that produced the first token; the queue time
  is ``scheduled_ts - queued_ts`` on the engine core's clock). Outside a request the shaping hook
  timed (warmup's direct calls, if any) the wrapper passes outputs through untouched.
- **The answer writer** (:func:`timed_send`): wraps the ASGI ``send`` of one request.
  - A 200 ``application/json`` answer with ``choices`` is held until its body is complete
    (vLLM sends a whole answer as one body anyway) and gets one more top-level key, spliced in
    before the closing brace (the rest of the bytes stay vLLM's); ``Content-Length`` follows.
    OpenAI-compatible clients ignore a key they do not know.
  - A ``text/event-stream`` answer streams through unchanged until the engine has produced its
    last output; the events after that (the finish chunk, the usage chunk if asked for) are held
    until ``data: [DONE]`` and the last of them with ``choices`` gets the key. A client reads
    nothing new until the end, and no token waits on the engine.
  - Anything else (an error, a 4xx/5xx, an answer whose engine call did not finish) is left as
    it is: no times is what the comparison treats as missing evidence.
"""

from __future__ import annotations

import contextvars
import functools
import json
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

from .admission import Message, Send
from .answer_timing_contract import FIELD, AnswerTiming

SSE_DONE = b"data: [DONE]"
SSE_SEPARATOR = b"\n\n"


@dataclass
class Clock:
    """One request's times, from its arrival at the shaping hook (``started``: perf_counter,
    ``started_wall``: time.time, taken together)."""

    started: float
    started_wall: float
    calls: int = 0
    finished: int = 0
    #: Wall-clock stamps of each engine call's first token (vLLM's statistics).
    first_tokens: list[float] = field(default_factory=list)
    queue_seconds: list[float] = field(default_factory=list)

    @classmethod
    def start(cls) -> Clock:
        return cls(time.perf_counter(), time.time())

    def saw(self, output: Any) -> None:
        """One ``RequestOutput`` of one of this request's engine calls."""
        if not getattr(output, "finished", False):
            return
        self.finished += 1
        stats = getattr(output, "metrics", None)
        first = getattr(stats, "first_token_latency", 0.0) or 0.0
        arrival = getattr(stats, "arrival_time", 0.0) or 0.0
        if first > 0 and arrival > 0:
            self.first_tokens.append(arrival + first)
        queued = getattr(stats, "queued_ts", 0.0) or 0.0
        scheduled = getattr(stats, "scheduled_ts", 0.0) or 0.0
        if queued > 0 and scheduled >= queued:
            self.queue_seconds.append(scheduled - queued)

    @property
    def done(self) -> bool:
        """Every engine call of the request has produced its last output."""
        return self.calls > 0 and self.finished >= self.calls

    def timing(self) -> AnswerTiming | None:
        """The answer's times now (its end), or None when the engine calls did not all finish
        or left no first-token stamp."""
        if not self.done or len(self.first_tokens) < self.calls:
            return None
        ttft = max(0.0, min(self.first_tokens) - self.started_wall)
        e2e = time.perf_counter() - self.started
        queue = max(self.queue_seconds) if len(self.queue_seconds) == self.calls else None
        return AnswerTiming(
            ttft_ms=ttft * 1000,
            e2e_ms=max(e2e, ttft) * 1000,
            queue_ms=None if queue is None else queue * 1000,
        )


#: The clock of the request the current task serves (set by the shaping hook).
CURRENT: contextvars.ContextVar[Clock | None] = contextvars.ContextVar(
    "answer_timing_clock", default=None
)


def probe(generate: Callable[..., AsyncGenerator[Any, None]]) -> Any:
    """``generate`` (an engine client's) reporting each output to the current :class:`Clock`.
    Closing the wrapper closes vLLM's generator at once, so a client's disconnect still aborts
    the request in the engine."""

    @functools.wraps(generate)
    async def timed(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        clock = CURRENT.get()
        outputs = generate(*args, **kwargs)
        if clock is not None:
            clock.calls += 1
        try:
            async for output in outputs:
                if clock is not None:
                    clock.saw(output)
                yield output
        finally:
            await outputs.aclose()

    timed.answer_timing_probe = True  # type: ignore[attr-defined]
    return timed


def install_engine_probe() -> None:
    """Wrap vLLM's ``AsyncLLM.generate`` (once; the API server's engine client is an AsyncLLM)."""
    from vllm.v1.engine.async_llm import AsyncLLM

    if not getattr(AsyncLLM.generate, "answer_timing_probe", False):
        AsyncLLM.generate = probe(AsyncLLM.generate)  # type: ignore[method-assign]


def _header(message: Message, name: bytes) -> bytes:
    for key, value in message.get("headers", ()):
        if bytes(key).lower() == name:
            return bytes(value)
    return b""


def with_timing_json(body: bytes, timing: AnswerTiming) -> bytes | None:
    """``body`` (a whole JSON answer) with the field added, or None when it is not an answer
    (not a JSON object with ``choices``, or already carrying the field)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or "choices" not in parsed or FIELD in parsed:
        return None
    end = body.rstrip().rfind(b"}")
    field_json = json.dumps({FIELD: timing.as_field()}, separators=(",", ":")).encode()
    return body[:end] + b"," + field_json[1:-1] + body[end:]


def with_timing_sse(held: bytes, timing: AnswerTiming) -> bytes:
    """``held`` (a stream's last events) with the field added to the last data event with
    ``choices`` before ``[DONE]``; unchanged when there is none."""
    done = held.find(SSE_DONE)
    head, tail = (held, b"") if done < 0 else (held[:done], held[done:])
    events = head.split(SSE_SEPARATOR)
    for i in range(len(events) - 1, -1, -1):
        event = events[i].strip()
        if not event.startswith(b"data:"):
            continue
        try:
            chunk = json.loads(event.removeprefix(b"data:"))
        except ValueError:
            continue
        if isinstance(chunk, dict) and "choices" in chunk and FIELD not in chunk:
            chunk[FIELD] = timing.as_field()
            events[i] = b"data: " + json.dumps(chunk, separators=(",", ":")).encode()
            return SSE_SEPARATOR.join(events) + tail
    return held


def timed_send(send: Send, clock: Clock) -> Send:
    """``send`` writing ``clock``'s times into the answer (module docstring)."""
    state: dict[str, Any] = {"kind": None, "start": None}
    held: list[bytes] = []

    async def sender(message: Message) -> None:
        kind = state["kind"]
        if message["type"] == "http.response.start":
            content_type = _header(message, b"content-type").split(b";")[0].strip()
            if message["status"] == 200 and content_type == b"application/json":
                state["kind"], state["start"] = "json", message
                return  # held with the body
            if message["status"] == 200 and content_type == b"text/event-stream":
                state["kind"] = "sse"
            await send(message)
            return
        if kind is None or (kind == "sse" and not held and not clock.done):
            await send(message)  # not an answer, or a stream before the engine's last output
            return
        if message["type"] != "http.response.body":
            await send(message)
            return
        more = bool(message.get("more_body", False))
        held.append(bytes(message.get("body", b"")))
        if kind == "json":
            if not more:
                await _send_json(send, state["start"], b"".join(held), clock)
            return
        whole = b"".join(held)
        if SSE_DONE in whole or not more:
            timing = clock.timing()
            held.clear()
            body = whole if timing is None else with_timing_sse(whole, timing)
            await send({"type": "http.response.body", "body": body, "more_body": more})

    return sender


async def _send_json(send: Send, start: Message, body: bytes, clock: Clock) -> None:
    timing = clock.timing()
    timed = None if timing is None else with_timing_json(body, timing)
    if timed is not None:
        headers = [
            (k, v) for k, v in start.get("headers", ()) if bytes(k).lower() != b"content-length"
        ]
        start = {**start, "headers": [*headers, (b"content-length", str(len(timed)).encode())]}
        body = timed
    await send(start)
    await send({"type": "http.response.body", "body": body, "more_body": False})
