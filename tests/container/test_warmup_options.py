"""Warmup takes every request option vLLM compiles on first use (warmup.OPTION_PROBES), so an
instance that cannot serve one fails its start instead of a client's request.

The fault is injected where it happens: torch inductor looks for its C++ compiler in ``CXX``
(torch._inductor.config.cpp.cxx), so ``CXX=/no/such/g++`` with an empty inductor cache is an
image without a compiler. Before warmup took logprobs, such an instance turned ready and its
EngineCore died on the first request with ``"logprobs": true`` (InvalidCxxCompiler), again on
every such request, until the restart budget ended it."""

from __future__ import annotations

from pathlib import Path

import pytest
from _serving_support import WARMUP_FAILURE_PORT, server_env, start_server


def test_a_missing_compiler_fails_the_start_naming_the_option(
    model_dir: Path, tmp_path: Path
) -> None:
    env = server_env(
        model_dir, WARMUP_FAILURE_PORT, tmp_path / "state.json", WARMUP_NUM_REQUESTS="1",
        CXX="/no/such/g++", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
    )  # fmt: skip
    log = tmp_path / "entrypoint.log"
    with pytest.raises(RuntimeError, match="entrypoint exited 1"):
        start_server(env, WARMUP_FAILURE_PORT, log, timeout=600)
    text = log.read_text(errors="replace")
    assert "InvalidCxxCompiler" in text
    assert "warmup failed: logprobs request to 'base'" in text
    # it never said ready, and it did not go on restarting the engine for the same request
    assert "state=ready" not in text
    assert "restarting the engine" not in text
