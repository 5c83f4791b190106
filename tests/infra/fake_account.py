"""One fake AWS account that every client of a release reads and changes: the SageMaker endpoint
(its endpoint configs and Models), the ECR repository's tags, the variants' scalable targets, the
canary controller Lambda's record, and CloudFormation behind ``cdk deploy``.

The tools get **real boto3 clients**: botocore validates every request against the service model
as it would before sending it, then a ``before-call`` hook (the mechanism botocore's Stubber uses)
answers from this account instead of the network, and botocore raises an error answer as the
ClientError class the service would. Each answer is validated against the operation's output
shape, as Stubber validates its canned answers. Every call is appended to :attr:`Account.calls`
(``service.Operation``, with the controller's action for Invoke), so a test asserts the calls of a
whole release in order. :meth:`Account.fail` injects a failure into the next matching call (an AWS
error code with its HTTP status, or an exception such as a dropped connection).

What the fakes do, and where each rule comes from:

- ``cdk deploy`` (:meth:`Account.cdk_deploy`, standing in for the subprocess tools/deploy.py
  runs): synthesizes nothing, but reads the same inputs the app does (``-c env=``, the deploy
  options as CDK context, ``config/<env>.yaml``; ``stacks.app_builder.build_app``) and changes the
  endpoint as CloudFormation does with the template the stacks build (stacks/constructs/endpoint
  .py): a Model whose image changes is replaced (SageMaker has no UpdateModel: developer guide,
  "Update a multi-container endpoint"); any change to a variant replaces the EndpointConfig
  (``ProductionVariants``: replacement); a new EndpointConfig is an UpdateEndpoint with
  RetainAllVariantProperties true and the configured resets excluded (UpdateEndpoint API
  reference; sizing.update_semantics), so weights and counts are kept unless reset. A template
  whose endpoint config is unchanged changes nothing on the endpoint (the reset flags act with an
  UpdateEndpoint; a change of those flags alone is not modelled). A failed deploy rolls back:
  the endpoint keeps its config. The blue/green shift and the smoke gate are not modelled.
- The controller (:class:`Controller`) answers ``status``, ``start`` and ``rollback`` as
  ``lambdas/canary_controller/handler.py`` does (same id twice: duplicate; refused while a rollout
  holds the lock; a rollback with nothing locked is a rollout of its own, ``rollback-<time>``),
  builds its records with the controller's own ``store`` functions and rules (the plan the stacks
  hand the Lambda: ``simulator.rollout.controller_rules``), and plays the state machine's loop
  on the account's clock: each step's canary bounds and weight, a bake per step, COMPLETED after
  the last; :attr:`Controller.alarm_at_step` rolls the next rollout back during that step's bake.
  With ``rollout.shadow`` the rollout starts with the shadow stage, played tick by tick with the
  controller's own rules (``shadow_stage.decide``) and comparison (``shadow_compare.compare`` on
  :attr:`Controller.shadow_answers`, with CloudWatch's minutes at like loads:
  :func:`like_load_minutes`; its ground check finds :attr:`Controller.shadow_ground`): the
  endpoint moves to the shadow config (the canary variant off the
  endpoint, the shadow on) and back through this account's SageMaker (the controller's own
  ``aws.create_sized_config`` and ``aws.update_endpoint``): CreateEndpointConfig, and
  UpdateEndpoint, which refuses a blue/green move that renames variants as SageMaker does
  (tests/sagemaker_refusals.py); a move refused for good ends the stage as the controller's
  ``decisions`` does (FAILED, by way of the canary config). The canary's
  autoscaling is then the controller's (lambdas/canary_controller/canary_scaling.py): the stack
  registers no target for it, the controller's own ``release`` and ``register`` deregister it
  before the move and register it (bounds, target-tracking policy) when back, through this
  account's Application Auto Scaling, and a move to the shadow config with the canary still
  registered is refused as SageMaker refuses it (endpoint-scaling-update). On the shadow config
  DescribeEndpoint and DescribeEndpointConfig show the shadow in ``ShadowProductionVariants``; the
  shadow is sized when the stage starts (``shadow_fleet``) in the config the controller creates
  (:attr:`Account.shadow_counts`), and a count change for it is refused
  (tests/sagemaker_refusals.py).
- UpdateEndpointWeightsAndCapacities applies at once (the endpoint stays InService), so no tool
  waits; nothing else changes the fleet (no autoscaling activity); a variant the endpoint does
  not have, or the shadow variant, is a ValidationException.
- ECR: each repository's tags and the digest each names (:attr:`Account.digests`; a tag pushed
  without one names ``sha256:<tag>``), BatchGetImage and DescribeImages answering them with a
  Docker v2 manifest, GetAuthorizationToken; :meth:`Account.docker` stands in for the docker
  commands tools/release_artifacts.py runs: ``login``, and ``buildx imagetools create
  --prefer-index=false --tag <target> <source>@<digest>``, which gives the target tag the
  source's digest (a manifest copied unchanged keeps it) and refuses a source digest the source
  repository does not hold.
"""

from __future__ import annotations

import base64
import io
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse
from botocore.validate import validate_parameters

