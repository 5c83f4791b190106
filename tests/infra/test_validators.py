"""Every synthesized template passes cdk-nag, cfn-lint and checkov, for dev and prod.

The same code `make lint` runs (tools.synth, tools.validate); checkov from its own venv.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tools.synth import synth
from tools.validate import run_cfn_lint, run_checkov, templates_in

from .conftest import REPO_ROOT

CHECKOV = REPO_ROOT / ".venv-checkov" / "bin" / "checkov"


@pytest.fixture(scope="module", params=["dev", "prod"])
def synthesized(request, tmp_path_factory) -> tuple[Path, list[str]]:
    out = tmp_path_factory.mktemp(f"cdk-{request.param}")
    _, nag_errors = synth(request.param, out)
    return out, nag_errors


def test_cdk_nag_has_no_unsuppressed_findings(synthesized) -> None:
    _, nag_errors = synthesized
    assert nag_errors == []


def test_cfn_lint_reports_no_errors_or_warnings(synthesized) -> None:
    out, _ = synthesized
    region = json.loads((out / "plan.json").read_text())["region"]
    assert run_cfn_lint(templates_in(out), region) == []


@pytest.mark.skipif(not CHECKOV.exists(), reason="run `make checkov-venv` (make test does)")
def test_checkov_reports_no_failed_checks(synthesized) -> None:
    out, _ = synthesized
    passed, failed = run_checkov(CHECKOV, templates_in(out))
    assert failed == []
    assert passed > 10
    if json.loads((out / "plan.json").read_text())["env"] == "prod":
        # the figure docs/limits.md quotes for `make validate ENV=prod` is the one checkov prints
        page = re.sub(r"\s+", " ", (REPO_ROOT / "docs" / "limits.md").read_text())
        quoted = re.search(r"`make validate ENV=prod`[^.]*?checkov (\d+) passed, 0 failed", page)
        assert quoted, "docs/limits.md no longer quotes `make validate ENV=prod`'s checkov figure"
        assert int(quoted.group(1)) == passed


def test_cfn_lint_catches_a_broken_template(tmp_path) -> None:
    bad = tmp_path / "bad.template.json"
    bad.write_text(
        json.dumps({"Resources": {"X": {"Type": "AWS::SageMaker::Endpoint", "Properties": {}}}})
    )
    assert run_cfn_lint([bad], "us-east-1"), "cfn-lint must flag a missing EndpointConfigName"
