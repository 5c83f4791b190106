"""One snapshot per stack: a refactoring net (asset hashes normalised). Fine-grained tests pin
behaviour; update with `pytest tests/infra/test_snapshots.py --snapshot-update` after review."""

from __future__ import annotations

import json
import re

import pytest

_HASH = re.compile(r"[0-9a-f]{64}")


def normalised(template: dict) -> dict:
    return json.loads(_HASH.sub("<asset-hash>", json.dumps(template, sort_keys=True)))


@pytest.mark.parametrize("stack", ["image", "endpoint"])
def test_stack_matches_snapshot(prod_templates, stack, snapshot) -> None:
    assert normalised(prod_templates[stack].to_json()) == snapshot
