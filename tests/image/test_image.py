"""The built serving image (``make test-image`` sets SERVING_TEST_IMAGE and the engine commands):
SageMaker's contract in its config, the runtime user's rights, and the layer promise of the
Dockerfile (a change to container/serving/ alone rebuilds only the small code layers).

The serving behaviour itself is tests/container/test_e2e.py, run against the same image.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tools.container_run import engine, run_command

REPO = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("SERVING_TEST_IMAGE", "")
REPORT = REPO / "build" / "image" / "layer-report.json"
RUNTIME_UID = 10001
MODEL_LAYER_MARK = "/opt/ml/model"  # COPY --from=model-prep /opt/ml/model /opt/ml/model
CODE_LAYER_MARK = "/opt/app/serving"  # COPY serving/ /opt/app/serving/

pytestmark = pytest.mark.skipif(not IMAGE, reason="SERVING_TEST_IMAGE unset (make test-image)")


def inspect(image: str) -> dict[str, Any]:
    out = subprocess.run([*engine(), "image", "inspect", image], check=True,
                         capture_output=True, text=True).stdout  # fmt: skip
    result: dict[str, Any] = json.loads(out)[0]
    return result


def layers(image: str) -> list[dict[str, Any]]:
    """The image's filesystem layers, oldest first: digest, size, the instruction that made it."""
    info = inspect(image)
    digests = info["RootFS"]["Layers"]
    hist = subprocess.run([*engine(), "history", "--format", "json", "--no-trunc", image],
                          check=True, capture_output=True, text=True).stdout  # fmt: skip
    sizes = [int(h["size"]) for h in reversed(json.loads(hist))]  # `history` lists newest first
    assert len(sizes) == len(info["History"]), (len(sizes), len(info["History"]))
    made = [
        {"size": size, "created_by": h.get("created_by", "")}
        for h, size in zip(info["History"], sizes, strict=True)
        if not h.get("empty_layer")
    ]
    assert len(made) == len(digests), (len(made), len(digests))
    return [{"digest": d, **m} for d, m in zip(digests, made, strict=True)]


def index_of(stack: list[dict[str, Any]], mark: str) -> int:
    hits = [i for i, layer in enumerate(stack) if mark in layer["created_by"]]
    assert hits, (
        f"no layer made by an instruction naming {mark}: {[x['created_by'] for x in stack]}"
    )
    return hits[-1]


def test_config_is_sagemakers_contract() -> None:
    info = inspect(IMAGE)
    config = info["Config"]
    assert config["Labels"]["com.amazonaws.sagemaker.capabilities.accept-bind-to-port"] == "true"
    assert config["Entrypoint"] == ["python3", "-m", "serving.entrypoint"]
    assert config["Cmd"] == ["serve"]
    assert config["User"] == f"{RUNTIME_UID}:{RUNTIME_UID}"
    assert "8080/tcp" in config["ExposedPorts"]
    healthcheck = config.get("Healthcheck") or info["Healthcheck"]  # docker | podman
    assert "/ping" in " ".join(healthcheck["Test"])
    env = dict(kv.split("=", 1) for kv in config["Env"])
    assert env["HF_HUB_OFFLINE"] == "1"


PROBE = """
import json, os, socket
def attempt(path, mode):
    try:
        with open(path, mode) as f:
            f.write("x")
        return "written"
    except PermissionError:
        return "denied"
paths = {
    "/opt/ml/model/manifest.json": "a", "/opt/ml/model/base/config.json": "a",
    "/opt/ml/model/base/new.bin": "w", "/opt/ml/model/lora/manga_domain/adapter_config.json": "a",
    "/opt/app/serving/hooks.py": "a", "/opt/app/serving/new.py": "w",
    "/var/run/serving/probe": "w",
}
owners = {p: os.stat(p).st_uid for p in ("/opt/ml/model", "/opt/ml/model/base/config.json",
                                          "/opt/app/serving", "/opt/app/serving/hooks.py")}
def reach(host):
    try:
        socket.create_connection((host, 443), timeout=3).close()
        return "reached"
    except OSError as exc:
        return type(exc).__name__
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "owners": owners,
                  "writes": {p: attempt(p, m) for p, m in paths.items()},
                  "interfaces": sorted(os.listdir("/sys/class/net")),
                  "outbound": {h: reach(h) for h in ("151.101.0.223", "169.254.169.254")}}))
"""


def test_runs_as_non_root_cannot_write_model_or_code_and_has_no_network() -> None:
    """The container as run-image runs it (tools.container_run's command), probed from inside."""
    cmd = run_command(IMAGE, name="serving-image-probe", entrypoint=["python3", "-c", PROBE])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert (seen["uid"], seen["gid"]) == (RUNTIME_UID, RUNTIME_UID)
    assert set(seen["owners"].values()) == {0}, seen["owners"]
    writes = seen["writes"]
    assert writes.pop("/var/run/serving/probe") == "written"  # the one place it may write
    assert set(writes.values()) == {"denied"}, writes
    assert seen["interfaces"] == ["lo"]
    assert "reached" not in seen["outbound"].values(), seen["outbound"]


def test_model_layer_precedes_the_code_layers() -> None:
    stack = layers(IMAGE)
    model, code = index_of(stack, MODEL_LAYER_MARK + " "), index_of(stack, CODE_LAYER_MARK)
    assert model < code
    assert all(MODEL_LAYER_MARK + " " not in layer["created_by"] for layer in stack[model + 1 :])


