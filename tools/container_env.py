"""The serving container's inputs from config, for running or building the image outside CDK.

``python -m tools.container_env --env dev`` prints the environment the SageMaker Model resource
gives the primary variant's container (``stacks.constructs.endpoint.container_environment``, the
one place that builds it), one ``KEY=VALUE`` per line: a ``--env-file`` for docker/podman run.
``--set KEY=VALUE`` overrides a variable (``make run-image`` overrides only the tiny model's
CPU settings). ``--build-args`` prints the Dockerfile's build args from the same config instead
(``stacks.constructs.image.image_build_args``), as ``--build-arg KEY=VALUE`` lines. ``--get
KEY`` prints one variable's value: ``make serve-local`` and ``make demo-serve`` give the local
server the endpoint's DEFAULT_ADAPTER this way, so a request naming no adapter is answered by the
same adapter on both (``--among DIR``: only an adapter the served model has under DIR; another
is said on stderr and left out, and the base model answers such requests).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sizing.fit_checks import load_config
from stacks.constructs.endpoint import VARIANT_NAMES, container_environment
from stacks.constructs.image import image_build_args
from tools import REPO_ROOT
from typed_config import ConfigError, config_path


def parse_overrides(items: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings to a dict; a malformed item is an error naming it."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not key.replace("_", "").isalnum():
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def env_lines(env: dict[str, str]) -> list[str]:
    """``KEY=VALUE`` lines for ``--env-file`` (which takes each line literally: no quoting,
    so a newline in a value cannot be represented and is refused)."""
    bad = [k for k, v in env.items() if "\n" in v]
    if bad:
        raise ValueError(f"values with a newline cannot go in an env file: {bad}")
    return [f"{k}={v}" for k, v in sorted(env.items())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.container_env", description=__doc__)
    parser.add_argument("--env", required=True, help="config/<env>.yaml")
    parser.add_argument("--variant", choices=VARIANT_NAMES, default=VARIANT_NAMES[0])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--build-args", action="store_true", help="print the build args instead")
    parser.add_argument("--get", metavar="KEY", help="print only this variable's value")
    parser.add_argument(
        "--among", type=Path, metavar="DIR", help="with --get: a name only if DIR/<name> exists"
    )
    args = parser.parse_args(argv)
    try:
        cfg = load_config(config_path(REPO_ROOT, args.env), env=args.env)
        overrides = parse_overrides(args.set)
        if args.get:
            value = container_environment(cfg, args.variant).get(args.get, "")
            if value and args.among is not None and not (args.among / value).is_dir():
                served = sorted(p.name for p in args.among.iterdir()) if args.among.is_dir() else []
                print(
                    f"note: config/{args.env}.yaml's {args.get} {value!r} is not among the served "
                    f"model's {served} ({args.among}): left out, so the base model answers",
                    file=sys.stderr,
                )
                value = ""
            lines = [value]
        elif args.build_args:
            lines = [f"--build-arg {line}" for line in env_lines(image_build_args(cfg))]
        else:
            lines = env_lines({**container_environment(cfg, args.variant), **overrides})
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
