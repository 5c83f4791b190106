"""Operator and build commands (``python -m tools.<name>``), run from the repository root."""

from pathlib import Path

#: The repository's root: configs, README, cdk.out are found from here.
REPO_ROOT = Path(__file__).resolve().parents[1]
