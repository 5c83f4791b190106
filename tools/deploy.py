"""`make deploy ENV=prod [RESET=DesiredWeight]`: read the live endpoint, then deploy in the order
SageMaker needs (``python -m tools.deploy --env prod [--reset DesiredWeight] [--dry-run]``).

SageMaker developer guide, "Update endpoints that use auto scaling"
(https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-scaling-update.html): an update that
changes the instance type of a variant registered with Application Auto Scaling fails, and
autoscaling is blocked for the whole update, so the guide deregisters first and raises instance
counts with UpdateEndpointWeightsAndCapacities before updating. This tool does that:

1. DescribeEndpoint + DescribeEndpointConfig + DescribeScalableTargets: live instance types,
   desired counts and weights, which variants are registered (and their max capacity).
2. Raise desired counts (never lower) to what the update needs: the highest minimum the schedules
   hold while it runs, and, when this deploy resets weights, each variant's new share of today's
   traffic (sizing.update_semantics.prescale_counts); wait for InService.
3. When a registered variant's instance type changes: deploy once with that variant's scaling
   left out of the template and its type pinned to the live one (CloudFormation deregisters the
   target; sizing.deploy_options), then deploy the real config, which changes the type and
   registers scaling again. If that second deploy fails, deploy the live type with scaling on,
   so no path ends with a variant that cannot scale.
4. Otherwise one `cdk deploy`.

Before any of it, the canary controller is asked for its record: while a rollout holds the
endpoint (RUNNING or ROLLING_BACK) a deploy would replace the variants under the controller's
weights and bounds, so the deploy is refused, naming the rollout and how to end it.
``--skip-rollout-check`` deploys anyway (e.g. when the controller itself cannot be read).

Each variant's image is decided against what it runs (tools/live_images.py):
``IMAGE_TAG=canary=TAG`` changes the canary alone (the primary keeps the repository tag it runs,
so a release run again from the top after ``make promote`` does not undo the promotion);
``IMAGE_TAG=live`` keeps what every variant runs; and a config change deployed without
``IMAGE_TAG`` is refused where it would replace a release's image with one built from
container/. While a COMPLETED rollout waits for its promotion (the canary on up to 100 % of the
traffic), a deploy that gives the canary another image is refused: it would put an image no
rollout baked on that traffic.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, cast

from botocore.exceptions import ClientError

from container.model_prep.artifact import ArtifactError
from lambdas.canary_controller import canary_scaling
from lambdas.canary_controller.names import COMPLETED, LOCKED
from simulator.schedule import schedule_floor
from sizing.deploy_options import DeployOptions
from sizing.ready_bound import ready_seconds as ready_bound_seconds
from sizing.update_semantics import VARIANT_NAMES, prescale_counts, update_phases
from stacks.constructs.scaling import SCALABLE_DIMENSION, resource_id
from tools import REPO_ROOT
from tools.aws_command import client, error_code, run_on_config
from tools.canary import ControllerError, rollout_record
from tools.live_images import ImageRefused, live_image_uris, repository_tag, resolve
from tools.model_release import ensure_release
from tools.synth import add_release_args, release_options
from typed_config import (
    DeploymentConfig,
    VariantName,
    VariantProperty,
    release_stack_name,
    stack_name,
)
from typed_config.shadow import controller_owned_variants

#: UpdateEndpointWeightsAndCapacities is refused while the endpoint is Updating (autoscaling or
#: a deploy acting): wait for InService and try again this many times.
RAISE_ATTEMPTS = 5


class DeployRefused(RuntimeError):
    """The live endpoint is in a state no deploy should start from; the message says why."""


def live_placement(production_variant: Mapping[str, Any]) -> str:
    """A live ProductionVariant's instance types as ``VariantConfig.placement`` writes them:
    ``InstanceType``, or its ``InstancePools`` by priority joined with ``+`` (an endpoint
    config with instance pools carries no InstanceType: developer guide, "Deploy to multiple
    instance types with instance pools")."""
    pools = production_variant.get("InstancePools")
    if pools:
        return "+".join(p["InstanceType"] for p in sorted(pools, key=lambda p: p["Priority"]))
    return str(production_variant["InstanceType"])


@dataclass(frozen=True)
class LiveVariant:
    #: ``VariantConfig.placement`` of the live config: a type, or pool types joined with ``+``.
    instance_type: str
    desired: int
    weight: float
    max_capacity: int | None  # the registered scalable target's MaxCapacity (None: unregistered)
    min_capacity: int | None = None  # and its MinCapacity


@dataclass(frozen=True)
class LiveEndpoint:
    status: str
    config_name: str
    variants: dict[str, LiveVariant]
    #: ``{variant: ModelName}`` of the live endpoint config.
    models: dict[str, str] = field(default_factory=dict)

    @property
    def registered(self) -> frozenset[str]:
        return frozenset(v for v, lv in self.variants.items() if lv.max_capacity is not None)


def read_live(sm: Any, aas: Any, cfg: DeploymentConfig) -> LiveEndpoint | None:
    """The deployed endpoint, or None when it does not exist yet (first deploy)."""
    try:
        desc = sm.describe_endpoint(EndpointName=cfg.endpoint_name)
    except ClientError as err:
        message = err.response.get("Error", {}).get("Message", "")
        if error_code(err) == "ValidationException" and "Could not find" in message:
            return None
        raise
    econf = sm.describe_endpoint_config(EndpointConfigName=desc["EndpointConfigName"])
    types = {pv["VariantName"]: live_placement(pv) for pv in econf["ProductionVariants"]}
    targets = aas.describe_scalable_targets(
        ServiceNamespace="sagemaker",
        ResourceIds=[resource_id(cfg.endpoint_name, v) for v in types],
        ScalableDimension=SCALABLE_DIMENSION,
    )["ScalableTargets"]
    maxima = {t["ResourceId"].rsplit("/", 1)[-1]: int(t["MaxCapacity"]) for t in targets}
    minima = {t["ResourceId"].rsplit("/", 1)[-1]: int(t["MinCapacity"]) for t in targets}
    variants = {
        pv["VariantName"]: LiveVariant(
            instance_type=types[pv["VariantName"]],
            desired=int(pv.get("DesiredInstanceCount", pv.get("CurrentInstanceCount", 0))),
            weight=float(pv.get("DesiredWeight", pv.get("CurrentWeight", 0.0))),
            max_capacity=maxima.get(pv["VariantName"]),
            min_capacity=minima.get(pv["VariantName"]),
        )
        for pv in desc.get("ProductionVariants", [])
    }
    models = {pv["VariantName"]: str(pv.get("ModelName", "")) for pv in econf["ProductionVariants"]}
    return LiveEndpoint(desc["EndpointStatus"], desc["EndpointConfigName"], variants, models)


@dataclass(frozen=True)
class Step:
    action: Literal["raise", "release-scaling", "deploy"]
    why: str
    counts: dict[VariantName, int] = field(default_factory=dict)
    #: ``release-scaling``: the variants whose scalable target this tool deregisters itself (the
    #: canary controller's, which no template owns: lambdas/canary_controller/canary_scaling.py).
    released: frozenset[str] = frozenset()
    options: DeployOptions = field(default_factory=DeployOptions)
    #: Deployed when this step fails, to leave every variant registered for scaling.
    recover_with: DeployOptions | None = None


def plan_deploy(
    cfg: DeploymentConfig,
    live: LiveEndpoint | None,
    *,
    now: datetime,
    reset: tuple[VariantProperty, ...] | None = None,
    ready_seconds: float | None = None,
) -> list[Step]:
    """The steps of this deploy, from the config and the live endpoint alone (no AWS call).
    ``ready_seconds``: when the update's new instances serve; None: the plan's per-start bound
    for the config deployed (sizing.ready_bound, from the measured start)."""
    base = DeployOptions(reset=reset)
    target = base.apply(cfg)
    if live is None:
        return [Step("deploy", "first deploy: the endpoint does not exist yet", options=base)]
    _refuse_unless_updatable(cfg, live)
    changed = {
        v: live.variants[v].instance_type
        for v in VARIANT_NAMES
        # a change of instance pools counts as a change of instance type: AWS documents the
        # scalable-target rule for InstanceType only, so the safe reading deregisters first
        if live.variants[v].instance_type != target.variants[v].placement
    }
    registered = frozenset(v for v in changed if v in live.registered)
    # the canary controller's targets (rollout.shadow) are in no template: deregistered here
    handed = registered & controller_owned_variants(cfg.rollout.shadow)
    suspend = registered - handed
    steps = _raise_steps(target, live, now=now, ready_seconds=ready_seconds, twice=bool(suspend))
    if handed:
        steps.append(
            Step(
                "release-scaling",
                f"deregister the autoscaling of {', '.join(sorted(handed))} (the canary "
                "controller's, in no template; an update that changes the instance type fails "
                "while it is registered): the controller registers it again at the next "
                "rollout's canary stage",
                released=handed,
            )
        )
    if not suspend:
        steps.append(Step("deploy", "deploy the config (blue/green update)", options=base))
        return steps
    return steps + _type_change_steps(target, changed, suspend, base=base, reset=reset)


def _refuse_unless_updatable(cfg: DeploymentConfig, live: LiveEndpoint) -> None:
    """A blue/green update starts from an InService endpoint with the config's variant names."""
    if live.status != "InService":
        raise DeployRefused(
            f"{cfg.endpoint_name} is {live.status}; deploy from InService only (an Updating "
            "endpoint is already changing, a Failed one needs its cause read first: "
            "DescribeEndpoint FailureReason)"
        )
    if set(live.variants) != set(VARIANT_NAMES):
        raise DeployRefused(
            f"live variants {sorted(live.variants)} differ from {list(VARIANT_NAMES)}: "
            "a blue/green update must keep the same variant names"
        )


def _raise_steps(
    target: DeploymentConfig,
    live: LiveEndpoint,
    *,
    now: datetime,
    ready_seconds: float | None,
    twice: bool,
) -> list[Step]:
    """The ``raise`` step, when a variant needs more instances than it runs to last the window
    autoscaling is blocked: the update's, ``twice`` when scaling is suspended for a type change
    (two updates), against the schedules' floors in that window and the live ceilings."""
    desired = {v: live.variants[v].desired for v in VARIANT_NAMES}
    ready = ready_seconds if ready_seconds is not None else ready_bound_seconds(target)
    phases = update_phases(target, ready_seconds=ready, fleet=max(desired.values()))
    window = timedelta(seconds=phases.complete * (2 if twice else 1))
    floors = {v: schedule_floor(target.scaling, v, now, now + window) for v in VARIANT_NAMES}
    caps = {
        v: live.variants[v].max_capacity or target.scaling.variants[v].max_capacity
        for v in VARIANT_NAMES
    }
    counts = prescale_counts(
        target,
        live_desired=desired,
        live_weights={v: live.variants[v].weight for v in VARIANT_NAMES},
        floors=floors,
        caps=caps,
    )
    raised = {v: n for v, n in counts.items() if n > desired[v]}
    if not raised:
        return []
    return [
        Step(
            "raise",
            "raise desired counts before the update blocks autoscaling for "
            f"~{window.total_seconds() / 60:.0f} min: "
            + ", ".join(f"{v} {desired[v]} -> {n}" for v, n in raised.items()),
            counts=raised,
        )
    ]


def _type_change_steps(
    target: DeploymentConfig,
    changed: dict[VariantName, str],
    suspend: frozenset[VariantName],
    *,
    base: DeployOptions,
    reset: tuple[VariantProperty, ...] | None,
) -> list[Step]:
    """An instance type change under registered scaling: two updates, the first deregistering
    the scaling of ``suspend`` on its live type, the second changing the type and registering
    it again (on its failure, the live type is deployed again so that every variant is left
    registered for scaling)."""
    moves = ", ".join(
        f"{v} {changed[v]} -> {target.variants[v].placement}" for v in sorted(suspend)
    )
    pins = {v: changed[v] for v in suspend}
    return [
        Step(
            "deploy",
            f"deregister scaling of {', '.join(sorted(suspend))} on its live instance type "
            f"(an update that changes the type fails while registered: {moves})",
            options=DeployOptions(suspend_scaling=suspend, pin_instance_types=pins, reset=reset),
        ),
        Step(
            "deploy",
            f"change the instance type ({moves}) and register scaling again",
            options=base,
            recover_with=DeployOptions(pin_instance_types=pins, reset=reset),
        ),
    ]


def image_tags_in_use(cfg: DeploymentConfig) -> list[str]:
    """The tags the variants run (image.tag, variants.<name>.image_tag), each once."""
    tags = [cfg.image.tag, cfg.variants.primary.image_tag, cfg.variants.canary.image_tag]
    return sorted({t for t in tags if t})


def refuse_missing_image_tags(
    ecr: Any, cfg: DeploymentConfig, digest: str | None = None, tag: str | None = None
) -> None:
    """Raise DeployRefused naming each tag the deploy would run that is not in the repository:
    SageMaker would accept the update and fail creating the endpoint config's instances, with
    the endpoint Updating for as long as its health check allows. BatchGetImage answers a
    missing tag in ``failures`` (ImageNotFound) rather than with an error (Amazon ECR API
    reference, BatchGetImage). With ``digest`` (IMAGE_DIGEST=, a promoted release), ``tag``
    must be that image: its digest is the one the source environment built and tested."""
    tags = image_tags_in_use(cfg)
    if not tags or not cfg.image.repository_name:
        if digest:
            raise DeployRefused(f"IMAGE_DIGEST={digest} needs IMAGE_TAG naming its tag")
        return
    answer = ecr.batch_get_image(
        repositoryName=cfg.image.repository_name,
        imageIds=[{"imageTag": t} for t in tags],
        acceptedMediaTypes=["application/vnd.docker.distribution.manifest.v2+json",
                            "application/vnd.oci.image.manifest.v1+json"],
    )  # fmt: skip
    missing = sorted(str(f.get("imageId", {}).get("imageTag")) for f in answer.get("failures", []))
    if missing:
        raise DeployRefused(
            f"image tag(s) {missing} not in ECR repository {cfg.image.repository_name}: build "
            f"and push first (make build-image ENV={cfg.env} IMAGE=<repository uri>:<tag>, then "
            "docker push); nothing was changed"
        )
    if digest:
        found = {
            str(i["imageId"].get("imageTag")): str(i["imageId"].get("imageDigest"))
            for i in answer.get("images", [])
        }
        if tag not in found:
            raise DeployRefused(f"IMAGE_DIGEST={digest}: IMAGE_TAG names no tag {tag!r}")
        if found[tag] != digest:
            raise DeployRefused(
                f"{cfg.image.repository_name}:{tag} is {found[tag]}, not the promoted {digest}: "
                "this deploy would run an image the source environment did not test; nothing "
                "was changed"
            )


def promoted_tag(image_tag: str) -> str:
    """The one tag IMAGE_TAG names (``TAG`` or ``<variant>=TAG``, every part the same): the tag
    IMAGE_DIGEST is checked against."""
    tags = {part.rpartition("=")[2] for part in image_tag.split(",") if part}
    if len(tags) != 1:
        raise DeployRefused(
            f"IMAGE_DIGEST needs IMAGE_TAG to name one tag (the promoted one), not {image_tag!r}"
        )
    return tags.pop()


def refuse_during_rollout(
    lambda_client: Any, cfg: DeploymentConfig, images: Mapping[str, str] | None = None
) -> None:
    """Raise DeployRefused while a canary rollout holds the endpoint, or while a COMPLETED one
    waits for its promotion and this deploy would give the canary another image than it runs
    (``images``: the live variants' image URIs; module docstring)."""
    try:
        state = rollout_record(lambda_client, cfg)
    except ControllerError as exc:
        raise DeployRefused(
            f"could not read the canary rollout's state ({exc}); fix the controller, or deploy "
            "with --skip-rollout-check (SKIP_ROLLOUT_CHECK=1) if no rollout is running"
        ) from exc
    env = f"ENV={cfg.env}"
    if state is not None and state.get("status") == COMPLETED:
        running = (images or {}).get("canary")
        tag = cfg.variants.canary.image_tag or cfg.image.tag
        if running is not None and repository_tag(running, cfg.image.repository_name) != tag:
            raise DeployRefused(
                f"canary rollout {state.get('rollout_id')!r} COMPLETED and is not promoted yet: "
                f"the canary serves its last step's traffic on {running}, and this deploy would "
                f"give it {tag or 'an image built from container/'}, which no rollout baked. "
                f"Promote it first (make promote {env}) or roll it back "
                f"(make canary-rollback {env}), then deploy; nothing was changed"
            )
        return
    if state is None or state.get("status") not in LOCKED:
        return
    raise DeployRefused(
        f"canary rollout {state.get('rollout_id')!r} is {state.get('status')} on "
        f"{cfg.endpoint_name} (last: {state.get('last_decision')}, {state.get('last_reason')}); "
        "a deploy now would replace the variants under it. Wait for it to end "
        f"(make canary-status {env}) or end it (make canary-rollback {env}), then deploy"
    )


def wait_in_service(
    sm: Any,
    name: str,
    *,
    deadline: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    while True:
        status = sm.describe_endpoint(EndpointName=name)["EndpointStatus"]
        if status == "InService":
            return
        if status in ("Failed", "OutOfService"):
            raise DeployRefused(f"{name} became {status} while waiting for InService")
        if clock() >= deadline:
            raise DeployRefused(f"{name} still {status} at the deadline; nothing was deployed")
        sleep(30)


def raise_counts(
    sm: Any, name: str, counts: dict[VariantName, int], *, deadline: float, **wait: Any
) -> None:
    """UpdateEndpointWeightsAndCapacities, retried after InService while the endpoint is busy."""
    request = [{"VariantName": v, "DesiredInstanceCount": n} for v, n in sorted(counts.items())]
    for attempt in range(1, RAISE_ATTEMPTS + 1):
        try:
            sm.update_endpoint_weights_and_capacities(
                EndpointName=name, DesiredWeightsAndCapacities=request
            )
            break
        except ClientError as err:
            if error_code(err) != "ValidationException":
                raise
            if attempt == RAISE_ATTEMPTS:
                raise DeployRefused(
                    f"could not raise counts after {attempt} attempts: {err}; nothing deployed"
                ) from None
            wait_in_service(sm, name, deadline=deadline, **wait)
    wait_in_service(sm, name, deadline=deadline, **wait)


def register_bounds(aas: Any, endpoint: str, variant: VariantName, low: int, high: int) -> None:
    aas.register_scalable_target(
        ServiceNamespace="sagemaker",
        ResourceId=resource_id(endpoint, variant),
        ScalableDimension=SCALABLE_DIMENSION,
        MinCapacity=low,
        MaxCapacity=high,
    )


def raise_minimums(
    aas: Any, endpoint: str, counts: dict[VariantName, int], live: LiveEndpoint
) -> dict[VariantName, tuple[int, int]]:
    """Raise each registered variant's MinCapacity to the count this deploy needs, so a scale-in
    policy cannot take the raised count back before the update starts (in image.mode build the
    wait includes the image build). Application Auto Scaling API reference,
    RegisterScalableTarget: on an existing target it "changes the resource's current capacity to
    a value inside this range", and scale-in stops at MinCapacity; SageMaker developer guide,
    "Update endpoints that use auto scaling", raises the minimum before an update the same way.
    Returns ``{variant: (MinCapacity before, MinCapacity set)}`` for :func:`restore_minimums`."""
    raised: dict[VariantName, tuple[int, int]] = {}
    for variant, count in sorted(counts.items()):
        target = live.variants.get(variant)
        if target is None or target.max_capacity is None or target.min_capacity is None:
            continue  # not registered: nothing scales it in
        if count <= target.min_capacity:
            continue
        register_bounds(aas, endpoint, variant, count, max(count, target.max_capacity))
        raised[variant] = (target.min_capacity, count)
        print(f"{variant}: scaling minimum {target.min_capacity} -> {count} for the update")
    return raised


def restore_minimums(aas: Any, endpoint: str, raised: dict[VariantName, tuple[int, int]]) -> None:
    """Put back each minimum :func:`raise_minimums` raised, unless something else set it since
    (the deploy's template, a scheduled action): then it is theirs. Runs after a failed deploy
    too, so no path leaves the raised minimum behind."""
    if not raised:
        return
    targets = aas.describe_scalable_targets(
        ServiceNamespace="sagemaker",
        ResourceIds=[resource_id(endpoint, v) for v in raised],
        ScalableDimension=SCALABLE_DIMENSION,
    )["ScalableTargets"]
    now = {t["ResourceId"].rsplit("/", 1)[-1]: t for t in targets}
    for variant, (before, set_to) in sorted(raised.items()):
        target = now.get(variant)
        if target is None or int(target["MinCapacity"]) != set_to:
            print(f"{variant}: scaling minimum left as the deploy or a schedule set it")
            continue
        register_bounds(aas, endpoint, variant, before, int(target["MaxCapacity"]))
        print(f"{variant}: scaling minimum back to {before}")


def deployed_stacks(cfg: DeploymentConfig) -> list[str]:
    """What ``make deploy`` deploys: the model release, image and endpoint stacks, by name. Not
    ``--all``: the deploy-access stack (IAM for CI, stacks/deploy_access_stack.py) changes only
    through ``make deploy-access``, where the CLI asks before broadening IAM; this command runs
    with ``--require-approval never``."""
    return [release_stack_name(cfg), stack_name(cfg, "image"), stack_name(cfg, "endpoint")]


def cdk_deploy_command(cfg: DeploymentConfig, options: DeployOptions, out: Path) -> list[str]:
    ctx = [f"env={cfg.env}"] + [f"{k}={v}" for k, v in options.as_context().items()]
    return [
        "npx",
        "cdk",
        "deploy",
        *deployed_stacks(cfg),
        "--app",
        f"{sys.executable} app.py",
        *[arg for c in ctx for arg in ("-c", c)],
        "--output",
        str(out),
        "--require-approval",
        "never",
        # A named resource kept by RetainExceptOnCreate outlives its stack (a deleted and
        # re-created stack) and SageMaker itself creates /aws/sagemaker/Endpoints/<name> once an
        # endpoint has run: a plain create would fail with "already exists". CloudFormation
        # imports such a resource instead when it has a static custom name in the template, a
        # DeletionPolicy of Retain or RetainExceptOnCreate, belongs to no other stack and its type
        # supports import (CloudFormation user guide, "Import AWS resources into a CloudFormation
        # stack automatically"; CDK CLI `cdk deploy --import-existing-resources`). AWS recommends
        # drift detection on imported resources afterwards (docs/day2-deploys.md).
        IMPORT_EXISTING,
    ]


#: cdk deploy's flag for CloudFormation's automatic import of existing named resources.
IMPORT_EXISTING = "--import-existing-resources"


def execute(
    steps: list[Step],
    cfg: DeploymentConfig,
    *,
    sm: Any,
    deploy: Callable[[DeployOptions], int],
    aas: Any,
    live: LiveEndpoint | None,
    timeout_seconds: float = 3600,
    **wait: Any,
) -> int:
    raised: dict[VariantName, tuple[int, int]] = {}
    try:
        return _execute(steps, cfg, sm=sm, deploy=deploy, aas=aas, live=live, raised=raised,
                        timeout_seconds=timeout_seconds, **wait)  # fmt: skip
    finally:
        restore_minimums(aas, cfg.endpoint_name, raised)


def _execute(
    steps: list[Step],
    cfg: DeploymentConfig,
    *,
    sm: Any,
    deploy: Callable[[DeployOptions], int],
    aas: Any,
    live: LiveEndpoint | None,
    raised: dict[VariantName, tuple[int, int]],
    timeout_seconds: float,
    **wait: Any,
) -> int:
    clock = wait.get("clock", time.monotonic)
    for step in steps:
        print(f"==> {step.why}")
        if step.action == "raise":
            deadline = clock() + timeout_seconds
            if live is not None:
                raised.update(raise_minimums(aas, cfg.endpoint_name, step.counts, live))
            # One variant per call, each until InService: the endpoint takes one update at a time.
            for variant, count in sorted(step.counts.items()):
                raise_counts(sm, cfg.endpoint_name, {variant: count}, deadline=deadline, **wait)
            continue
        if step.action == "release-scaling":
            for owned in sorted(step.released):
                canary_scaling.release(aas, cfg.endpoint_name, owned)
            continue
        rc = deploy(step.options)
        if rc == 0:
            continue
        print(f"cdk deploy exited {rc}: CloudFormation rolls the stack back to the template "
              "it last deployed (the endpoint returns to the EndpointConfig it ran); fix the "
              f"cause above and run make deploy ENV={cfg.env} again", file=sys.stderr)  # fmt: skip
        if step.recover_with is not None:
            print("==> the update failed: deploying the live instance type with scaling on")
            again = deploy(step.recover_with)
            state = "registered again" if again == 0 else "STILL DEREGISTERED (deploy failed)"
            print(f"scaling {state}; instance type unchanged", file=sys.stderr)
        return rc
    return 0


def main(
    argv: list[str] | None = None,
    *,
    clients: dict[str, Any] | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> int:
    """``now``: the clock the steps are planned at (a schedule's floor due within the update's
    block raises the counts first); tests pass a fixed one."""
    parser = argparse.ArgumentParser(prog="python -m tools.deploy", description=__doc__)
    parser.add_argument("--env", required=True)
    parser.add_argument(
        "--reset",
        default=None,
        help="reset these variant properties in this deploy only, e.g. DesiredWeight to promote",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the steps, change nothing")
    parser.add_argument(
        "--skip-rollout-check",
        action="store_true",
        help="deploy even while the canary controller records a rollout (or cannot be read)",
    )
    add_release_args(parser)
    parser.add_argument(
        "--image-digest",
        default="",
        help="the digest IMAGE_TAG's tag must be (a promoted release: make promote-image)",
    )
    args = parser.parse_args(argv)
    given = clients or {}

    def command(cfg: DeploymentConfig) -> int:
        reset = DeployOptions.from_context({"reset": args.reset}.get).reset
        sm = client(given, "sagemaker", cfg.region)
        aas = client(given, "application-autoscaling", cfg.region)
        live = read_live(sm, aas, cfg)
        images = live_image_uris(sm, live.models) if live is not None else {}
        try:
            release = resolve(cfg, release_options(args), images)
        except ImageRefused as exc:
            raise DeployRefused(str(exc)) from None
        cfg = release.apply(cfg)  # IMAGE_TAG= / ARTIFACT=: validated like the YAML
        out = REPO_ROOT / "cdk.out" / cfg.env
        runner = cast(
            Callable[[DeployOptions], int],
            given.get("deploy")
            or (
                lambda o: (
                    subprocess.run(
                        cdk_deploy_command(cfg, o.merged(release), out), cwd=REPO_ROOT
                    ).returncode
                )
            ),
        )
        steps = plan_deploy(cfg, live, now=now(), reset=reset)
        if live is not None and not args.skip_rollout_check:
            refuse_during_rollout(client(given, "lambda", cfg.region), cfg, images)
        for i, step in enumerate(steps, 1):
            detail = step.counts if step.action == "raise" else step.options.as_context()
            print(f"step {i}: {step.action} {detail or ''} - {step.why}")
        if args.dry_run:
            return 0
        promoted = promoted_tag(args.image_tag) if args.image_digest else None
        refuse_missing_image_tags(
            client(given, "ecr", cfg.region), cfg, args.image_digest, promoted
        )
        if cfg.image.mode == "build" and "deploy" not in given:
            # cdk deploy builds the image, which bakes the model release from
            # build/model-artifacts/<version>: fetched and verified here, before any change.
            try:
                ensure_release(cfg)
            except ArtifactError as exc:
                raise DeployRefused(f"{exc}") from exc
        return execute(steps, cfg, sm=sm, deploy=runner, aas=aas, live=live)

    return run_on_config(REPO_ROOT, args.env, command, refused=DeployRefused)


if __name__ == "__main__":
    sys.exit(main())
