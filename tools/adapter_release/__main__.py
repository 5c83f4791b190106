"""``python -m tools.adapter_release --env ENV --adapter NAME --version V [--dry-run]``.

1. **fetch**: the config's prepared model release, verified (tools/model_release.py
   ``ensure_release``: a verified copy in build/model-artifacts/ is kept).
2. **gate**: that release's quality gate for this adapter alone (publish.py).
3. **publish**: the adapter version on its own in the models bucket (publish.py).
4. **roll out**: candidate component, evidence, swap, watch; or rollback alone (rollout.py).

``--dry-run`` reads (the release, the bucket, the components) and says what it would do; it
writes nothing and changes no component. Exit 0: promoted, already live, or dry run; 1: refused
or rolled back (the reason on stderr); 2: the config or the arguments are wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from container.model_prep.release import HELDOUT_FILE
from tools import REPO_ROOT
from tools.adapter_release.publish import AdapterRefused, prepared_adapter, publish
from tools.adapter_release.rollout import Clock, roll_out
from tools.adapter_release.target import release_target
from tools.aws_command import client, run_on_config
from typed_config import DeploymentConfig, artifact_bucket_name


class _Session:
    """What tools.model_release.ensure_release asks of a boto3 Session: clients."""

    def __init__(self, given: dict[str, Any], region: str) -> None:
        self.given, self.region = given, region

    def client(self, service: str, **_: Any) -> Any:
        return client(self.given, service, self.region)


def prompts(path: Path = HELDOUT_FILE) -> list[str]:
    """The probes: the held-out prompts the quality gate scored the adapter on."""
    texts = [json.loads(line)["text"] for line in path.read_text().splitlines() if line.strip()]
    if not texts:
        raise AdapterRefused(f"{path}: no held-out prompt to probe with")
    return texts


def release(
    cfg: DeploymentConfig,
    *,
    adapter: str,
    version: str,
    given: dict[str, Any],
    release_root: Path | None = None,
    dry_run: bool = False,
) -> int:
    target = release_target(cfg, adapter, version)
    if release_root is None:
        from tools.model_release import ensure_release

        _, release_root = ensure_release(cfg, session=_Session(given, cfg.region))
    prepared = prepared_adapter(release_root, adapter, version)
    gate = prepared.gate.get("next_token_agreement")
    print(f"1. gate: {adapter} {version} of model release {prepared.release}: "
          + (f"agreement {gate:.4f} >= {prepared.gate['min_agreement']}" if gate is not None
             else "no quantized base, nothing to gate"))  # fmt: skip
    s3, sts = client(given, "s3", cfg.region), client(given, "sts", cfg.region)
    bucket = artifact_bucket_name(cfg, str(sts.get_caller_identity()["Account"]))
    url, done = publish(s3, prepared, bucket=bucket, key=target.artifact_key(), dry_run=dry_run)
    print(f"   publish: {url}: {done}")
    outcome = roll_out(
        sm=client(given, "sagemaker", cfg.region),
        rt=client(given, "sagemaker-runtime", cfg.region),
        cw=client(given, "cloudwatch", cfg.region),
        target=target,
        url=url,
        prompts=prompts(),
        clock=Clock(given.get("clock") or Clock.now, given.get("sleep") or Clock.sleep),
        dry_run=dry_run,
    )
    if outcome.result == "rolled back":
        print(f"refused: {adapter} {version} rolled back: {outcome.reason}", file=sys.stderr)
        return 1
    print(f"{adapter} {version}: {outcome.result} ({outcome.reason})")
    return 0


def main(
    argv: list[str] | None = None,
    *,
    clients: dict[str, Any] | None = None,
    release_root: Path | None = None,
    root: Path = REPO_ROOT,
) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.adapter_release",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--env", required=True)
    parser.add_argument("--adapter", required=True, help="an adapters[].name of the config")
    parser.add_argument("--version", required=True, help="its adapters[].version in the config")
    parser.add_argument("--dry-run", action="store_true", help="read and say; change nothing")
    args = parser.parse_args(argv)
    given = dict(clients or {})

    def command(cfg: DeploymentConfig) -> int:
        return release(
            cfg,
            adapter=args.adapter,
            version=args.version,
            given=given,
            release_root=release_root,
            dry_run=args.dry_run,
        )

    return run_on_config(root, args.env, command, refused=AdapterRefused)


if __name__ == "__main__":
    sys.exit(main())
