"""Operator commands for the canary rollout: ``python -m tools.canary {start,status,rollback,wait,
promote-info} --env ENV`` (``make canary-start|canary-status|canary-rollback|canary-wait ENV=...``).

Every command goes through the controller Lambda (``<endpoint>-canary-controller``), so the lock,
the idempotency and the recorded state are the same whether an operator or the state machine
acts. Each prints what it did; a refusal (another rollout running, endpoint not InService, an
alarm already firing, a malformed request) prints the controller's reason and exits 1.

``start`` on a rollout that COMPLETED (the canary carries 100 % and waits for ``make promote``)
starts nothing: a new rollout would take the canary's traffic back to the first step. So a
release run again from the top after a failure in ``make promote`` resumes instead of baking the
canary a second time; ``make canary-rollback`` first to start over on purpose.

``wait`` (``make canary-wait``) reads the record until the rollout ends and never changes the
fleet: exit 0 on COMPLETED; 1 when it rolls back (ROLLING_BACK, ROLLED_BACK) or fails, with the
controller's last decision and reason; :data:`WAIT_TIMED_OUT` when the bound passes first (the
rollout goes on; the message says how to follow or roll it back). The bound defaults to the
rollout's total bake plus a margin (:func:`rollout_wait_minutes`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from typing import Any

import boto3
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from lambdas.canary_controller.names import (
    COMPLETED,
    LOCKED,
    ROLLING_BACK,
    RUNNING,
    controller_function_name,
)
from sizing.ready_bound import ready_seconds
from tools import REPO_ROOT
from tools.aws_command import NO_CREDENTIALS, client, error_code, run_on_config
from typed_config import DeploymentConfig

#: ``make canary-wait`` gave up at its bound before the rollout ended (the rollout goes on).
#: Not 2, which tools.aws_command gives an invalid config (and argparse a usage error).
WAIT_TIMED_OUT = 3
#: How often ``wait`` reads the record, as make prepare-model's watch polls its job.
WAIT_POLL_SECONDS = 30
#: Failed status reads in a row before ``wait`` gives up (the rollout runs on without it), as
#: make prepare-model's watch (tools/prepare_model.py STATUS_READ_ATTEMPTS).
STATUS_READ_ATTEMPTS = 10
#: Invoke answers that say nothing about the rollout, so ``wait`` reads again: throttling
#: (TooManyRequestsException, HTTP 429) and Lambda's service-side faults (ServiceException 500;
#: ResourceNotReadyException, EC2ThrottledException and the other 502s): Lambda API reference,
#: Invoke, Errors (https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html). botocore
#: already retried each of them (its retry modes treat 429 and 5xx alike). Any other error
#: (AccessDeniedException, ResourceNotFoundException: no controller) stops the wait at once.
TRANSIENT_INVOKE_ERRORS = frozenset({"TooManyRequestsException", "ThrottlingException"})


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


def rollout_record(lambda_client: Any, cfg: DeploymentConfig) -> dict[str, Any] | None:
    """The controller's record of the endpoint's last rollout, or None when there is none. No
    controller function yet (a stack deployed before it existed) means no rollout: Invoke then
    fails with ResourceNotFoundException, "the resource specified in the request does not
    exist" (Lambda API reference, Invoke, Errors:
    https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html). Any other failure raises."""
    try:
        state = invoke(lambda_client, cfg, {"action": "status"})
    except ClientError as exc:
        if error_code(exc) == "ResourceNotFoundException":
            return None
        raise
    return state if state.get("status") is not None else None


def active_rollout(lambda_client: Any, cfg: DeploymentConfig) -> dict[str, Any] | None:
    """The controller's record when a rollout holds the endpoint's lock (RUNNING or
    ROLLING_BACK), else None (:func:`rollout_record`)."""
    state = rollout_record(lambda_client, cfg)
    return state if state is not None and state.get("status") in LOCKED else None


def transient(exc: Exception) -> str | None:
    """Why a failed status read is worth another (the error code or class), or None when it is
    not: see :data:`TRANSIENT_INVOKE_ERRORS`. A dropped connection or a connect/read timeout
    (botocore's ConnectionError and HTTPClientError, the classes its own retries treat as
    transient) is too; no credentials is not."""
    if isinstance(exc, ClientError):
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        code = error_code(exc)
        if code in TRANSIENT_INVOKE_ERRORS or status >= 500:
            return code or f"HTTP {status}"
        return None
    if isinstance(exc, BotoConnectionError | HTTPClientError):
        return type(exc).__name__
    return None


def rollout_wait_minutes(cfg: DeploymentConfig) -> int:
    """The default bound of ``make canary-wait``: the rollout's total bake (every step of
    ``rollout.steps_percent`` bakes ``bake_minutes``) plus, per step, the margin the controller
    needs around a bake: the tick that sees the bake end (up to one ``check_interval_minutes``
    later) and the canary instances raised before the weight moves (one instance start at the
    plan's per-start bound, sizing.ready_bound). A canary held for evidence beyond that (up to
    ``evidence_timeout_minutes`` a step) outlasts the default: pass TIMEOUT_MIN=."""
    ro = cfg.rollout
    per_step = ro.bake_minutes + ro.check_interval_minutes + ready_seconds(cfg) / 60
    return math.ceil(len(ro.steps_percent) * per_step + shadow_stage_minutes(cfg))


def shadow_stage_minutes(cfg: DeploymentConfig) -> float:
    """What a shadow stage adds to a rollout at most: its ``max_minutes`` and its two moves
    between endpoint configs (one blue/green update each, bounded by the deployment's max
    execution timeout plus termination wait, as the controller bounds them); 0 without one."""
    stage, dep = cfg.rollout.shadow, cfg.deployment
    if stage is None:
        return 0.0
    move = (dep.max_execution_timeout_seconds + dep.termination_wait_seconds) / 60
    return stage.max_minutes + 2 * move


def _elapsed(seconds: float) -> str:
    m = int(seconds) // 60
    return f"{m // 60}h{m % 60:02d}m" if m >= 60 else f"{m}m{int(seconds) % 60:02d}s"


def _where(state: dict[str, Any]) -> str:
    """``step 2/5 (25%)``, and the capacity wait before the next step when there is one."""
    steps = state.get("steps") or []
    index = state.get("step_index", -1)
    if state.get("stage") == "shadow":
        return (
            f"shadow stage before step 1/{len(steps)} (copies only: no user answered by the new "
            f"build; last comparison: {state.get('shadow_outcome') or 'none yet'})"
        )
    if not isinstance(index, int) or index < 0:
        here = f"before step 1/{len(steps)}"
    else:
        here = f"step {index + 1}/{len(steps)} ({state.get('current_percent', steps[index])}%)"
    if state.get("phase") == "scaling" and state.get("status") == RUNNING:
        here += f", raising the canary to {state.get('target_instances')} instances"
    return here


def wait_for_rollout(
    cfg: DeploymentConfig,
    status: Callable[[], dict[str, Any]],
    *,
    timeout_seconds: float,
    poll_seconds: float,
    report_seconds: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    out: Callable[[str], None] = print,
    err: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> int:
    """Read the rollout's record until it ends or ``timeout_seconds`` pass; a line whenever its
    status, step, weight or phase changes, and at least every ``report_seconds``. Changes
    nothing. Returns the exit code (module docstring)."""
    env = f"ENV={cfg.env}"
    started = clock()
    deadline = started + timeout_seconds
    last: tuple[Any, ...] | None = None
    last_line = started
    failures = 0
    while True:
        try:
            state = status()
        except (BotoCoreError, ClientError) as exc:
            why = transient(exc)
            if why is None:
                raise
            failures += 1
            if failures >= STATUS_READ_ATTEMPTS:
                err(f"canary-wait: {failures} reads of the rollout's status failed in a row "
                    f"(last: {why}); the rollout goes on without this wait: make canary-status "
                    f"{env}")  # fmt: skip
                return 1
            out(f"canary-wait: could not read the rollout's status ({why}); reading again in "
                f"{poll_seconds:g} s ({failures}/{STATUS_READ_ATTEMPTS})")  # fmt: skip
            sleep(poll_seconds)
            continue
        failures = 0
        now = clock()
        rollout, now_status = state.get("rollout_id"), state.get("status")
        last_words = f"{state.get('last_decision')}: {state.get('last_reason')}"
        if now_status is None:
            err(f"canary-wait: no rollout recorded on {cfg.endpoint_name}: start one with "
                f"make canary-start {env}")  # fmt: skip
            return 1
        if now_status == COMPLETED:
            out(f"canary-wait: rollout {rollout} {COMPLETED} on {cfg.endpoint_name} after "
                f"{_elapsed(now - started)} ({last_words}); the canary carries 100 % of "
                f"traffic: make promote {env}")  # fmt: skip
            return 0
        if now_status not in LOCKED or now_status == ROLLING_BACK:
            reason = state.get("rollback_reason")
            err(f"canary-wait: rollout {rollout} is {now_status} on {cfg.endpoint_name}, not "
                f"{COMPLETED} (last: {last_words}" + (f"; rollback: {reason}" if reason else "")
                + f"); make canary-status {env} shows its history")  # fmt: skip
            return 1
        seen = (rollout, now_status, state.get("step_index"), state.get("current_percent"),
                state.get("phase"), state.get("stage"), state.get("shadow_outcome"))  # fmt: skip
        if seen != last or now - last_line >= report_seconds:
            out(f"canary-wait: {rollout} {now_status} {_where(state)} "
                f"{_elapsed(now - started)}  last: {last_words}")  # fmt: skip
            last, last_line = seen, now
        if now >= deadline:
            err(f"canary-wait: gave up after {_elapsed(now - started)} (the bound, "
                f"TIMEOUT_MIN={timeout_seconds / 60:g}): rollout {rollout} is still "
                f"{now_status} ({_where(state)}). The rollout goes on; this wait changed "
                f"nothing. Follow it: make canary-wait {env} (or make canary-status {env}); "
                f'roll it back: make canary-rollback {env} REASON="..."')  # fmt: skip
            return WAIT_TIMED_OUT
        sleep(max(0.0, min(poll_seconds, deadline - now)))


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
    stage = state.get("stage")
    if stage is not None:  # a rollout with a shadow stage: it comes first
        path = ("[shadow]" if stage == "shadow" else "shadow") + " -> " + path
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
    if state.get("shadow_outcome"):
        lines.append(f"shadow       last comparison: {state['shadow_outcome']}")
        lines += [f"               {line}" for line in state.get("shadow_evidence") or []]
    fleet = state.get("shadow_fleet")
    if fleet:  # the shadow's count and why (lambdas/canary_controller/shadow_fleet.py)
        lines.append(f"shadow fleet {fleet}")
    if weights is not None:
        lines.append("live weights " + ", ".join(f"{k} {v:g}" for k, v in sorted(weights.items())))
    for entry in state.get("history") or []:
        lines.append(f"  {_when(entry.get('at'))}  {entry['decision']:<8} {entry['reason']}")
    return "\n".join(lines)


def live_weights(sm: Any, endpoint: str) -> dict[str, float]:
    desc = sm.describe_endpoint(EndpointName=endpoint)
    weights = {v["VariantName"]: v.get("CurrentWeight", 0.0) for v in desc["ProductionVariants"]}
    # a shadow variant (the shadow stage) answers copies only; its weight is its sampled share
    for v in desc.get("ShadowProductionVariants") or []:
        weights[f"{v['VariantName']} (copies)"] = v.get("CurrentWeight", 0.0)
    return weights


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
    parser.add_argument("command", choices=["start", "status", "rollback", "wait", "promote-info"])
    parser.add_argument("--env", required=True)
    parser.add_argument("--rollout-id", help="start: id (default: rollout-<UTC time>)")
    parser.add_argument("--reason", default="operator requested rollback", help="rollback: why")
    parser.add_argument(
        "--timeout-min",
        type=float,
        default=None,
        help="wait: give up after this many minutes (default: the rollout's total bake plus a "
        "margin, rollout_wait_minutes)",
    )
    parser.add_argument(
        "--poll-s",
        type=float,
        default=WAIT_POLL_SECONDS,
        help=f"wait: seconds between status reads (default {WAIT_POLL_SECONDS})",
    )
    args = parser.parse_args(argv)
    given = clients or {}

    def command(cfg: DeploymentConfig) -> int:
        lam = client(given, "lambda", cfg.region)
        if args.command == "promote-info":
            print(_promote_info_text(cfg, lam))
            return 0
        if args.command == "wait":
            minutes = args.timeout_min or rollout_wait_minutes(cfg)
            return wait_for_rollout(
                cfg,
                lambda: invoke(lam, cfg, {"action": "status"}),
                timeout_seconds=minutes * 60,
                poll_seconds=args.poll_s,
                report_seconds=cfg.rollout.check_interval_minutes * 60,
                clock=given.get("clock") or time.monotonic,
                sleep=given.get("sleep") or time.sleep,
            )
        who = given.get("caller") or _caller(cfg.region)
        if args.command == "start":
            state = _start(lam, cfg, args.rollout_id, who)
        elif args.command == "rollback":
            state = _rollback(lam, cfg, args.reason, who)
        else:
            state = invoke(lam, cfg, {"action": "status"})
        sm = client(given, "sagemaker", cfg.region)
        print(render(state, live_weights(sm, cfg.endpoint_name)))
        return 0

    return run_on_config(REPO_ROOT, args.env, command, refused=ControllerError)


def _promote_info_text(cfg: DeploymentConfig, lam: Any) -> str:
    """``promote-info``: the promotion steps, with the rollout's record where it can be read
    (the reason it could not be, otherwise)."""
    try:
        return promote_info(cfg, invoke(lam, cfg, {"action": "status"}))
    except NoCredentialsError:
        return promote_info(cfg, None, NO_CREDENTIALS)
    except (BotoCoreError, ClientError, ControllerError) as exc:
        return promote_info(cfg, None, f"{type(exc).__name__}: {exc}")


def _start(lam: Any, cfg: DeploymentConfig, rollout_id: str | None, who: str) -> dict[str, Any]:
    """``start``: a new rollout, unless a COMPLETED one waits for make promote (a new one would
    take the canary's 100 % back to the first step); the record after it."""
    rollout_id = rollout_id or time.strftime("rollout-%Y%m%dT%H%M%SZ", time.gmtime())
    state = invoke(lam, cfg, {"action": "status"})
    if state.get("status") == COMPLETED and state.get("rollout_id") != rollout_id:
        print(f"canary rollout {state.get('rollout_id')} {COMPLETED} on "
              f"{cfg.endpoint_name}: the canary carries 100 % and waits for make promote "
              f"ENV={cfg.env}; nothing started (a new rollout would take its traffic "
              f"back to the first step). To start over: make canary-rollback "
              f"ENV={cfg.env}, then make canary-start ENV={cfg.env}")  # fmt: skip
        return state
    state = invoke(lam, cfg, {"action": "start", "rollout_id": rollout_id, "requested_by": who})
    verb = "already started (same id, nothing changed)" if state.get("duplicate") else "started"
    print(f"canary rollout {rollout_id} {verb} on {cfg.endpoint_name}")
    print(f"bake {cfg.rollout.bake_minutes} min per step, alarms checked every "
          f"{cfg.rollout.check_interval_minutes} min")  # fmt: skip
    return state


def _rollback(lam: Any, cfg: DeploymentConfig, reason: str, who: str) -> dict[str, Any]:
    """``rollback``: recorded by the controller, applied at once or by the rollout's loop."""
    state = invoke(lam, cfg, {"action": "rollback", "reason": reason, "requested_by": who})
    if state.get("status") == ROLLING_BACK:
        print(
            f"rollback recorded on {cfg.endpoint_name}: canary weight 0 requested; the "
            "rollout's loop retries it until SageMaker applies it, then restores the "
            "canary's scaling bounds (make canary-status shows ROLLED_BACK when done)"
        )
    else:
        print(f"rolled back {cfg.endpoint_name}: canary weight 0, primary 100")
    return state


def _caller(region: str) -> str:
    try:
        arn = boto3.client("sts", region_name=region).get_caller_identity()["Arn"]
        return str(arn).rsplit("/", 1)[-1]
    except Exception:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
