"""``make new-env ENV=staging FROM=dev``: write config/staging.yaml from config/dev.yaml.

The new file is the source's text (its comments kept) with the names that must differ between two
environments renamed (:data:`RENAMED`: ``env``, ``endpoint_name``, ``image.repository_name`` and
a ``model_prep.artifact_bucket`` the source names; the source environment's name in them
replaced, else ``-<env>`` appended). Every stack name
derives from ``project`` and ``env`` (typed_config/stack_names.py), so nothing else collides. The
result is validated like any config (the loader and the capacity model's fit checks) before it is
written; an existing file is never overwritten. docs/make-it-yours.md says what to change next.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from sizing.fit_checks import FIT_CHECKS
from tools import REPO_ROOT
from typed_config import ConfigError, env_config_path, existing_envs, parse_config_data
from typed_config.yaml_source import parse_yaml_with_lines

#: The fields two environments cannot share: each names an AWS resource (an S3 bucket's name is
#: global to every account).
RENAMED = (
    ("env",),
    ("endpoint_name",),
    ("image", "repository_name"),
    ("model_prep", "artifact_bucket"),
)
GUIDE = "docs/make-it-yours.md"


def renamed(value: str, *, source_env: str, env: str) -> str:
    """``value`` with ``source_env`` (as a whole word between dashes, dots, slashes or
    underscores) replaced by ``env``; without it, ``value-<env>``."""
    word = re.compile(rf"(?<![A-Za-z0-9]){re.escape(source_env)}(?![A-Za-z0-9])")
    return word.sub(env, value) if word.search(value) else f"{value}-{env}"


def derive(text: str, *, source: Path, source_env: str, env: str) -> tuple[str, dict[str, str]]:
    """The new file's text and each renamed field (dotted) with its new value."""
    data, lines = parse_yaml_with_lines(text, source=source)
    out = text.splitlines(keepends=True)
    changes: dict[str, str] = {}
    for path in RENAMED:
        holder = data
        for key in path:
            holder = holder.get(key) if isinstance(holder, dict) else None
        if not isinstance(holder, str):
            continue  # absent (env defaults to the file's name) or not a string: validation says
        new = renamed(holder, source_env=source_env, env=env)
        at = lines[path] - 1
        key = re.escape(path[-1])
        value = re.escape(holder)
        line, n = re.subn(rf"(\b{key}:\s*[\"']?){value}", rf"\g<1>{new}", out[at], count=1)
        if n != 1:
            raise ConfigError(
                f"{source}, line {at + 1}: {'.'.join(path)}: cannot rename {holder!r}"
            )
        out[at] = line
        changes[".".join(path)] = new
    header = f"# {env}: made from {source.name} by `make new-env ENV={env} FROM={source_env}`.\n"
    first = 1 if out and out[0].startswith("# yaml-language-server:") else 0
    out.insert(first, header)
    return "".join(out), changes


def new_env(root: Path, *, env: str, source_env: str) -> tuple[Path, dict[str, str]]:
    """Write ``config/<env>.yaml`` from ``config/<source_env>.yaml``; the path and what was
    renamed. Refuses an existing target and a result that does not validate."""
    target = env_config_path(root, env)
    source = env_config_path(root, source_env)
    if target.exists():
        raise ConfigError(
            f"{target}: already exists; new-env never overwrites a config. Edit it, or delete it "
            "first to make it again"
        )
    if not source.is_file():
        raise ConfigError(
            f"{source}: no environment {source_env!r} to copy: FROM= one of "
            f"{', '.join(existing_envs(root)) or '(none in config/)'}"
        )
    text, changes = derive(source.read_text(), source=source, source_env=source_env, env=env)
    raw, lines = parse_yaml_with_lines(text, source=target)
    parse_config_data(
        raw, env=env, source=target, base_dir=target.parent, fit_checks=FIT_CHECKS, lines=lines
    )
    fd = os.open(
        target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644
    )  # never over a file made meanwhile
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return target, changes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make new-env", description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True, help="the new environment (ENV=)")
    parser.add_argument("--from", dest="source", default="dev", help="copied from (FROM=)")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        target, changes = new_env(args.root, env=args.env, source_env=args.source)
    except ConfigError as exc:
        print(f"new-env: {exc}", file=sys.stderr)
        return 1
    shown = target.relative_to(args.root) if target.is_relative_to(args.root) else target
    print(f"wrote {shown} from {args.source}.yaml (validated):")
    for field, value in changes.items():
        print(f"  {field}: {value}")
    print(
        f"next: edit it ({GUIDE}: model, adapters, instance type, SLOs, budget), then "
        f"make synth ENV={args.env}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
