"""The hooks vLLM's own SageMaker server loads (model-hosting-container-standards).

The entrypoint points these environment variables at this module (package ``serving`` in the
image, ``container.serving`` in the repo):

- ``CUSTOM_FASTAPI_PING_HANDLER=<pkg>.hooks:ping``: 200 only when warmed up and the engine is
  healthy; otherwise 503 naming the state.
- ``CUSTOM_FASTAPI_MIDDLEWARE_THROTTLE=<pkg>.hooks:Admission`` (outermost): the route guard
  (404 for routes this endpoint does not serve) and 429 at the admission limit.
- ``CUSTOM_FASTAPI_MIDDLEWARE_PRE_POST_PROCESS=<pkg>.hooks:Shaping`` (innermost): limits (413),
  request checks, adapter, context budget, 503 + Retry-After while the engine is dead or the
  server drains; with SERVING_ADAPTERS_AT_RUNTIME, SageMaker's adapter routes too
  (runtime_adapters.py).

Starlette builds each middleware as ``cls(app)``: the settings come from the environment the
entrypoint handed to vLLM, parsed by the one registry.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from . import counters, runtime_adapters, settings, warmup
from .admission import AdmissionMiddleware, ASGIApp, Scope
from .budget import BudgetConfig, TokenCounter, counter_from_tokenizer
from .shaping import Hooks, ShapingConfig, ShapingMiddleware
from .state import State, read_state

log = logging.getLogger("serving.hooks")


@functools.lru_cache(maxsize=1)
def _settings() -> settings.Settings:
    return settings.load()


@functools.lru_cache(maxsize=1)
def _token_counter() -> TokenCounter | None:
    """The base model's tokenizer with its chat template; None disables the budget (logged)."""
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(_settings().model_path)
        return counter_from_tokenizer(tokenizer)
    except Exception:
        log.exception("context budget disabled: tokenizer or chat template unusable")
        return None


def engine_dead(scope: Scope) -> bool:
    """True when vLLM's engine client reports its EngineCore dead (the process is gone or its
    output loop failed): ``AsyncLLM.errored``, read from the app the request runs in."""
    app = scope.get("app")
    client = getattr(getattr(app, "state", None), "engine_client", None)
    return bool(client is not None and client.errored)


async def ping(raw_request: Request) -> Response:
    """SageMaker's /ping: 200 only when the entrypoint marked the server ready and the engine
    is alive and answers its health check; otherwise 503 with ``{"status": <state>}``."""
    state = read_state(_settings().serving_state_file)
    status = str(state["status"])
    if engine_dead(raw_request.scope):
        return JSONResponse(
            {"status": State.UNHEALTHY.value, "reason": "inference engine dead; restarting"},
            status_code=503,
            headers={"Connection": "close"},  # the next ping reaches the restarted server
        )
    if status == State.READY.value:
        from vllm.entrypoints.serve.instrumentator.health import health

        if (await health(raw_request)).status_code != 200:
            status = State.UNHEALTHY.value
    if status == State.READY.value:
        return JSONResponse({"status": status}, status_code=200)
    # Not ready (starting, restarting, draining): no keep-alive. After an engine restart the old
    # server retires once it holds no connection; one kept alive to it would hold that up until
    # the keep-alive timeout and then close under whatever ping is in flight. A new connection
    # per ping reaches whichever server is accepting.
    return JSONResponse({"status": status}, status_code=503, headers={"Connection": "close"})


class _DrainFlag:
    """Whether the entrypoint marked the server draining, as /ping reads it: the state file is
    re-read whenever it changed (one ``os.stat`` per request, a few microseconds; write_state
    replaces the file, so its inode and mtime change). A cached value read on a clock let
    /ping say "draining" while /invocations still answered 200 for up to the cache period,
    which is how the drain test caught it in CI."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.seen: tuple[int, int, int] | None = None
        self.value = False

    def __call__(self) -> bool:
        try:
            st = os.stat(self.path)
        except OSError:
            self.seen, self.value = None, False
            return False
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self.seen:
            self.seen = key
            self.value = read_state(self.path)["status"] == State.DRAINING.value
        return self.value


class Admission(AdmissionMiddleware):
    def __init__(self, app: ASGIApp) -> None:
        s = _settings()
        super().__init__(
            app,
            max_inflight=s.admission_max_inflight,
            retry_after_seconds=s.admission_retry_after_seconds,
            on_reject=counters.ADMISSION_REJECTIONS.inc,
            adapter_routes=s.serving_adapters_at_runtime,
        )


def _done(adapter: str, seconds: float) -> None:
    counters.ADAPTER_REQUESTS.labels(adapter).inc()
    counters.ADAPTER_LATENCY.labels(adapter).observe(seconds)


class Shaping(ShapingMiddleware):
    def __init__(self, app: ASGIApp) -> None:
        s = _settings()
        config = ShapingConfig(
            base_model=s.served_model_name,
            adapters=frozenset(s.startup_adapters()),
            default_adapter=s.default_adapter,
            budget=BudgetConfig(
                max_model_len=s.vllm_max_model_len,
                system_tokens=s.budget_system_tokens,
                retrieval_tokens=s.budget_retrieval_tokens,
                reserve_tokens=s.budget_generation_reserve_tokens,
            ),
            max_request_bytes=s.max_request_bytes,
            max_messages=s.max_messages,
            engine_retry_after_seconds=s.engine_restart_retry_after_seconds,
        )
        if s.default_adapter:
            config.resolve(s.default_adapter)  # fail at startup on a DEFAULT_ADAPTER typo
        _token_counter()  # load the tokenizer now, not on the first request
        draining = _DrainFlag(s.serving_state_file)
        hooks = Hooks(
            on_trim=counters.BUDGET_TRIMS.inc,
            on_done=_done,
            on_engine_unavailable=counters.ENGINE_UNAVAILABLE.inc,
            engine_dead=engine_dead,
            draining=draining,
        )
        control = None
        if s.serving_adapters_at_runtime:
            control = _adapter_control(s, engine_dead, draining)
        super().__init__(
            app, config=config, counter=_token_counter, hooks=hooks, adapter_control=control
        )


def _adapter_control(
    s: settings.Settings, dead: Callable[[Scope], bool], draining: Callable[[], bool]
) -> Callable[[ASGIApp], runtime_adapters.AdapterControl]:
    """SageMaker's adapter routes around vLLM's (SERVING_ADAPTERS_AT_RUNTIME), built on the
    app inside the shaping hook."""
    registry = runtime_adapters.Registry(s.runtime_adapters_file)
    room = warmup.long_prompt_bytes(
        s.vllm_max_model_len, s.budget_system_tokens, s.budget_generation_reserve_tokens
    )

    def build(inner: ASGIApp) -> runtime_adapters.AdapterControl:
        return runtime_adapters.AdapterControl(
            inner,
            registry=registry,
            long_prompt_bytes=room,
            max_request_bytes=s.max_request_bytes,
            retry_after_seconds=s.engine_restart_retry_after_seconds,
            hooks=runtime_adapters.ControlHooks(dead, draining),
        )

    return build
