"""The controller's modules import the way Lambda loads them: its directory is the only root.

The construct bundles ``lambdas/canary_controller`` as the function's code (``Code.from_asset``
of the directory), so every module there must import flat (``import handler``) as well as from
the package (``lambdas.canary_controller.handler``) that the tests, stacks and simulator use.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LAMBDA_DIR = Path(__file__).resolve().parents[2] / "lambdas" / "canary_controller"
MODULES = sorted(p.stem for p in LAMBDA_DIR.glob("*.py"))


def test_controller_imports_with_only_its_own_directory_on_the_path(tmp_path: Path) -> None:
    assert {"handler", "controller_io", "decisions", "names", "rules"} <= set(MODULES)
    code = (
        # the standard library and installed packages only (boto3 is in the Lambda runtime)
        "import sys; sys.path[:] = [p for p in sys.path "
        "if p.startswith(sys.base_prefix) or 'site-packages' in p]; "
        f"sys.path.insert(0, {str(LAMBDA_DIR)!r}); "
        f"import {', '.join(MODULES)}; "
        "assert not [m for m in sys.modules if m.startswith('lambdas')], 'package import'; "
        "assert handler.r is rules and decisions.r is rules and controller_io.r is rules; "
        "assert store.r is rules and aws.r is rules and rules.names is names; "
        "assert issubclass(handler.Controller, decisions.DecisionApplier); "
        "print(handler.handler.__name__)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False,
        env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "handler"