from lambdas.canary_controller import aws, canary_scaling, names, shadow_stage, store
from lambdas.canary_controller import rules as r
from lambdas.canary_controller.names import COMPLETED, LOCKED, ROLLED_BACK, ROLLING_BACK, RUNNING
from lambdas.canary_controller.shadow_compare import (
    Answer,
    LikeLoads,
    MinuteLatency,
    compare,
    minute_loads,
)
from lambdas.canary_controller.shadow_fleet import ShadowFleet
from simulator.rollout import controller_rules
from sizing.deploy_options import DeployOptions
from sizing.fit_checks import load_config
from sizing.shadow_plan import shadow_instances
from stacks.constructs.scaling import (
    SCALABLE_DIMENSION,
    ScalingProps,
    controller_scaling,
    resource_id,
)
from tools.deploy import deployed_stacks
from tools.push_image import DOCKER_MANIFEST_V2
from typed_config import VARIANT_NAMES, DeploymentConfig, config_path
from typed_config.shadow import CONTROLLER_OWNED_VARIANT, controller_owned_variants

from ..sagemaker_refusals import count_refusal, move_refusal
from .fake_components import ComponentsMixin

REGION = "us-east-1"
ACCOUNT_ID = "123456789012"
REGISTRY = f"{ACCOUNT_ID}.dkr.ecr.{REGION}.amazonaws.com"
ROLE = f"arn:aws:iam::{ACCOUNT_ID}:role/sagemaker-execution"
SERVICES = ("sagemaker", "application-autoscaling", "ecr", "lambda", "sagemaker-runtime",
            "cloudwatch")  # fmt: skip
#: Operations whose calls are named with the component they act on (``sagemaker.
#: UpdateInferenceComponent <name>``), so a test asserts which components a release touched.
COMPONENT_OPERATIONS = frozenset({"CreateInferenceComponent", "UpdateInferenceComponent",
                                  "DeleteInferenceComponent", "InvokeEndpoint"})  # fmt: skip


def arn(service: str, kind: str, name: str) -> str:
    return f"arn:aws:{service}:{REGION}:{ACCOUNT_ID}:{kind}/{name}"


def image_uris(cfg: DeploymentConfig) -> dict[str, str]:
    """Each variant's image as the stacks resolve it (stacks/constructs/image.py image_uri): its
    own tag, else image.tag, else the image CDK builds (an asset of its own repository)."""
    uris = {}
    for v in VARIANT_NAMES:
        tag = cfg.variants[v].image_tag or cfg.image.tag
        uris[v] = (
            f"{REGISTRY}/{cfg.image.repository_name}:{tag}"
            if tag
            else f"{REGISTRY}/cdk-hnb659fds-container-assets-{ACCOUNT_ID}-{REGION}:built"
        )
    return uris


