"""``python -m tools.deploy_access stack --env ENV``: the name of ENV's deploy-access stack (the
GitHub Actions deploy role, stacks/deploy_access_stack.py), for ``make deploy-access``.

Without a ``deploy_access`` section in config/ENV.yaml there is no such stack: it says which
fields to set and exits 2. On stderr it also warns when another config under config/ creates the
account's GitHub OIDC provider too (``oidc_provider: create`` in both, and nothing tells their
accounts apart): IAM holds one provider per URL per account, so the second stack would fail.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sizing.fit_checks import load_config
from tools import REPO_ROOT
from typed_config import ConfigError, DeploymentConfig, config_path, deploy_access_stack_name

DOC = 'docs/release-from-ci.md, "Deploy access (one-time)"'


def missing_section(env: str) -> str:
    return (
        f"config/{env}.yaml has no deploy_access section, so ENV={env} has no deploy role to "
        "deploy. Set deploy_access.repository (OWNER/NAME of the GitHub repository whose "
        "workflows deploy) and deploy_access.oidc_provider (create, or existing where another "
        f"environment's stack already created the account's GitHub OIDC provider): {DOC}"
    )


def other_creators(cfg: DeploymentConfig, root: Path) -> list[str]:
    """The other configs under ``root``/config that also create the OIDC provider, in an account
    that may be the same as ``cfg``'s (equal, or either one unpinned)."""
    found = []
    for path in sorted((root / "config").glob("*.yaml")):
        if path.stem == cfg.env:
            continue
        try:
            other = load_config(path, env=path.stem)
        except ConfigError:
            continue  # its own make target reports it
        access = other.deploy_access
        if access is None or access.oidc_provider != "create":
            continue
        if cfg.account is None or other.account is None or cfg.account == other.account:
            found.append(f"config/{path.name}")
    return found


def cmd_stack(env: str, root: Path = REPO_ROOT) -> int:
    try:
        cfg = load_config(config_path(root, env), env=env)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    if cfg.deploy_access is None:
        print(missing_section(env), file=sys.stderr)
        return 2
    if cfg.deploy_access.oidc_provider == "create":
        for other in other_creators(cfg, root):
            print(
                f"warning: {other} also says deploy_access.oidc_provider: create. Where both "
                "deploy to one account, only the first stack can create the provider: set "
                "existing in the other",
                file=sys.stderr,
            )
    print(deploy_access_stack_name(cfg))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.deploy_access", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    stack = sub.add_parser("stack", help="the deploy-access stack's name (exit 2: none)")
    stack.add_argument("--env", required=True)
    args = parser.parse_args(argv)
    return cmd_stack(args.env)


if __name__ == "__main__":
    sys.exit(main())
