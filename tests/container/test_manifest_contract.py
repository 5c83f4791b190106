"""The manifest's one definition (container/model_prep/manifest.py) on both sides: what the
preparation job writes, the serving entrypoint accepts, and each fault reads the same from the
job's check (``verify_tree``; ``python -m model_prep.verify`` in the image build's model stage)
and from the entrypoint's start, naming the file. The serving image carries the module beside
serving/ (container/Dockerfile): it stays standard library only, and the entrypoint imports it in
the image's layout. No engine, no image: a small tree in a temporary directory."""

from __future__ import annotations

import ast
import json
import logging
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from _serving_support import REPO

from container.model_prep import manifest as model_manifest
from container.model_prep import verify as verify_cli
from container.model_prep.manifest import ManifestError, verify_tree, write_manifest
from container.serving import entrypoint
from container.serving import settings as settings_mod
from container.serving.entrypoint import StartupError, validate

VERSION = "m-0123456789abcdef"


def release(root: Path) -> Path:
    """A prepared model's layout, as prepare writes it (manifest last)."""
    (root / "base").mkdir(parents=True)
    (root / "base" / "config.json").write_text('{"model_type": "llama"}')
    (root / "base" / "model.safetensors").write_bytes(bytes(range(256)) * 4)
    for name in ("jp_style", "manga_domain"):
        (root / "lora" / name).mkdir(parents=True)
        (root / "lora" / name / "adapter_config.json").write_text('{"r": 16}')
        (root / "lora" / name / "adapter_model.safetensors").write_bytes(name.encode() * 64)
    (root / "quality_report.json").write_text("{}")
    write_manifest(root, version=VERSION, quantization="none")
    return root


def env(root: Path, **extra: str) -> dict[str, str]:
    return {"MODEL_PATH": str(root / "base"), "LORA_PATH": str(root / "lora"),
            "MANIFEST_PATH": str(root / "manifest.json"), "SERVING_DEVICE": "cpu",
            **extra}  # fmt: skip


def serving_check(root: Path) -> dict[str, object]:
    """The entrypoint's validate phase, as `serve` runs it with the image's settings."""
    return validate(settings_mod.load(env(root)))


def flip_a_byte(root: Path) -> None:
    path = root / "base" / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[100] ^= 0x01
    path.write_bytes(bytes(data))


def drop_an_adapter(root: Path) -> None:
    shutil.copytree(root / "lora" / "jp_style", root / "lora" / "smuggled")


def manifest_body(body: bytes) -> Callable[[Path], object]:
    return lambda root: (root / "manifest.json").write_bytes(body)


ARTIFACT = f"model artifact {VERSION} does not verify: "
MALFORMED = "{manifest}: malformed manifest: "
#: fault -> (what makes it, how each check's message starts: the whole of it for a file fault)
FAULTS: dict[str, tuple[Callable[[Path], object], str]] = {
    "missing": (lambda root: (root / "base" / "model.safetensors").unlink(),
                ARTIFACT + "base/model.safetensors: missing"),
    "changed byte": (flip_a_byte, ARTIFACT + "base/model.safetensors: sha256 differs from the "
                                             "manifest"),
    "extra file": (lambda root: (root / "base" / "planted.py").write_text("import os"),
                   ARTIFACT + "base/planted.py: not in the manifest"),
    "extra adapter": (drop_an_adapter, ARTIFACT + "lora/smuggled/adapter_config.json: not in the "
                                                  "manifest; lora/smuggled/adapter_model."
                                                  "safetensors: not in the manifest"),
    "not JSON": (manifest_body(b"{not json"),
                 MALFORMED + "Expecting property name enclosed in double quotes"),
    "not UTF-8": (manifest_body(b"\xff"), MALFORMED + "'utf-8' codec can't decode byte 0xff"),
    "not an object": (manifest_body(b"[]"),
                      MALFORMED + 'no "files" object of path -> sha256'),
    "no files": (manifest_body(json.dumps({"version": VERSION}).encode()),
                 MALFORMED + 'no "files" object of path -> sha256'),
    "files a list": (manifest_body(b'{"files": ["base/config.json"]}'),
                     MALFORMED + 'no "files" object of path -> sha256'),
    "a digest not a string": (manifest_body(b'{"files": {"base/config.json": 1}}'),
                              MALFORMED + 'no "files" object of path -> sha256'),
}  # fmt: skip


def both_paths(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, str, str]:
    """What the job's check, the entrypoint's start and the build's verify CLI each say."""
    with pytest.raises(ManifestError) as job:
        verify_tree(root)
    with pytest.raises(StartupError) as serving:
        serving_check(root)
    capsys.readouterr()
    assert verify_cli.main([str(root)]) == 1
    return str(job.value), str(serving.value), capsys.readouterr().err


def test_what_the_writer_writes_the_serving_check_accepts(tmp_path: Path) -> None:
    root = release(tmp_path / "model")
    files = json.loads((root / "manifest.json").read_text())["files"]
    assert len(files) == 7 and "lora/jp_style/adapter_model.safetensors" in files
    assert verify_tree(root, version=VERSION)["files"] == files
    assert serving_check(root)["manifest_files_checked"] == len(files)
    assert verify_cli.main([str(root), "--version", VERSION]) == 0