class Controller:
    """The canary controller's record and actions (module docstring)."""

    def __init__(self, account: Account, cfg: DeploymentConfig) -> None:
        self.account, self.cfg = account, cfg
        self.rules = controller_rules(cfg)
        self.record: dict[str, Any] | None = None
        #: Roll the next rollout back on an alarm during this step's bake (then forget it).
        self.alarm_at_step: int | None = None
        #: The shadow stage's rules (None without ``rollout.shadow``), the answers its
        #: comparison sees (primary, shadow), and every canary weight the controller set.
        self.shadow = shadow_rules(cfg)
        self.shadow_answers: tuple[list[Answer], list[Answer]] = alike_answers(cfg)
        #: What the stage's ground check finds (the account keeps no capture or CloudWatch).
        self.shadow_ground = shadow_stage.Ground(
            (), "data capture Started, both variants' capture objects and invocations"
        )
        self.canary_weights: list[float] = []
        #: Every decision recorded, in order (the record's history keeps the last 50).
        self.decided: list[str] = []
        self._next_tick = 0.0

    # the state machine's loop, caught up to the account's clock before every answer
    def catch_up(self) -> None:
        st = self.record
        bake, steps, plan = self.rules.bake_seconds, self.rules.steps, self.rules.plan
        while st is not None and st.get("stage") == shadow_stage.SHADOW and st["status"] in LOCKED:
            st = self._shadow_tick(st)
            if st is None:
                return
        while st is not None and st["status"] == RUNNING:
            index = st["step_index"]
            due = st["step_started_at"] if index < 0 else st["step_started_at"] + bake
            if self.account.now < due:
                return
            if index >= 0 and index == self.alarm_at_step:
                self.alarm_at_step = None
                reason = "alarm: canary-5xx: 5XX above 5 a minute"
                st = self._decide(st, "rollback", reason, at=due)
                st.update(status=ROLLING_BACK, rollback_reason=reason)
                self.record = self._restore(st, at=due)
                return
            if index == len(steps) - 1:
                st = self._decide(st, "complete", "canary baked at the last step; promote it", due)
                st["status"] = COMPLETED
                continue
            nxt = index + 1
            bounds = plan.steps[nxt]
            self.account.targets["canary"] = (bounds.min_capacity, bounds.max_capacity)
            canary = self.account.endpoint["variants"]["canary"]
            canary["count"] = max(canary["count"], bounds.min_capacity)
            st = self._decide(
                st, "scale", f"{steps[nxt]}% next: canary to {bounds.min_capacity} instances", due
            )
            self.set_canary_weight(steps[nxt])
            st = self._decide(st, "shift", f"canary weight set to {steps[nxt]}%", due)
            st.update(step_index=nxt, step_started_at=due, phase="baking")
            self.record = st
        self.record = st

    def _shadow_tick(self, st: dict[str, Any]) -> dict[str, Any] | None:
        """One tick of the shadow stage at its time, or None while it is not due yet."""
        assert self.shadow is not None
        at = max(self._next_tick, float(st["updated_at"]))
        if self.account.now < at:
            return None
        live = self.account.endpoint
        obs = r.Observation(
            endpoint_status=live["status"],
            endpoint_config_name=live["config"],
            canary_weight=live["variants"].get("canary", {}).get("weight", 0.0),
            primary_weight=live["variants"]["primary"]["weight"],
            primary_instances=live["variants"]["primary"]["count"],
            primary_in_service=live["variants"]["primary"]["count"],
        )
        answers = self.shadow_answers

        def comparison(start: int, end: int) -> shadow_stage.ShadowEvidence:
            minutes = like_load_minutes(start, end)
            loads = LikeLoads.of(minute_loads(minutes), self.rules.plan.canary_per_primary)
            # captured in the window's first minute, as capture.parse_line dates them
            primary, shadow = ([replace(a, minute=start // 60) for a in side] for side in answers)
            verdict = compare(primary, shadow, self.shadow.thresholds, loads=loads)
            return shadow_stage.ShadowEvidence(verdict, minutes=minutes, loads=loads)

        check = self.rules.check_seconds
        d = shadow_stage.decide(
            st, obs, self.shadow, int(at), comparison, check, self._fleet(st),
            lambda start, end: self.shadow_ground,
        )  # fmt: skip
        spec, ep, canary = (
            self.shadow.canary_scaling,
            self.cfg.endpoint_name,
            CONTROLLER_OWNED_VARIANT,
        )
        if d.kind == "enter-shadow" and spec is not None:
            canary_scaling.release(self.account._client("application-autoscaling"), ep, canary)
        if d.kind in r.STAGE_MOVES:
            assert d.endpoint_config is not None
            refused = self._move(d)
            if refused is not None:
                return refused
        if d.kind in ("canary-stage", "shadow-end") and spec is not None:
            aas = self.account._client("application-autoscaling")
            canary_scaling.register(aas, ep, canary, spec)
        self.decided.append(d.kind)
        new = store.record({**st, **(d.record or {})}, d.kind, d.reason, int(at))
        new.update(r.transition(st, d, int(at)))
        if d.kind == "rollback":
            new.update(status=ROLLING_BACK, rollback_reason=d.reason, rollback_started_at=int(at))
        self.record = new
        self._next_tick = at + max(1, d.wait_seconds or check)
        return new

    def _fleet(self, st: dict[str, Any]) -> ShadowFleet | None:
        """What the shadow's count at entry follows (decisions._shadow_fleet): its peak size is
        the stack's shadow config's count; None once the move was asked for."""
        assert self.shadow is not None
        if st.get("shadow_requested_at") is not None:
            return None
        peak = self.account.configs[self.shadow.config_name]["shadow"]["count"]
        plan = self.rules.plan
        return ShadowFleet(self.shadow.sample_percent, plan.canary_per_primary, peak)

    def _move(self, d: r.Decision) -> dict[str, Any] | None:
        """A stage move through this account's SageMaker, with the controller's own calls (the
        sized config created first: decisions._size_shadow). A refusal for good ends the stage
        as decisions._move_refused does: into it, ROLLING_BACK, then FAILED once back on the
        canary config; None when the move was taken."""
        assert self.shadow is not None and d.endpoint_config is not None
        sm, ep = self.account._client("sagemaker"), self.cfg.endpoint_name
        try:
            if d.kind == "enter-shadow" and d.shadow_instances is not None:
                aws.create_sized_config(
                    sm, self.shadow.config_name, d.endpoint_config, self.shadow.shadow_variant,
                    d.shadow_instances,
                )  # fmt: skip
            aws.update_endpoint(sm, ep, d.endpoint_config)
        except aws.AWS_ERRORS as exc:
            assert d.kind == "enter-shadow" and aws.refused_for_good(exc), exc
            st = dict(self.record or {})
            why = f"SageMaker refused the move to {d.endpoint_config}: {aws.describe_error(exc)}"
            st = self._decide(st, "rollback", why, self.account.now)
            st.update(status=ROLLING_BACK, rollback_reason=why, shadow_end=names.FAILED,
                      rollback_started_at=int(self.account.now))  # fmt: skip
            self._next_tick = self.account.now + self.rules.check_seconds
            return st
        return None

    def set_canary_weight(self, percent: float) -> None:
        self.canary_weights.append(percent)
        variants = self.account.endpoint["variants"]
        variants["canary"]["weight"], variants["primary"]["weight"] = percent, 100.0 - percent

    def _decide(self, st: dict[str, Any], decision: str, reason: str, at: float) -> dict[str, Any]:
        self.decided.append(decision)
        self.record = store.record(st, decision, reason, int(at))
        return self.record

    def _restore(self, st: dict[str, Any], at: float) -> dict[str, Any]:
        """Weight 0, then the canary's configured bounds (rules.decide's rollback), ROLLED_BACK."""
        self.set_canary_weight(0)
        plan = self.rules.plan
        self.account.targets["canary"] = (plan.canary_min, plan.canary_max)
        canary = self.account.endpoint["variants"]["canary"]
        canary["count"] = min(max(canary["count"], plan.canary_min), plan.canary_max)
        st = self._decide(
            st,
            "restore",
            "canary weight 0 on an InService endpoint; canary "
            f"scaling bounds restored to {plan.canary_min}..{plan.canary_max}",
            at,
        )
        st["status"] = ROLLED_BACK
        return st

    def _fresh(self, rollout_id: str, status: str, by: str, decision: str, reason: str) -> dict:
        now = int(self.account.now)
        st = store.new_state(
            endpoint=self.cfg.endpoint_name,
            rollout_id=rollout_id,
            status=status,
            by=by,
            rules=self.rules,
            alarms=[],
            now=now,
        )
        return store.record(st, decision, reason, now)

    def summary(self, st: dict[str, Any] | None, **kw: Any) -> dict[str, Any]:
        if st is None:
            return {"endpoint_name": self.cfg.endpoint_name, "status": None}
        return store.summary(st, check_seconds=self.rules.check_seconds, **kw)

    def handle(self, event: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """(payload, is a function error) for one Invoke of the controller."""
        self.catch_up()
        current, action = self.record, event["action"]
        if action == "status":
            return self.summary(current), False
        by = event.get("requested_by", "unknown")
        if action == "start":
            rid = event["rollout_id"]
            if current is not None and current["rollout_id"] == rid:
                return self.summary(current, duplicate=True), False
            if current is not None and current["status"] in LOCKED:
                return {
                    "errorType": "RolloutConflict",
                    "errorMessage": f"rollout "
                    f"{current['rollout_id']!r} is already {current['status']}",
                }, True
            self.record = self._fresh(rid, RUNNING, by, "start", "lock taken")
            if self.shadow is not None:
                self.record.update(
                    stage=shadow_stage.SHADOW,
                    canary_config_name=self.account.endpoint["config"],
                    shadow_config_name=self.shadow.config_name,
                )
                self._next_tick = self.account.now
            return self.summary(self.record), False
        if action == "rollback":
            reason = f"{event.get('reason') or 'operator requested rollback'} (by {by})"
            if current is not None and current["status"] in LOCKED:
                st = self._decide(current, "rollback", reason, self.account.now)
                st.update(status=ROLLING_BACK, rollback_reason=reason)
            else:
                st = self._fresh(
                    f"rollback-{int(self.account.now)}", ROLLING_BACK, by, "rollback", reason
                )
                st["rollback_reason"] = reason
            self.record = self._restore(st, at=self.account.now)
            return self.summary(self.record), False
        return {"errorType": "EventError", "errorMessage": f"unknown action {action!r}"}, True


SHADOW_CONFIG = "ShadowStageEndpointConfig-1"


def shadow_rules(cfg: DeploymentConfig) -> shadow_stage.ShadowRules | None:
    """The controller's SHADOW_STAGE for ``cfg`` (stacks/constructs/shadow_stage.py), with the
    fake account's names."""
    stage = cfg.rollout.shadow
    if stage is None:
        return None
    dep = cfg.deployment
    return shadow_stage.ShadowRules(
        config_name=SHADOW_CONFIG,
        shadow_variant="shadow",
        capture_uri="s3://capture/datacapture",
        sample_percent=stage.sample_percent,
        min_seconds=stage.min_minutes * 60,
        max_seconds=stage.max_minutes * 60,
        compare_seconds=stage.compare_interval_minutes * 60,
        stage_update_timeout_seconds=dep.max_execution_timeout_seconds
        + dep.termination_wait_seconds,
        thresholds=stage.thresholds,
        canary_scaling=controller_scaling(ScalingProps.from_config(cfg), CONTROLLER_OWNED_VARIANT),
    )


def like_load_minutes(start: int, end: int) -> dict[int, MinuteLatency]:
    """CloudWatch's minutes over the comparison's window for a shadow at the primary's load per
    instance (in primary instances) with the primary's ModelLatency: the like-load evidence a
    pass needs (shadow_compare, "Latency at like loads")."""
    return {m: MinuteLatency(2000.0, 2000.0, 10.0, 10.0) for m in range(start // 60, end // 60)}


def alike_answers(cfg: DeploymentConfig, *, shadow_fail_every: int = 0) -> tuple[list, list]:
    """Both variants' captured answers for the shadow comparison: every adapter with enough of
    them, alike (a pass), or the shadow failing every ``shadow_fail_every``-th. The ok ones
    carry their times as the serving container writes them into each answer."""
    least = cfg.rollout.shadow.min_requests_per_adapter if cfg.rollout.shadow else 1
    sides: tuple[list[Answer], list[Answer]] = ([], [])
    for adapter in (a.name for a in cfg.adapters):
        for i in range(least):
            length = 150 + (i * 37) % 60
            e2e, ttft = 900.0 + (i * 53) % 400, 90.0 + (i * 17) % 40
            sides[0].append(Answer(adapter, True, e2e, ttft, length=length, text="ok"))
            failed = bool(shadow_fail_every) and i % shadow_fail_every == 0
            timed = (None, None) if failed else (e2e, ttft)
            sides[1].append(Answer(adapter, not failed, *timed, length=length, text="ok"))
    return sides


class Account(ComponentsMixin):
    """The account's state, its clients and its clock (module docstring; its inference components:
    tests/infra/fake_components.py)."""

    def __init__(self, root: Path, env: str, *, images: dict[str, str], now: datetime) -> None:
        self.root, self.env = root, env
        self.cfg = load_config(config_path(root, env), env=env)
        self.now = now.timestamp()
        self.serial = itertools.count(1)
        self.calls: list[str] = []
        self.faults: dict[str, list[Any]] = {}
        repo = self.cfg.image.repository_name
        assert repo, "the release deploys tags of image.repository_name"
        self.ecr: dict[str, set[str]] = {repo: {i.rsplit(":", 1)[1] for i in images.values()}}
        #: ``(repository, tag) -> digest`` where a push or a copy named one (else sha256:<tag>).
        self.digests: dict[tuple[str, str], str] = {}
        self.models: dict[str, str] = {}
        self.configs: dict[str, dict[str, dict[str, Any]]] = {}
        owned = controller_owned_variants(self.cfg.rollout.shadow)  # the stack registers none
        self.targets: dict[str, tuple[int, int]] = {
            v: (s.min_capacity, s.max_capacity)
            for v, s in self.cfg.scaling.variants.items()
            if v not in owned
        }
        #: Scaling policies by variant: ``{variant: {policy name: its configuration}}``.
        self.policies: dict[str, dict[str, Any]] = {}
        #: The shadow's count in each config created for it: ``(the primary's count then, the
        #: count)``.
        self.shadow_counts: list[tuple[int, int]] = []
        config = self._create_config(self.cfg, images)
        self.endpoint: dict[str, Any] = {
            "config": config,
            "status": "InService",
            "variants": {
                v: {
                    "weight": 0.0 if v == "canary" else 100.0,
                    "count": self.cfg.variants[v].initial_instance_count,
                }
                for v in VARIANT_NAMES
            },
        }
        self.controller = Controller(self, self.cfg)
        self._shadow_config(config)
        self._init_components()

    def _shadow_config(self, canary_config: str) -> None:
        """The shadow stage's endpoint config, which the stack creates beside the canary config
        and replaces with it: the same primary, the canary's Model as the shadow."""
        if self.cfg.rollout.shadow is None:
            return
        live = self.configs[canary_config]
        n = shadow_instances(self.cfg)
        self.configs[SHADOW_CONFIG] = {
            "primary": live["primary"],
            "shadow": {**live["canary"], "count": n, "weight": 0.0},
        }

    # ------------------------------------------------------------------ state, as tests read it

    def live_images(self) -> dict[str, str]:
        variants = self.configs[self.endpoint["config"]]
        return {v: self.models[variants[v]["model"]] for v in VARIANT_NAMES if v in variants}

    def state(self) -> dict[str, Any]:
        """What a release must leave behind, without ids, times or instance counts (those are
        autoscaling's and the preflight's, and depend on the hour a deploy ran)."""
        record = self.controller.record or {}
        return {
            "endpoint": self.endpoint["status"],
            "images": {v: i.rsplit(":", 1)[1] for v, i in self.live_images().items()},
            "weights": {v: s["weight"] for v, s in self.endpoint["variants"].items()},
            "canary_bounds": self.targets["canary"],
            "rollout": (
                record.get("status"),
                (str(record.get("rollback_reason", "")).split() or [""])[0],
            ),
        }

    # ------------------------------------------------------------------ the clock

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    # ------------------------------------------------------------------ failures

    def fail(self, key: str, error: tuple[str, int] | BaseException | None = None) -> None:
        """The next call named ``key`` (as :attr:`calls` names it: ``ecr.BatchGetImage``,
        ``lambda.Invoke start``, ``cdk deploy image_tag=...``) fails: with an AWS error code and
        its HTTP status (botocore's own retries already spent), or by raising the exception (a
        ``cdk deploy`` fails whatever the value: CloudFormation rolls the stack back). The call
        is logged with ``(failed: <code>)``."""
        self.faults.setdefault(key, []).append(error or ("InjectedFailure", 400))

    def _fault(self, key: str) -> Any:
        pending = self.faults.get(key)
        return pending.pop(0) if pending else None

    # ------------------------------------------------------------------ clients

    def clients(self) -> dict[str, Any]:
        """The tools' ``clients=``: one hooked boto3 client per service, the caller, the clock."""
        given: dict[str, Any] = {s: self._client(s) for s in SERVICES}
        given.update(caller="release-ci", clock=self.clock, sleep=self.sleep)
        return given

    def _client(self, service: str) -> Any:
        client = boto3.client(
            service, region_name=REGION, aws_access_key_id="fake", aws_secret_access_key="fake"
        )
        asked: dict[str, Any] = {}

        def keep(params: dict[str, Any], **_: Any) -> None:
            asked["params"] = dict(params)

        def answer(model: Any, **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
            return self._answer(service, model, asked.pop("params"))

        client.meta.events.register_first("before-parameter-build.*.*", keep)
        client.meta.events.register_first("before-call.*.*", answer)
        return client

    def _answer(self, service: str, model: Any, params: dict[str, Any]) -> Any:
        key = f"{service}.{model.name}"
        if model.name == "Invoke":
            key += " " + json.loads(params["Payload"])["action"]
        if model.name in COMPONENT_OPERATIONS and "InferenceComponentName" in params:
            key += " " + params["InferenceComponentName"]
        self.calls.append(key)
        fault = self._fault(key)
        if isinstance(fault, BaseException):
            self.calls[-1] += f" (failed: {type(fault).__name__})"
            raise fault
        if fault is not None:
            code, status = fault
            self.calls[-1] += f" (failed: {code})"
            return error(code, f"{code} (injected)", status)
        handler: Callable[[dict[str, Any]], Any] = getattr(
            self, "_" + key.split()[0].replace(".", "_").replace("-", "_")
        )
        parsed = handler(params)
        if isinstance(parsed, tuple):
            return parsed
        if model.output_shape is not None:
            validate_parameters(parsed, model.output_shape)
        return AWSResponse("https://fake", 200, {}, None), parsed

    # ------------------------------------------------------------------ SageMaker

    def _sagemaker_DescribeEndpoint(self, p: dict[str, Any]) -> Any:
        name = self.cfg.endpoint_name
        if p["EndpointName"] != name:
            return error("ValidationException", f'Could not find endpoint "{p["EndpointName"]}".')
        when = datetime.fromtimestamp(self.now, UTC)
        return {
            "EndpointName": name,
            "EndpointArn": arn("sagemaker", "endpoint", name),
            "EndpointConfigName": self.endpoint["config"],
            "EndpointStatus": self.endpoint["status"],
            "CreationTime": when,
            "LastModifiedTime": when,
            "ProductionVariants": [
                {
                    "VariantName": v,
                    "CurrentWeight": s["weight"],
                    "DesiredWeight": s["weight"],
                    "CurrentInstanceCount": s["count"],
                    "DesiredInstanceCount": s["count"],
                }
                for v, s in self.endpoint["variants"].items()
            ],
            **self._shadow_variants(),
        }

    def _shadow_variants(self) -> dict[str, Any]:
        """DescribeEndpoint's ``ShadowProductionVariants`` while the endpoint has the shadow."""
        s = self.endpoint.get("shadow")
        if s is None:
            return {}
        summary = {
            "CurrentWeight": s["weight"],
            "DesiredWeight": s["weight"],
            "CurrentInstanceCount": s["count"],
            "DesiredInstanceCount": s["count"],
        }
        return {"ShadowProductionVariants": [{"VariantName": "shadow", **summary}]}

    def _sagemaker_DescribeEndpointConfig(self, p: dict[str, Any]) -> Any:
        name = p["EndpointConfigName"]
        if name not in self.configs:
            return error("ValidationException", f'Could not find endpoint configuration "{name}".')
        listed = {
            v: {
                "VariantName": v,
                "ModelName": s["model"],
                "InstanceType": s["instance_type"],
                "InitialInstanceCount": s["count"],
                "InitialVariantWeight": s["weight"],
            }
            for v, s in self.configs[name].items()
        }
        shadow = listed.pop("shadow", None)  # the shadow config's shadow variant
        return {
            "EndpointConfigName": name,
            "EndpointConfigArn": arn("sagemaker", "endpoint-config", name),
            "CreationTime": datetime.fromtimestamp(self.now, UTC),
            "ProductionVariants": list(listed.values()),
            **({"ShadowProductionVariants": [shadow]} if shadow else {}),
        }

    def _sagemaker_DescribeModel(self, p: dict[str, Any]) -> Any:
        name = p["ModelName"]
        if name not in self.models:
            return error("ValidationException", f'Could not find model "{name}".')
        return {
            "ModelName": name,
            "PrimaryContainer": {"Image": self.models[name]},
            "ExecutionRoleArn": ROLE,
            "ModelArn": arn("sagemaker", "model", name),
            "CreationTime": datetime.fromtimestamp(self.now, UTC),
        }

    def _sagemaker_UpdateEndpointWeightsAndCapacities(self, p: dict[str, Any]) -> Any:
        live = {**self.endpoint["variants"], **self._shadow_live()}
        for item in p["DesiredWeightsAndCapacities"]:
            if item["VariantName"] not in live:
                return error("ValidationException", f"no variant {item['VariantName']}")
            if item["VariantName"] == "shadow":
                return error(
                    "ValidationException", count_refusal("shadow", self.endpoint["config"])
                )
            variant = live[item["VariantName"]]
            if "DesiredInstanceCount" in item:
                variant["count"] = item["DesiredInstanceCount"]
            if "DesiredWeight" in item:
                variant["weight"] = item["DesiredWeight"]
        return {"EndpointArn": arn("sagemaker", "endpoint", self.cfg.endpoint_name)}

    def _sagemaker_CreateEndpointConfig(self, p: dict[str, Any]) -> Any:
        """A config of the controller's (a sized shadow config): its variants as
        DescribeEndpointConfig answers them; the shadow's count recorded
        (:attr:`shadow_counts`, with the primary's count then)."""
        name = p["EndpointConfigName"]
        if name in self.configs:
            return error(
                "ValidationException",
                f'Cannot create already existing endpoint configuration "{name}".',
            )
        listed = [*p["ProductionVariants"], *p.get("ShadowProductionVariants", [])]
        self.configs[name] = {
            v["VariantName"]: {
                "model": v["ModelName"], "instance_type": v["InstanceType"],
                "count": v["InitialInstanceCount"], "weight": v.get("InitialVariantWeight", 1.0),
            }
            for v in listed
        }  # fmt: skip
        if "shadow" in self.configs[name]:
            primary = self.endpoint["variants"]["primary"]["count"]
            self.shadow_counts.append((primary, self.configs[name]["shadow"]["count"]))
        return {"EndpointConfigArn": arn("sagemaker", "endpoint-config", name)}

    def _sagemaker_UpdateEndpoint(self, p: dict[str, Any]) -> Any:
        """A move between configs (the controller's): refused as SageMaker refuses a blue/green
        move that renames variants (tests/sagemaker_refusals.py); a config with a shadow takes
        the canary variant off the endpoint and puts the shadow on at its count; the canary
        config brings the canary back at its initial weight and count (RetainAllVariantProperties
        keeps the primary's)."""
        config, live = p["EndpointConfigName"], self.endpoint
        if config not in self.configs:
            return error(
                "ValidationException", f'Could not find endpoint configuration "{config}".'
            )
        new = self.configs[config]
        refused = move_refusal(p, self.configs[live["config"]], new)
        if refused:
            return error("ValidationException", refused)
        if "shadow" in new:
            if "canary" in self.targets:  # SageMaker: deregister first (endpoint-scaling-update)
                return error("ValidationException", "the canary variant has autoscaling")
            live["variants"].pop("canary", None)
            live["shadow"] = {"weight": new["shadow"]["weight"], "count": new["shadow"]["count"]}
        else:
            spec = new["canary"]
            live["variants"]["canary"] = {"weight": spec["weight"], "count": spec["count"]}
            live.pop("shadow", None)
        live["config"] = config
        return {"EndpointArn": arn("sagemaker", "endpoint", self.cfg.endpoint_name)}

    def _shadow_live(self) -> dict[str, Any]:
        return {"shadow": self.endpoint["shadow"]} if "shadow" in self.endpoint else {}

    # ------------------------------------------------------------------ the others

    def _application_autoscaling_DescribeScalableTargets(self, p: dict[str, Any]) -> Any:
        wanted = set(p.get("ResourceIds") or [])
        found = []
        for v, (low, high) in self.targets.items():
            rid = resource_id(self.cfg.endpoint_name, v)
            if rid in wanted:
                found.append(
                    {
                        "ServiceNamespace": "sagemaker",
                        "ResourceId": rid,
                        "ScalableDimension": SCALABLE_DIMENSION,
                        "MinCapacity": low,
                        "MaxCapacity": high,
                        "RoleARN": ROLE,
                        "CreationTime": datetime.fromtimestamp(self.now, UTC),
                    }
                )
        return {"ScalableTargets": found}

    def _application_autoscaling_RegisterScalableTarget(self, p: dict[str, Any]) -> Any:
        """Bounds of a target, a new one or an existing one's; the count moves inside them
        ("changes the resource's current capacity to a value inside this range",
        RegisterScalableTarget)."""
        variant = p["ResourceId"].rsplit("/", 1)[-1]
        if variant not in self.targets and ("MinCapacity" not in p or "MaxCapacity" not in p):
            return error("ValidationException", "a new scalable target needs both bounds")
        low, high = self.targets.get(variant, (0, 0))
        low, high = p.get("MinCapacity", low), p.get("MaxCapacity", high)
        self.targets[variant] = (low, high)
        live = self.endpoint["variants"][variant]
        live["count"] = min(max(live["count"], low), high)
        return {"ScalableTargetARN": arn("application-autoscaling", "scalable-target", variant)}

    def _application_autoscaling_DeregisterScalableTarget(self, p: dict[str, Any]) -> Any:
        """The target gone, its policies with it (DeregisterScalableTarget)."""
        variant = p["ResourceId"].rsplit("/", 1)[-1]
        if self.targets.pop(variant, None) is None:
            return error("ObjectNotFoundException", f"no scalable target {p['ResourceId']}")
        self.policies.pop(variant, None)
        return {}

    def _application_autoscaling_PutScalingPolicy(self, p: dict[str, Any]) -> Any:
        """A policy on a registered target (created, or updated by its name)."""
        variant = p["ResourceId"].rsplit("/", 1)[-1]
        if variant not in self.targets:
            return error("ObjectNotFoundException", f"no scalable target {p['ResourceId']}")
        self.policies.setdefault(variant, {})[p["PolicyName"]] = p.get(
            "TargetTrackingScalingPolicyConfiguration"
        )
        return {"PolicyARN": arn("autoscaling", "scalingPolicy", p["PolicyName"])}

    def digest(self, repository: str, tag: str) -> str:
        return self.digests.get((repository, tag), f"sha256:{tag}")

    def _ecr_BatchGetImage(self, p: dict[str, Any]) -> Any:
        tags = self.ecr.get(p["repositoryName"], set())
        images, failures = [], []
        for image_id in p["imageIds"]:
            tag = image_id["imageTag"]
            if tag in tags:
                images.append(
                    {
                        "registryId": ACCOUNT_ID,
                        "repositoryName": p["repositoryName"],
                        "imageId": {
                            "imageTag": tag,
                            "imageDigest": self.digest(p["repositoryName"], tag),
                        },
                        "imageManifest": "{}",
                        "imageManifestMediaType": DOCKER_MANIFEST_V2,
                    }
                )
            else:
                failures.append(
                    {
                        "imageId": {"imageTag": tag},
                        "failureCode": "ImageNotFound",
                        "failureReason": "Requested image not found",
                    }
                )
        return {"images": images, "failures": failures}

    def _ecr_DescribeImages(self, p: dict[str, Any]) -> Any:
        repo = p["repositoryName"]
        wanted = {i["imageDigest"] for i in p["imageIds"]}
        held = {self.digest(repo, t) for t in self.ecr.get(repo, set())}
        if not wanted <= held:
            return error("ImageNotFoundException", f"no image {sorted(wanted - held)} in {repo}")
        return {
            "imageDetails": [
                {
                    "imageDigest": d,
                    "repositoryName": repo,
                    "imageManifestMediaType": DOCKER_MANIFEST_V2,
                }
                for d in sorted(wanted)
            ]
        }

    def _ecr_GetAuthorizationToken(self, p: dict[str, Any]) -> Any:
        token = base64.b64encode(b"AWS:fake-password").decode()
        data = {"authorizationToken": token, "proxyEndpoint": f"https://{REGISTRY}"}
        return {"authorizationData": [data]}

    def docker(self, command: Sequence[str], stdin: str | None) -> int:
        """The docker commands of tools/release_artifacts.py (module docstring); any other docker
        command (a build) fails the test: the account has no builder."""
        if command[:2] == ["docker", "login"]:
            self.calls.append("docker login")
            return 0
        assert command[:5] == [
            "docker",
            "buildx",
            "imagetools",
            "create",
            "--prefer-index=false",
        ], f"not a copy: {command}"
        target, source = command[command.index("--tag") + 1], command[-1]
        src_repo, digest = source.split("/", 1)[1].split("@")
        if digest not in {self.digest(src_repo, t) for t in self.ecr.get(src_repo, set())}:
            self.calls.append(f"docker imagetools create {target} (failed: no {digest})")
            return 1
        repo, tag = target.split("/", 1)[1].rsplit(":", 1)
        self.ecr.setdefault(repo, set()).add(tag)
        self.digests[(repo, tag)] = digest
        self.calls.append(f"docker imagetools create {target} {digest}")
        return 0

    def _lambda_Invoke(self, p: dict[str, Any]) -> Any:
        assert p["FunctionName"] == names.controller_function_name(self.cfg.endpoint_name)
        payload, failed = self.controller.handle(json.loads(p["Payload"]))
        answer: dict[str, Any] = {
            "StatusCode": 200,
            "ExecutedVersion": "$LATEST",
            "Payload": io.BytesIO(json.dumps(payload).encode()),
        }
        if failed:
            answer["FunctionError"] = "Unhandled"
        return answer

    # ------------------------------------------------------------------ CloudFormation

    def cdk_deploy(self, cmd: list[str], **_: Any) -> CompletedProcess[bytes]:
        """``subprocess.run`` of tools/deploy.py's ``cdk deploy`` command (module docstring)."""
        assert cmd[:6] == ["npx", "cdk", "deploy", *deployed_stacks(self.cfg)], cmd
        context = dict(cmd[i + 1].split("=", 1) for i, arg in enumerate(cmd) if arg == "-c")
        env = context.pop("env")
        key = " ".join(["cdk deploy", *(f"{k}={v}" for k, v in context.items())])
        self.calls.append(key)
        cfg = DeployOptions.from_context(context.get).apply(
            load_config(config_path(self.root, env), env=env)
        )
        if self._fault(key) is not None:
            self.calls.append("cloudformation: update failed, stack rolled back")
            return CompletedProcess(cmd, 1)
        wanted = {v: self._variant(cfg, v, image) for v, image in image_uris(cfg).items()}
        live = self.configs[self.endpoint["config"]]
        if all(
            {**live[v], "model": self.models[live[v]["model"]]} == wanted[v] for v in VARIANT_NAMES
        ):
            self.calls.append("cloudformation: no changes")
            return CompletedProcess(cmd, 0)
        old = self.endpoint["config"]
        config = self._create_config(cfg, image_uris(cfg), reuse=live)
        reset = set(cfg.deployment.reset_on_update)
        for v, spec in self.configs[config].items():
            variant = self.endpoint["variants"][v]
            if "DesiredWeight" in reset:
                variant["weight"] = spec["weight"]
            if "DesiredInstanceCount" in reset:
                variant["count"] = spec["count"]
        self.endpoint["config"] = config
        self.calls.append(f"cloudformation: UpdateEndpoint {config}")
        self._shadow_config(config)
        kept = {s["model"] for s in self.configs[config].values()}
        for gone in {s["model"] for s in self.configs.pop(old).values()} - kept:
            del self.models[gone]  # the replaced Models and EndpointConfig: cleanup phase
        return CompletedProcess(cmd, 0)

    @staticmethod
    def _variant(cfg: DeploymentConfig, v: str, image: str) -> dict[str, Any]:
        spec = cfg.variants[v]
        return {
            "model": image,
            "instance_type": spec.instance_type,
            "count": spec.initial_instance_count,
            "weight": float(spec.initial_weight),
        }

    def _create_config(
        self, cfg: DeploymentConfig, images: dict[str, str], reuse: dict[str, Any] | None = None
    ) -> str:
        variants = {}
        for v in VARIANT_NAMES:
            spec = self._variant(cfg, v, images[v])
            model = (reuse or {}).get(v, {}).get("model")
            if model is None or self.models[model] != images[v]:
                model = f"{v.capitalize()}Model-{next(self.serial)}"
                self.models[model] = images[v]
                if reuse is not None:
                    self.calls.append(f"cloudformation: CreateModel {model} {images[v]}")
            variants[v] = {**spec, "model": model}
        name = f"EndpointConfig-{next(self.serial)}"
        self.configs[name] = variants
        if reuse is not None:
            self.calls.append(f"cloudformation: CreateEndpointConfig {name}")
        return name


def error(code: str, message: str, status: int = 400) -> tuple[AWSResponse, dict[str, Any]]:
    """An AWS error answer, raised by botocore as the service's ClientError class."""
    return AWSResponse("https://fake", status, {}, None), {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