def test_code_change_rebuilds_only_the_code_layers(tmp_path: Path) -> None:
    """Build a copy of container/ whose serving/ differs by one comment line: every layer up to
    and including the model layer must be reused (same digests); only the code layers differ."""
    context = tmp_path / "container"
    shutil.copytree(REPO / "container", context, symlinks=True)  # copy2: times kept
    hooks = context / "serving" / "hooks.py"
    hooks.write_text(hooks.read_text() + "# a code-only change\n")
    probe = f"{IMAGE}-code-change"
    build = shlex.split(os.environ["IMAGE_BUILD_CMD"])
    cmd = [*build, *shlex.split(os.environ.get("IMAGE_BUILD_ARGS", "")), "-t", probe, str(context)]
    started = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    rebuild_seconds = round(time.monotonic() - started, 1)
    try:
        before, after = layers(IMAGE), layers(probe)
    finally:
        subprocess.run([*engine(), "rmi", probe], capture_output=True)
    model = index_of(before, MODEL_LAYER_MARK + " ")
    shared = next(
        (
            i
            for i, (a, b) in enumerate(zip(before, after, strict=False))
            if a["digest"] != b["digest"]
        ),
        min(len(before), len(after)),
    )
    changed = after[shared:]
    report = {
        "image": IMAGE,
        "image_bytes": sum(x["size"] for x in before),
        "model_layer_bytes": before[model]["size"],
        "code_layers": [
            {"bytes": x["size"], "created_by": x["created_by"][-120:]} for x in changed
        ],
        "code_layers_bytes": sum(x["size"] for x in changed),
        "layers_reused": shared,
        "layers_total": len(after),
        "rebuild_seconds_after_code_change": rebuild_seconds,
    }
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    assert shared > model, report  # the model layer (and all below it) reused
    assert changed and all(CODE_LAYER_MARK in x["created_by"] for x in changed[:1]), report
    assert report["code_layers_bytes"] < 5 * 1024 * 1024, report  # small: code, not weights


def release_args() -> tuple[list[str], Path, str]:
    """IMAGE_BUILD_ARGS without the model-artifact context, the release's directory, version."""
    args = shlex.split(os.environ.get("IMAGE_BUILD_ARGS", ""))
    i = args.index("--build-context")
    name, _, directory = args[i + 1].partition("=")
    assert name == "model-artifact", args
    version = next(a.split("=", 1)[1] for a in args if a.startswith("MODEL_ARTIFACT_VERSION="))
    return args[:i] + args[i + 2 :], Path(directory), version


@pytest.mark.parametrize(
    ("tamper", "named"),
    [
        (lambda root: (root / "base" / "config.json").write_text("{}"),
         "base/config.json: sha256 differs from the manifest"),
        (lambda root: (root / "lora" / "planted.py").write_text("import os"),
         "lora/planted.py: not in the manifest"),
    ],
    ids=["changed", "extra"],
)  # fmt: skip
def test_the_build_refuses_a_release_that_does_not_verify(tmp_path: Path, tamper, named) -> None:
    """The model stage checks the release it was handed, so a copy altered after the fetch (or
    a context pointing at the wrong directory) fails `docker build` naming the file."""
    args, directory, version = release_args()
    copy = tmp_path / "release"
    shutil.copytree(directory, copy)
    tamper(copy)
    build = shlex.split(os.environ["IMAGE_BUILD_CMD"])
    cmd = [*build, *args, "--build-context", f"model-artifact={copy}", "--target", "model",
           "-t", f"{IMAGE}-tampered", str(REPO / "container")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    subprocess.run([*engine(), "rmi", f"{IMAGE}-tampered"], capture_output=True)
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert f"model artifact {version} does not verify" in out and named in out, out[-3000:]


def test_the_build_refuses_a_release_of_another_version(tmp_path: Path) -> None:
    args, directory, version = release_args()
    other = "m-" + "0" * 16
    args = [a if not a.startswith("MODEL_ARTIFACT_VERSION=") else f"MODEL_ARTIFACT_VERSION={other}"
            for a in args]  # fmt: skip
    build = shlex.split(os.environ["IMAGE_BUILD_CMD"])
    cmd = [*build, *args, "--build-context", f"model-artifact={directory}", "--target", "model",
           "-t", f"{IMAGE}-other", str(REPO / "container")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    subprocess.run([*engine(), "rmi", f"{IMAGE}-other"], capture_output=True)
    assert done.returncode != 0
    assert f"manifest is version '{version}', not '{other}'" in done.stdout + done.stderr


def test_the_committed_image_size_is_what_this_build_measures() -> None:
    """sizing.scale_out_time sizes the GPU image from docs/measurements/image_size.json (the
    product's layers above the base); a Dockerfile change that moves them by more than a quarter
    must re-record it (`make image-size`), or the plan's pull time would be stale."""
    from tools.image_size import OUT, measure

    committed = json.loads(OUT.read_text())
    now = measure(engine(), IMAGE, committed["base"])
    code_now = now["product_bytes"] - now["model_layer_bytes"]
    code_then = committed["product_bytes"] - committed["model_layer_bytes"]
    assert now["model_layer_bytes"] > 0
    assert 0.75 * code_then <= code_now <= 1.25 * code_then, (code_now, code_then)
