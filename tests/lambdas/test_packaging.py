"""Each Lambda's code imports the way Lambda loads it: from the synthesized asset, as a package.

The constructs build each function's asset from one package under lambdas/ (the package as a folder
at the asset's root, stacks/constructs/python_lambda.py) and name it in the handler
(``canary_controller.handler.handler``). These tests synthesize the constructs, find each
function's staged asset directory in the cloud assembly, and import its handler in a fresh
interpreter whose only root is that directory (plus the standard library and installed
packages: boto3 is in the Lambda runtime), every module of the package with it. A module that does
not import there (a sibling-relative import gone wrong, a ``lambdas.`` import, a missing file)
fails the test: nothing in the package catches ImportError any more.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from sizing.fit_checks import load_config
from tests.fixtures import config_fixture
from tests.lambdas.test_constructs import build

REPO = Path(__file__).resolve().parents[2]

#: Run in the fresh interpreter: argv[1] the asset directory, argv[2] the handler string.
LAMBDA_IMPORT = """
import importlib, json, os, pkgutil, sys
asset, handler = os.path.realpath(sys.argv[1]), sys.argv[2]
# the asset as Lambda's code root, then the standard library and installed packages only
installed = [p for p in sys.path if p.startswith(sys.base_prefix) or "site-packages" in p]
sys.path[:] = [asset, *installed]
module_name, function_name = handler.rsplit(".", 1)
function = getattr(importlib.import_module(module_name), function_name)
assert callable(function), handler
package = module_name.split(".")[0]
found = pkgutil.walk_packages(importlib.import_module(package).__path__, package + ".")
modules = sorted(info.name for info in found)
for name in modules:
    importlib.import_module(name)
leaked = sorted(m for m in sys.modules if m == "lambdas" or m.startswith("lambdas."))
assert not leaked, f"imported from the repository, not the asset: {leaked}"
files = {m: os.path.realpath(sys.modules[m].__file__) for m in modules}
outside = sorted(m for m, f in files.items() if not f.startswith(asset + os.sep))
assert not outside, f"not loaded from the asset: {outside}"
print(json.dumps({"function": function.__name__, "modules": modules}))
"""


def lambda_import(asset: Path, handler: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", LAMBDA_IMPORT, str(asset), handler],
        cwd=cwd, capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip


@pytest.fixture(scope="module")
def functions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, Path]]:
    """``{logical id: (handler, staged asset directory)}`` of the product's functions (the
    Provider framework's own, CDK's code, left out) in a synthesized prod stack."""
    outdir = tmp_path_factory.mktemp("cdk.out")
    app = cdk.App(outdir=str(outdir))
    build(app, "Prod", load_config(config_fixture("prod"), env="prod"))
    app.synth()
    template = json.loads((outdir / "Prod.template.json").read_text())
    assets: dict[str, Any] = json.loads((outdir / "Prod.assets.json").read_text())["files"]
    found = {}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::Lambda::Function":
            continue
        props = resource["Properties"]
        if props["Handler"].startswith("framework."):
            continue
        asset_hash = props["Code"]["S3Key"].removesuffix(".zip")
        found[logical_id] = (props["Handler"], outdir / assets[asset_hash]["source"]["path"])
    return found


#: Each function's handler string, and the name of the function it resolves to.
FUNCTIONS = {
    "canary_controller.handler.handler": "handler",
    "smoke_gate.handler.handler": "on_event",
    "smoke_gate.handler.is_complete": "is_complete",
}


def test_every_function_names_its_package_in_the_handler(
    functions: dict[str, tuple[str, Path]],
) -> None:
    assert sorted(handler for handler, _ in functions.values()) == sorted(FUNCTIONS)


def test_each_asset_holds_its_package_only(functions: dict[str, tuple[str, Path]]) -> None:
    for handler, asset in functions.values():
        package = handler.split(".")[0]
        assert sorted(p.name for p in asset.iterdir()) == [package], asset
        files = {p.relative_to(asset).as_posix() for p in asset.rglob("*") if p.is_file()}
        assert f"{package}/__init__.py" in files and f"{package}/handler.py" in files
        assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]


def test_each_handler_imports_from_its_asset_alone(
    functions: dict[str, tuple[str, Path]], tmp_path: Path
) -> None:
    for handler, asset in functions.values():
        out = lambda_import(asset, handler, tmp_path)
        assert out.returncode == 0, f"{handler}: {out.stderr}"
        answer = json.loads(out.stdout)
        assert answer["function"] == FUNCTIONS[handler]
        # every module of the package in the repository, each imported from the asset
        package = handler.split(".")[0]
        source = {p.stem for p in (REPO / "lambdas" / package).glob("*.py")} - {"__init__"}
        assert {"handler"} < source
        assert {m.removeprefix(f"{package}.") for m in answer["modules"]} == source


def test_a_broken_import_in_the_asset_fails_the_import(
    functions: dict[str, tuple[str, Path]], tmp_path: Path
) -> None:
    """The check itself: the controller's asset with one module importing a sibling that is not
    there (as a flat ``import rules`` would fail in Lambda) does not import."""
    [(handler, asset)] = [f for f in functions.values() if f[0].startswith("canary_controller.")]
    broken = tmp_path / "asset"
    shutil.copytree(asset, broken)
    store = broken / "canary_controller" / "store.py"
    store.write_text(store.read_text() + "\nfrom . import no_such_module  # noqa\n")
    out = lambda_import(broken, handler, tmp_path)
    assert out.returncode != 0
    assert "no_such_module" in out.stderr
