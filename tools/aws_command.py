"""What the operator commands that call AWS share (``tools.canary``, ``tools.deploy``): the
environment's config, their clients, and one way to end.

Exit codes: 2 when the config (or another input) is invalid, the message naming what is wrong;
1 when the command refused to act or an AWS call failed, the reason on stderr; otherwise the
command's own. A refusal prints ``refused: <reason>``; a botocore error prints the region the
call went to, since a wrong region is the usual cause of an endpoint "not found".
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from sizing.fit_checks import load_config
from typed_config import ConfigError, DeploymentConfig, config_path

#: What to do when no credentials are found (the preflight says the same before diff and deploy).
NO_CREDENTIALS = (
    "no AWS credentials found: export AWS_PROFILE=<profile> (or AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY), or run `aws sso login --profile <profile>`"
)
OFFLINE_HINT = "make synth ENV={env} and make demo run offline, with no AWS account."


def error_code(exc: ClientError) -> str:
    """The AWS error code of a failed call ("" when the response carries none)."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def client(clients: Mapping[str, Any], service: str, region: str) -> Any:
    """The test's stand-in for ``service`` when given, else a boto3 client in ``region``."""
    return clients.get(service) or boto3.client(service, region_name=region)


def run_on_config(
    root: Path,
    env: str,
    command: Callable[[DeploymentConfig], int],
    *,
    refused: type[Exception],
) -> int:
    """Load ``config/<env>.yaml`` under ``root``, run ``command`` on it and turn how it ended into
    an exit code (module docstring)."""
    try:
        cfg = load_config(config_path(root, env), env=env)
        return command(cfg)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    except refused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    except NoCredentialsError:
        print(f"{NO_CREDENTIALS} ({OFFLINE_HINT.format(env=env)})", file=sys.stderr)
        return 1
    except (BotoCoreError, ClientError) as exc:
        print(f"AWS call failed ({cfg.region}): {exc}", file=sys.stderr)
        return 1