def test_a_file_named_like_the_manifest_below_the_root_is_listed_and_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the root's manifest.json is the manifest: the writer once left out every file of
    that name, which the checks then refused as not in the manifest."""
    root = tmp_path / "model"
    (root / "lora" / "a").mkdir(parents=True)
    (root / "lora" / "a" / "manifest.json").write_text("{}")
    (root / "base").mkdir()
    (root / "base" / "config.json").write_text("{}")
    write_manifest(root, version=VERSION)
    assert "lora/a/manifest.json" in verify_tree(root)["files"]
    assert serving_check(root)["manifest_files_checked"] == 2
    (root / "lora" / "a" / "manifest.json").write_text('{"x": 1}')
    job, serving, _ = both_paths(root, capsys)
    said = f"model artifact {VERSION} does not verify: lora/a/manifest.json: sha256 differs"
    assert job == serving == f"{said} from the manifest"


@pytest.mark.parametrize("fault", FAULTS, ids=list(FAULTS))
def test_each_fault_reads_the_same_on_both_paths_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fault: str
) -> None:
    tamper, said = FAULTS[fault]
    root = release(tmp_path / "model")
    tamper(root)
    job, serving, cli = both_paths(root, capsys)
    assert job == serving
    assert job.startswith(said.format(manifest=root / "manifest.json")), job
    assert said.startswith(MALFORMED) or job == said
    assert cli == f"model artifact FAILED verification: {job}\n"


def test_many_faults_name_the_same_files_on_both_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = release(tmp_path / "model")
    for i in range(30):
        (root / "base" / f"extra-{i:02}.bin").write_text("x")
    job, serving, _ = both_paths(root, capsys)
    assert job == serving
    assert job.count("not in the manifest") == model_manifest.MAX_NAMED


@pytest.mark.parametrize(
    ("tamper", "said"),
    [(flip_a_byte, "base/model.safetensors: sha256 differs from the manifest"),
     (lambda root: (root / "manifest.json").write_text("{"), "malformed manifest")],
    ids=["changed byte", "malformed"],
)  # fmt: skip
def test_serve_refuses_to_start_logs_the_fault_and_reports_unhealthy(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tamper: Callable[[Path], object],
    said: str,
) -> None:
    """What the entrypoint does when the manifest fails: ``startup failed: <the fault>``, the
    state file unhealthy (ping 503), exit 1, no vLLM started."""
    root = release(tmp_path / "model")
    tamper(root)
    state = tmp_path / "state.json"
    for key, value in env(root, SERVING_STATE_FILE=str(state)).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # the test process keeps its own
    started: list[object] = []
    monkeypatch.setattr(entrypoint.Supervisor, "start_vllm", lambda self: started.append(self))
    with pytest.raises(ManifestError) as job:
        verify_tree(root)
    with caplog.at_level(logging.INFO, logger="serving.entrypoint"):
        assert entrypoint.main(["serve"]) == 1
    assert said in str(job.value)
    assert f"startup failed: {job.value}" in caplog.messages
    assert json.loads(state.read_text())["status"] == "unhealthy"
    assert started == []


def test_the_manifest_module_is_standard_library_only() -> None:
    """The serving image carries model_prep/manifest.py without the rest of model_prep or its
    dependencies."""
    tree = ast.parse(Path(model_manifest.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"relative import in manifest.py: {ast.unparse(node)}"
            imported.add((node.module or "").split(".")[0])
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def runtime_code_copies() -> list[tuple[list[str], str]]:
    """The runtime stage's COPY lines from the build context (sources, destination)."""
    text = (REPO / "container" / "Dockerfile").read_text()
    stage = text[text.index(" AS runtime") :]
    copies = []
    for line in stage.splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--") for w in words):
            copies.append((words[1:-1], words[-1]))
    return copies


def test_the_image_carries_the_module_and_the_entrypoint_checks_through_it(
    tmp_path: Path,
) -> None:
    """/opt/app as the runtime stage's COPY lines lay it out (serving/ and the manifest module),
    imported as the image imports it (``serving.entrypoint``, PYTHONPATH=/opt/app): the
    entrypoint's check is model_prep/manifest.py's, and says what the job's check says."""
    app = tmp_path / "opt" / "app"
    for sources, dest in runtime_code_copies():
        assert dest.startswith("/opt/app/"), dest
        target = app / dest.removeprefix("/opt/app/")
        for src in sources:
            path = REPO / "container" / src
            if path.is_dir():
                shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, target)
    assert (app / "model_prep" / "manifest.py").is_file()
    assert sorted(p.name for p in (app / "model_prep").iterdir()) == ["__init__.py", "manifest.py"]
    root = release(tmp_path / "model")
    flip_a_byte(root)
    probe = (
        "import sys\nfrom pathlib import Path\n"
        "from serving import entrypoint\n"
        "print(entrypoint.model_manifest.__file__)\n"
        "try:\n    entrypoint.verify_manifest(Path(sys.argv[1]), Path(sys.argv[2]))\n"
        "except entrypoint.StartupError as exc:\n    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(root / "manifest.json"), str(root)],
        cwd=tmp_path, env={"PYTHONPATH": str(app), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    module, said = done.stdout.splitlines()
    assert Path(module) == app / "model_prep" / "manifest.py"
    with pytest.raises(ManifestError) as job:
        verify_tree(root)
    assert said == str(job.value)
    assert re.search(r"base/model\.safetensors: sha256 differs", said)
