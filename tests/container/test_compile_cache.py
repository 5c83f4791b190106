"""The shipped vLLM compile cache (issue 46): vLLM gets it as VLLM_CACHE_ROOT only when its
manifest names this machine's GPU architecture, vLLM version and torch version; any other cache
is ignored with a log line and never reaches vLLM. On fixture caches, no engine started: the end
state is vLLM's environment as the entrypoint builds it, and the log."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from container.serving import compile_cache, settings
from container.serving.entrypoint import vllm_env

L40S = {"gpu_arch": "8.9", "vllm_version": "0.26.0", "torch_version": "2.11.0+cu130"}


def machine(_device: str) -> dict[str, str]:
    return dict(L40S)


def shipped(tmp_path: Path, manifest: dict[str, str] | None, name: str = "cache") -> Path:
    """A cache as a release ships it: torch.compile artefacts, the model-info cache, manifest."""
    cache = tmp_path / name
    (cache / "torch_compile_cache" / "abc123" / "rank_0_0").mkdir(parents=True)
    (cache / "torch_compile_cache" / "abc123" / "rank_0_0" / "model").write_bytes(b"graph")
    (cache / "modelinfos").mkdir()
    (cache / "modelinfos" / "LlamaForCausalLM.json").write_text("{}")
    (cache / "triton" / "KERNELHASH").mkdir(parents=True)  # TRITON_CACHE_DIR's layout
    (cache / "triton" / "KERNELHASH" / "_lora_shrink_kernel.cubin").write_bytes(b"sass")
    if manifest is not None:
        (cache / compile_cache.MANIFEST).write_text(json.dumps(manifest))
    return cache


def start(tmp_path: Path, cache: Path, environ: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """What the entrypoint does before vLLM starts: check, then vLLM's environment."""
    s = settings.load(
        {"COMPILE_CACHE_PATH": str(cache), "COMPILE_CACHE_WORKDIR": str(tmp_path / "work")}
    )
    decision = compile_cache.prepare(
        s.compile_cache_path, s.compile_cache_workdir, s.serving_device, machine
    )
    return decision, vllm_env(s, decision)


def test_a_cache_made_for_this_gpu_and_versions_becomes_vllms_cache_root(tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    cache = shipped(tmp_path, L40S)
    with caplog.at_level(logging.INFO, logger="serving.compile_cache"):
        decision, env = start(tmp_path, cache)
    assert decision.use
    root = Path(env["VLLM_CACHE_ROOT"])
    assert root == tmp_path / "work" != cache  # a writable copy: the image's is read-only
    assert (root / "torch_compile_cache" / "abc123" / "rank_0_0" / "model").read_bytes() == b"graph"
    assert (root / "modelinfos" / "LlamaForCausalLM.json").is_file()
    # Triton's JIT kernels live in the same copy, where the release job put them
    assert env["TRITON_CACHE_DIR"] == str(root / compile_cache.TRITON_DIR)
    assert (root / "triton" / "KERNELHASH" / "_lora_shrink_kernel.cubin").read_bytes() == b"sass"
    assert f"compile cache {cache} matches (8.9, 0.26.0, 2.11.0+cu130)" in caplog.text


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("gpu_arch", "9.0", "gpu_arch '9.0' != this machine's '8.9'"),  # made on an H100
        ("vllm_version", "0.25.1", "vllm_version '0.25.1' != this machine's '0.26.0'"),
        ("torch_version", "2.10.0+cu128", "torch_version '2.10.0+cu128' != this machine's"),
    ],
)
def test_a_cache_for_another_gpu_or_version_is_ignored_with_a_log_line(
    tmp_path, caplog, field, value, why
) -> None:  # type: ignore[no-untyped-def]
    cache = shipped(tmp_path, {**L40S, field: value})
    with caplog.at_level(logging.INFO, logger="serving.compile_cache"):
        decision, env = start(tmp_path, cache)
    assert not decision.use and decision.root is None
    assert "VLLM_CACHE_ROOT" not in env and "TRITON_CACHE_DIR" not in env
    assert not (tmp_path / "work").exists()
    assert f"compile cache {cache} ignored: {why}" in caplog.text
    assert "VLLM_CACHE_ROOT not set" in caplog.text


def test_a_cache_without_a_manifest_is_ignored(tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    cache = shipped(tmp_path, None)
    with caplog.at_level(logging.INFO, logger="serving.compile_cache"):
        decision, env = start(tmp_path, cache)
    assert "VLLM_CACHE_ROOT" not in env and not decision.use
    assert f"compile cache {cache} ignored: no readable {compile_cache.MANIFEST}" in caplog.text


def test_a_manifest_missing_a_field_or_a_machine_it_cannot_name_is_not_a_match(tmp_path) -> None:  # type: ignore[no-untyped-def]
    partial = {k: v for k, v in L40S.items() if k != "torch_version"}
    assert not compile_cache.decide(shipped(tmp_path, partial), L40S).use
    unknown = {**L40S, "gpu_arch": "unknown"}  # no nvidia-smi: never a match, even to itself
    assert not compile_cache.decide(shipped(tmp_path, unknown, "c2"), unknown).use


def test_an_inherited_cache_root_naming_the_shipped_cache_cannot_bypass_the_check(
    tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    cache = shipped(tmp_path, {**L40S, "gpu_arch": "9.0"})
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(cache))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache / "triton"))
    _decision, env = start(tmp_path, cache)
    assert "VLLM_CACHE_ROOT" not in env and "TRITON_CACHE_DIR" not in env


def test_an_operators_own_triton_cache_stays_when_no_shipped_cache_is_used(
    tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "elsewhere"))
    _decision, env = start(tmp_path, shipped(tmp_path, {**L40S, "vllm_version": "0.25.1"}))
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "elsewhere")


def test_no_shipped_cache_is_a_cold_start_said_in_the_log(tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    with caplog.at_level(logging.INFO, logger="serving.compile_cache"):
        decision, env = start(tmp_path, tmp_path / "absent")
    assert "VLLM_CACHE_ROOT" not in env and not decision.use
    assert "no compile cache at" in caplog.text
    empty = compile_cache.prepare("", str(tmp_path / "w"), "gpu", machine)
    assert not empty.use and "COMPILE_CACHE_PATH is empty" in empty.reason


def test_the_manifest_command_names_the_machine_the_cache_was_made_on(
    tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(compile_cache, "this_machine", machine)
    cache = shipped(tmp_path, None)
    assert compile_cache.main(["manifest", str(cache)]) == 0
    written = json.loads((cache / compile_cache.MANIFEST).read_text())
    assert written == L40S
    assert compile_cache.decide(cache, L40S).use


def test_this_machine_on_cpu_reads_the_installed_versions() -> None:
    m = compile_cache.this_machine("cpu")
    assert m["gpu_arch"] == "cpu"
    assert set(m) == set(compile_cache.KEYS)


def test_a_cache_that_cannot_be_copied_is_a_cold_start_not_a_partial_cache(
    tmp_path, caplog, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    cache = shipped(tmp_path, L40S)

    def full_disk(src: Path, dst: Path) -> None:
        (Path(dst) / "modelinfos").mkdir(parents=True)  # part of it landed
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(compile_cache.shutil, "copytree", full_disk)
    with caplog.at_level(logging.INFO, logger="serving.compile_cache"):
        decision, env = start(tmp_path, cache)
    assert not decision.use and "VLLM_CACHE_ROOT" not in env
    assert not (tmp_path / "work").exists()
    assert "not copied to" in caplog.text and "No space left on device" in caplog.text
