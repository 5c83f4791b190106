"""Operator commands for the canary rollout: ``python -m tools.canary {start,status,rollback,
promote-info} --env ENV`` (``make canary-start|canary-status|canary-rollback ENV=...``).

Every command goes through the controller Lambda (``<endpoint>-canary-controller``), so the lock,
the idempotency and the recorded state are the same whether an operator or the state machine
acts. Each prints what it did; a refusal (another rollout running, endpoint not InService, an
alarm already firing, a malformed request) prints the controller's reason and exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from lambdas.canary_controller.names import (
    COMPLETED,
    LOCKED,
    ROLLING_BACK,
    RUNNING,
    controller_function_name,
)
from stacks.config import DeploymentConfig
from tools import REPO_ROOT
from tools.aws_command import NO_CREDENTIALS, client, error_code, run_on_config


class ControllerError(RuntimeError):
    """The controller refused or failed; the message is its reason."""


def invoke(lambda_client: Any, cfg: DeploymentConfig, event: dict[str, Any]) -> dict[str, Any]:
    resp = lambda_client.invoke(
        FunctionName=controller_function_name(cfg.endpoint_name),
        InvocationType="RequestResponse",
        Payload=json.dumps({"endpoint_name": cfg.endpoint_name, **event}).encode(),
    )
    payload = json.loads(resp["Payload"].read() or b"null")
    if resp.get("FunctionError"):
        kind = payload.get("errorType", "Error") if isinstance(payload, dict) else "Error"
        msg = payload.get("errorMessage", payload) if isinstance(payload, dict) else payload
        raise ControllerError(f"{kind}: {msg}")
    if not isinstance(payload, dict):
        raise ControllerError(f"the controller answered {payload!r}, not a rollout record")
    return payload


def active_rollout(lambda_client: Any, cfg: DeploymentConfig) -> dict[str, Any] | None:
    """The controller's record when a rollout holds the endpoint's lock (RUNNING or
    ROLLING_BACK), else None. No controller function yet (a stack deployed before it existed)
    means no rollout: Invoke then fails with ResourceNotFoundException, "the resource specified
    in the request does not exist" (Lambda API reference, Invoke, Errors:
    https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html). Any other failure raises."""
    try:
        state = invoke(lambda_client, cfg, {"action": "status"})
    except ClientError as exc:
        if error_code(exc) == "ResourceNotFoundException":
            return None
        raise
    return state if state.get("status") in LOCKED else None


def _when(epoch: Any) -> str:
    if not isinstance(epoch, int | float):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(epoch))


def render(state: dict[str, Any], weights: dict[str, float] | None = None) -> str:
    if not state.get("status"):
        return f"{state.get('endpoint_name')}: no rollout recorded"
    steps = state.get("steps") or []
    index = state.get("step_index", -1)
    path = " -> ".join(f"[{p}%]" if i == index else f"{p}%" for i, p in enumerate(steps))
    lines = [
        f"endpoint     {state['endpoint_name']}",
        f"rollout      {state['rollout_id']} ({state['status']}), by {state.get('requested_by')}",
        f"steps        {path}",
        f"started      {_when(state.get('started_at'))}; this step since "
        f"{_when(state.get('step_started_at'))}",
        f"last         {state.get('last_decision')}: {state.get('last_reason')}",
    ]
    if state.get("phase") == "scaling" and state.get("status") == RUNNING:
        lines.append(
            f"capacity     waiting for {state.get('target_instances')} canary instances "
            "in service before the next weight step"
        )
    if weights is not None:
        lines.append("live weights " + ", ".join(f"{k} {v:g}" for k, v in sorted(weights.items())))
    for entry in state.get("history") or []:
        lines.append(f"  {_when(entry.get('at'))}  {entry['decision']:<8} {entry['reason']}")
    return "\n".join(lines)


def live_weights(sm: Any, endpoint: str) -> dict[str, float]:
    desc = sm.describe_endpoint(EndpointName=endpoint)
    return {v["VariantName"]: v.get("CurrentWeight", 0.0) for v in desc["ProductionVariants"]}


def promote_info(cfg: DeploymentConfig, state: dict[str, Any] | None, unread: str = "") -> str:
    """The promotion steps for ``cfg`` (they need no AWS account), headed by what the rollout
    record says; ``state`` None: the record could not be read, ``unread`` says why."""
    canary, primary = cfg.variants.canary, cfg.variants.primary
    if state is None:
        head = (
            f"Rollout status not read ({unread}); promote only once make canary-status "
            f"ENV={cfg.env} shows {COMPLETED}."
        )
    elif state.get("status") == COMPLETED:
        head = "The canary completed its rollout and now carries 100% of traffic."
    else:
        head = f"Not ready to promote: rollout status is {state.get('status')!r}, not {COMPLETED}."
    return "\n".join(
        [
            head,
            f"make promote ENV={cfg.env} runs these steps (and resumes them after a failure); by "
            "hand, promotion is a config change plus a deploy (the controller never edits the "
            "primary):",
            f"  1. in config/{cfg.env}.yaml set variants.primary.image_tag to the canary's "
            f"({canary.image_tag or 'the image the canary runs'}; primary now "
            f"{primary.image_tag or 'the stack image'})",
            f"  2. make deploy ENV={cfg.env} RESET=DesiredWeight   (blue/green update; the smoke "
            "gate checks every adapter; this deploy resets the weights to the configured "
            "initial_weight values, every other deploy keeps the live ones)",
            f"  3. make canary-status ENV={cfg.env}   to confirm the live weights",
            "  The canary keeps the bounds of the last step (MinCapacity raised for 100%) until "
            f"the deploy; after it, run make canary-rollback ENV={cfg.env} REASON=promoted to "
            "return the canary to weight 0 and its configured scaling bounds (it then idles at "
            "weight 0 on the promoted image until the next rollout).",
        ]
    )


def main(argv: list[str] | None = None, *, clients: dict[str, Any] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.canary", description=__doc__)
    parser.add_argument("command", choices=["start", "status", "rollback", "promote-info"])
    parser.add_argument("--env", required=True)
    parser.add_argument("--rollout-id", help="start: id (default: rollout-<UTC time>)")
    parser.add_argument("--reason", default="operator requested rollback", help="rollback: why")
    args = parser.parse_args(argv)
    given = clients or {}

    def command(cfg: DeploymentConfig) -> int:
        lam = client(given, "lambda", cfg.region)
        if args.command == "promote-info":
            try:
                print(promote_info(cfg, invoke(lam, cfg, {"action": "status"})))
            except NoCredentialsError:
                print(promote_info(cfg, None, NO_CREDENTIALS))
            except (BotoCoreError, ClientError, ControllerError) as exc:
                print(promote_info(cfg, None, f"{type(exc).__name__}: {exc}"))
            return 0
        who = given.get("caller") or _caller(cfg.region)
        if args.command == "start":
            rollout_id = args.rollout_id or time.strftime("rollout-%Y%m%dT%H%M%SZ", time.gmtime())
            state = invoke(
                lam, cfg, {"action": "start", "rollout_id": rollout_id, "requested_by": who}
            )
            verb = (
                "already started (same id, nothing changed)"
                if state.get("duplicate")
                else "started"
            )
            print(f"canary rollout {rollout_id} {verb} on {cfg.endpoint_name}")
            print(f"bake {cfg.rollout.bake_minutes} min per step, alarms checked every "
                  f"{cfg.rollout.check_interval_minutes} min")  # fmt: skip
        elif args.command == "rollback":
            state = invoke(
                lam, cfg, {"action": "rollback", "reason": args.reason, "requested_by": who}
            )
            if state.get("status") == ROLLING_BACK:
                print(
                    f"rollback recorded on {cfg.endpoint_name}: canary weight 0 requested; the "
                    "rollout's loop retries it until SageMaker applies it, then restores the "
                    "canary's scaling bounds (make canary-status shows ROLLED_BACK when done)"
                )
            else:
                print(f"rolled back {cfg.endpoint_name}: canary weight 0, primary 100")
        else:
            state = invoke(lam, cfg, {"action": "status"})
        sm = client(given, "sagemaker", cfg.region)
        print(render(state, live_weights(sm, cfg.endpoint_name)))
        return 0

    return run_on_config(REPO_ROOT, args.env, command, refused=ControllerError)


def _caller(region: str) -> str:
    try:
        arn = boto3.client("sts", region_name=region).get_caller_identity()["Arn"]
        return str(arn).rsplit("/", 1)[-1]
    except Exception:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
