"""Operator and build commands (``python -m tools.<name>``), run from the repository root."""

import os
from pathlib import Path

#: The repository's root: configs, README, cdk.out are found from here.
REPO_ROOT = Path(__file__).resolve().parents[1]

#: jsii (the bridge from the Python CDK to its Node core) prints an end-of-life banner on Node 20,
#: relayed to Python as byte strings (``b'!!!...'``). The Makefile exports the same variable for
#: every target (npx cdk included); set here too, before any tool imports aws_cdk, so a tool run
#: directly (``python -m tools.synth``) is as quiet. jsii's runtime reads the Node majors to stay
#: quiet about from it (bin/jsii-runtime).
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
