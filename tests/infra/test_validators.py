"""Every synthesized template passes cdk-nag, cfn-lint and checkov, for dev and prod and the
component shape's example configs.

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


#: (env, config file or None for config/<env>.yaml): each environment, and the example configs of
#: the component shape (issue 45), validated by the same checks.
CONFIGS = [
    ("dev", None),
    ("prod", None),
    ("dev", "config/examples/dev-components.yaml"),
    ("prod", "config/examples/prod-components.yaml"),
]


@pytest.fixture(scope="module", params=CONFIGS, ids=[Path(c).stem if c else e for e, c in CONFIGS])
def synthesized(request, tmp_path_factory) -> tuple[Path, list[str]]:
    env, config = request.param
    out = tmp_path_factory.mktemp(f"cdk-{env}")
    _, nag_errors = synth(env, out, config=REPO_ROOT / config if config else None)
    (out / "config-file").write_text(config or "")
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
    plain = not (out / "config-file").read_text()
    if plain and json.loads((out / "plan.json").read_text())["env"] == "prod":
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
