"""``python -m tools.stack_name --env ENV image|endpoint|execution-policy``: one stack's name,
for make targets that deploy a single stack (``make deploy-repository``, ``make
deploy-execution-policy``). From the config, defined once in typed_config/stack_names.py."""

from __future__ import annotations

import argparse
import sys

from sizing.fit_checks import load_config
from tools import REPO_ROOT
from typed_config import (
    STACK_PARTS,
    ConfigError,
    config_path,
    execution_policy_stack_name,
    stack_name,
)

EXECUTION_POLICY = "execution-policy"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="dev")
    parser.add_argument("part", choices=[*STACK_PARTS, EXECUTION_POLICY])
    args = parser.parse_args(argv)
    try:
        cfg = load_config(config_path(REPO_ROOT, args.env), env=args.env)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(
        execution_policy_stack_name(cfg)
        if args.part == EXECUTION_POLICY
        else stack_name(cfg, args.part)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
