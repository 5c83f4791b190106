"""The controller's modules import the way Lambda loads them: its directory is the only root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LAMBDA_DIR = Path(__file__).resolve().parents[2] / "lambdas" / "canary_controller"


def test_controller_imports_with_only_its_own_directory_on_the_path(tmp_path: Path) -> None:
    code = (
        # the standard library and installed packages only (boto3 is in the Lambda runtime)
        "import sys; sys.path[:] = [p for p in sys.path "
        "if p.startswith(sys.base_prefix) or 'site-packages' in p]; "
        f"sys.path.insert(0, {str(LAMBDA_DIR)!r}); "
        "import handler, rules; "
        "assert handler.r is rules and handler.aws.r is rules and handler.store.r is rules; "
        "print(handler.handler.__name__)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False,
        env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "handler"
