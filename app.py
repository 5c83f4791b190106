#!/usr/bin/env python3
"""CDK entry point: the only place that reads environment variables or CDK context.

Select the environment with ``-c env=prod`` (or ``ENV=prod``); everything below receives the
typed, validated DeploymentConfig from config/<env>.yaml.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import aws_cdk as cdk

from sizing.deploy_options import DeployOptions
from stacks.app_builder import build_app
from typed_config import ConfigError

REPO_ROOT = Path(__file__).resolve().parent


def main() -> None:
    app = cdk.App()
    env = app.node.try_get_context("env") or os.environ.get("ENV") or "dev"
    try:
        options = DeployOptions.from_context(app.node.try_get_context)
        config = app.node.try_get_context(
            "config"
        )  # -c config=path: another file than config/<env>.yaml
        build_app(
            app,
            repo_root=REPO_ROOT,
            env=env,
            options=options,
            config=Path(config) if config else None,
        )
    except ConfigError as err:
        sys.exit(f"config error: {err}")
    app.synth()


if __name__ == "__main__":
    main()
