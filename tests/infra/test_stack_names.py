"""Stack names, one definition (typed_config.stack_names) and its round trip: the stacks the
app builds carry exactly the names the make targets and tools address them by."""

from __future__ import annotations

import aws_cdk as cdk

from stacks.app_builder import build_stacks, cdk_json_context
from tools import stack_name as stack_name_cli
from typed_config import (
    STACK_PARTS,
    deploy_access_stack_name,
    environment_stack_names,
    execution_policy_stack_name,
    release_stack_name,
    stack_name,
)

from .conftest import REPO_ROOT, load_env


def test_the_built_stacks_carry_the_names_the_tools_address() -> None:
    cfg = load_env("prod")
    app = cdk.App(context=cdk_json_context(REPO_ROOT))
    build_stacks(app, cfg)
    built = {c.stack_name for c in app.node.children if isinstance(c, cdk.Stack)}
    named = {stack_name(cfg, p) for p in STACK_PARTS} | {release_stack_name(cfg)}
    if cfg.deploy_access is not None:
        named.add(deploy_access_stack_name(cfg))
    assert set(environment_stack_names(cfg)) == named
    assert built == named | {execution_policy_stack_name(cfg)}


def test_the_make_targets_name_cli_prints_the_same_names(capsys) -> None:  # type: ignore[no-untyped-def]
    cfg = load_env("prod")
    for part in STACK_PARTS:
        assert stack_name_cli.main(["--env", "prod", part]) in (0, None)
        assert capsys.readouterr().out.strip() == stack_name(cfg, part)
    assert stack_name_cli.main(["--env", "prod", "execution-policy"]) == 0
    assert capsys.readouterr().out.strip() == execution_policy_stack_name(cfg)
