"""One adapter version onto the live endpoint, with evidence before it takes all of its traffic,
and back alone on bad evidence. No image build, no base redeploy: the only calls that change
anything are on the adapter's own inference components.

What SageMaker gives, and why it is not enough for an adapter:

- **IC rolling update with alarms** (UpdateInferenceComponent's ``DeploymentConfig``:
  ``RollingUpdatePolicy`` + ``AutoRollbackConfiguration``): "For each step, SageMaker AI
  provisions capacity on the new endpoint fleet, routes traffic to that fleet, and terminates
  capacity on the old endpoint fleet. The value must be between 5% to 50% of the copy count of
  the inference component"; ``WaitIntervalInSeconds`` is the bake "during which SageMaker AI
  monitors alarms for each batch" (API reference, InferenceComponentRollingUpdatePolicy,
  https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_InferenceComponentRollingUpdatePolicy.html).
  Its steps are batches of *copies*. An adapter component has none of its own: it "uses the
  compute resources that you assigned to the base inference component", and
  ``ComputeResourceRequirements`` is to be omitted for it (API reference,
  InferenceComponentSpecification,
  https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_InferenceComponentSpecification.html;
  developer guide, "Fine-tune models with adapter inference components",
  https://docs.aws.amazon.com/sagemaker/latest/dg/realtime-endpoints-adapt.html). AWS describes
  adapter changes as "atomic operations for adding, deleting, or updating individual adapters
  across a SageMaker endpoint's running instances" (AWS Machine Learning blog, "Easily deploy and
  manage hundreds of LoRA adapters with SageMaker efficient multi-adapter inference"). So an
  updated adapter component takes all of its traffic at once: a rolling update has no partial
  step to gather evidence in, and its alarms can only undo an adapter that already served everyone.
- **No traffic split between components**: a client names the component it invokes
  (``InferenceComponentName``); there is no weight between two components as between variants.

What the product adds (this module):

1. **A candidate component beside the live one**: CreateInferenceComponent
   ``<adapter component>-next`` on the same base (``BaseInferenceComponentName``), the new
   version's ``ArtifactUrl``. The live component, and every client that names it, keeps the
   previous version meanwhile. The base component, the endpoint config and the image are never
   touched (tests/infra/test_adapter_release.py asserts no call names them).
2. **Evidence per adapter, by the canary's own rules**: the candidate serves probes (the
   release's held-out prompts, as a request to the adapter's live component would carry them),
   the live component the same ones; after the bake, AWS/SageMaker ``Invocations`` and
   ``Invocation5XXErrors`` of each component (dimension ``InferenceComponentName``: "Monitor
   SageMaker AI with Amazon CloudWatch",
   https://docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html) are judged by the
   canary controller's ``rules.judge`` (lambdas/canary_controller/rules.py): enough invocations,
   a 5XX rate not worse than the live version's by more than the canary's margin. No evidence is
   never health: the release holds, then rolls back after the evidence timeout, as the canary
   does. A watched alarm in ALARM rolls back at once.
3. **The swap, then a watch**: UpdateInferenceComponent of the live component to the new
   ``ArtifactUrl`` (atomic, above); its alarms are watched for ``watch_minutes``; an alarm puts
   the previous ``ArtifactUrl`` back (the same call). Then the candidate component is deleted.
4. **Rollback alone**: before the swap, deleting the candidate is the whole rollback (the live
   component never changed); after it, the live component is updated back to the previous
   version. Either way nothing else on the endpoint moves.

SageMaker refuses an update of a component that is not InService (the rehearsal's account refuses
it: tests/sagemaker_refusals.py), so every change waits for InService first, within
``component_timeout_minutes``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from lambdas.canary_controller.rules import Evidence, EvidenceRules, judge
from tools.adapter_release.publish import AdapterRefused
from tools.adapter_release.target import ReleaseTarget
from tools.aws_command import error_code

#: The AWS/SageMaker metrics the evidence reads, per component.
INVOCATIONS, ERRORS = "Invocations", "Invocation5XXErrors"
GONE = "gone"


@dataclass
class Clock:
    now: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep


@dataclass
class Outcome:
    """How the rollout ended: ``promoted``, ``rolled back`` or ``already live``, and why."""

    result: str
    reason: str
    steps: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- components


def describe(sm: Any, name: str) -> dict[str, Any] | None:
    """DescribeInferenceComponent, or None when there is no such component."""
    try:
        return dict(sm.describe_inference_component(InferenceComponentName=name))
    except ClientError as exc:
        if error_code(exc) == "ValidationException" and "Could not find" in str(exc):
            return None
        raise


def artifact_of(component: dict[str, Any]) -> str:
    return str(((component.get("Specification") or {}).get("Container") or {}).get("ArtifactUrl"))


def wait_for(
    sm: Any, name: str, want: str, target: ReleaseTarget, clock: Clock
) -> dict[str, Any] | None:
    """Poll until ``name`` is ``want`` (``InService``, or :data:`GONE`); refuses on Failed or
    once ``component_timeout_minutes`` pass, naming the status it stayed in."""
    deadline = clock.now() + target.rollout.component_timeout_minutes * 60
    while True:
        found = describe(sm, name)
        status = GONE if found is None else str(found.get("InferenceComponentStatus"))
        if status == want:
            return found
        if status == "Failed" and want != GONE:
            raise AdapterRefused(
                f"inference component {name} is Failed: {found and found.get('FailureReason')}"
            )
        if clock.now() >= deadline:
            raise AdapterRefused(
                f"inference component {name} still {status} after "
                f"{target.rollout.component_timeout_minutes} minutes "
                "(inference_components.rollout.component_timeout_minutes)"
            )
        clock.sleep(min(target.rollout.check_interval_seconds, max(1.0, deadline - clock.now())))


def adapter_spec(target: ReleaseTarget, url: str) -> dict[str, Any]:
    """An adapter component's Specification: its base and its artifact, no compute of its own
    (InferenceComponentSpecification: omit ComputeResourceRequirements for an adapter)."""
    return {"BaseInferenceComponentName": target.base_component, "Container": {"ArtifactUrl": url}}


# --------------------------------------------------------------------------- evidence


def probe(rt: Any, target: ReleaseTarget, components: Sequence[str], prompts: Sequence[str]) -> int:
    """Each prompt to each component (InvokeEndpoint with InferenceComponentName). Returns how
    many answers failed; the metrics count them, the judgement reads the metrics."""
    failed = 0
    n = target.evidence.min_invocations
    for i in range(n):
        body = json.dumps({"prompt": prompts[i % len(prompts)], "max_tokens": 16}).encode()
        for component in components:
            try:
                rt.invoke_endpoint(
                    EndpointName=target.endpoint,
                    InferenceComponentName=component,
                    ContentType="application/json",
                    Body=body,
                )
            except ClientError:
                failed += 1
    return failed


def evidence(cw: Any, target: ReleaseTarget, start: float, end: float) -> Evidence:
    """The candidate's and the live component's invocations and 5XX over ``[start, end]``, read
    from CloudWatch; a read that fails is no evidence (``Evidence.error``), never health."""
    queries = []
    for i, component in enumerate((target.candidate_component, target.live_component)):
        for j, metric in enumerate((INVOCATIONS, ERRORS)):
            queries.append(
                {
                    "Id": f"m{i}{j}",
                    "MetricStat": {
                        "Metric": {
                            "Namespace": "AWS/SageMaker",
                            "MetricName": metric,
                            "Dimensions": [{"Name": "InferenceComponentName", "Value": component}],
                        },
                        "Period": 60,
                        "Stat": "Sum",
                    },
                    "ReturnData": True,
                }
            )
    try:
        answer = cw.get_metric_data(
            MetricDataQueries=queries,
            StartTime=datetime.fromtimestamp(start - 60, UTC),
            EndTime=datetime.fromtimestamp(end + 60, UTC),
        )
    except ClientError as exc:
        return Evidence(0, 0, 0, 0, error=f"GetMetricData: {error_code(exc)}")
    sums = {r["Id"]: float(sum(r.get("Values", []))) for r in answer["MetricDataResults"]}
    return Evidence(
        canary_invocations=sums.get("m00", 0.0),
        canary_errors=sums.get("m01", 0.0),
        primary_invocations=sums.get("m10", 0.0),
        primary_errors=sums.get("m11", 0.0),
    )


def firing(cw: Any, target: ReleaseTarget) -> list[str]:
    """The watched alarms in ALARM (none watched: none firing, and no call)."""
    names = target.rollout.alarm_names
    if not names:
        return []
    alarms = cw.describe_alarms(AlarmNames=list(names))["MetricAlarms"]
    return [f"{a['AlarmName']}: {a.get('StateReason', '')}" for a in alarms
            if a["StateValue"] == "ALARM"]  # fmt: skip


def bake(cw: Any, target: ReleaseTarget, start: float, clock: Clock) -> tuple[str, str]:
    """``("promote" | "rollback", reason)``: the alarms watched every check through the bake;
    then the evidence judged by the canary's rules (``judge``); insufficient evidence holds until
    the evidence timeout, then rolls back (rules.decide's bake, per adapter)."""
    r = target.rollout
    rules = EvidenceRules(
        target.evidence.min_invocations, target.evidence.max_error_rate_increase_percent
    )
    bake_end = start + r.bake_minutes * 60
    give_up = bake_end + r.evidence_timeout_minutes * 60
    while True:
        alarms = firing(cw, target)
        if alarms:
            return "rollback", f"alarm: {'; '.join(alarms)}"
        now = clock.now()
        if now >= bake_end:
            verdict, why = judge(evidence(cw, target, start, now), rules)
            if verdict == "ok":
                return "promote", why
            if verdict == "worse":
                return "rollback", f"evidence: {why}"
            if now >= give_up:
                return "rollback", f"no evidence after the bake and its timeout: {why}"
        due = bake_end if now < bake_end else give_up
        clock.sleep(min(r.check_interval_seconds, max(1.0, due - now)))


def watch(cw: Any, target: ReleaseTarget, clock: Clock) -> str | None:
    """The alarms over ``watch_minutes`` after the swap: the first firing, or None."""
    end = clock.now() + target.rollout.watch_minutes * 60
    while True:
        alarms = firing(cw, target)
        if alarms:
            return f"alarm after the swap: {'; '.join(alarms)}"
        now = clock.now()
        if now >= end:
            return None
        clock.sleep(min(target.rollout.check_interval_seconds, end - now))


# --------------------------------------------------------------------------- the rollout


def roll_out(
    *,
    sm: Any,
    rt: Any,
    cw: Any,
    target: ReleaseTarget,
    url: str,
    prompts: Sequence[str],
    clock: Clock,
    out: Callable[[str], None] = print,
    dry_run: bool = False,
) -> Outcome:
    """The rollout of the module docstring. Raises :class:`AdapterRefused` before any change
    when the endpoint is not in the component shape or another release of the adapter holds the
    candidate component."""
    previous = artifact_of(_live_component(sm, target))
    if previous == url:
        return Outcome("already live", f"{target.live_component} already serves {url}")
    candidate = _candidate_component(sm, target, url)
    steps = [f"live {target.live_component}: {previous}"]
    if dry_run:
        out(f"dry run: would create {target.candidate_component} ({url}) on "
            f"{target.base_component}, bake {target.rollout.bake_minutes} min, then update "
            f"{target.live_component} to it")  # fmt: skip
        return Outcome("dry run", "nothing changed", steps)
    if candidate is None:
        sm.create_inference_component(
            InferenceComponentName=target.candidate_component,
            EndpointName=target.endpoint,
            Specification=adapter_spec(target, url),
        )
        steps.append(f"created {target.candidate_component}")
    out(f"2. candidate: {target.candidate_component} ({url}) on {target.base_component}")
    try:
        wait_for(sm, target.candidate_component, "InService", target, clock)
    except AdapterRefused as exc:
        return _drop_candidate(sm, target, clock, out, steps, f"candidate never served: {exc}")
    start = clock.now()
    failed = probe(rt, target, [target.candidate_component, target.live_component], prompts)
    out(f"3. evidence: {target.evidence.min_invocations} probes to each component "
        f"({failed} failed); baking {target.rollout.bake_minutes} min")  # fmt: skip
    decision, why = bake(cw, target, start, clock)
    if decision == "rollback":
        return _drop_candidate(sm, target, clock, out, steps, why)
    out(f"4. promote: {why}; {target.live_component} -> {url}")
    try:
        wait_for(sm, target.live_component, "InService", target, clock)
        sm.update_inference_component(
            InferenceComponentName=target.live_component, Specification=adapter_spec(target, url)
        )
    except (ClientError, AdapterRefused) as exc:  # the live component kept its version
        return _drop_candidate(sm, target, clock, out, steps, f"the swap was refused: {exc}")
    steps.append(f"updated {target.live_component} to {url}")
    problem = _after_swap(sm, cw, target, clock)
    if problem is not None:
        _swap_back(sm, target, clock, out, steps, previous, problem)
        return _drop_candidate(sm, target, clock, out, steps, problem)
    sm.delete_inference_component(InferenceComponentName=target.candidate_component)
    steps.append(f"deleted {target.candidate_component}")
    wait_for(sm, target.candidate_component, GONE, target, clock)
    out(f"5. promoted: {target.live_component} serves {target.adapter} {target.version}")
    return Outcome("promoted", why, steps)


def _live_component(sm: Any, target: ReleaseTarget) -> dict[str, Any]:
    """The adapter's live component, on an endpoint in the component shape; refused otherwise
    (no base component: the variant shape; no live component: make deploy creates it)."""
    base = describe(sm, target.base_component)
    if base is None:
        raise AdapterRefused(
            f"no inference component {target.base_component} on {target.endpoint}: the endpoint "
            "runs the variant shape (adapters baked into the image); a new adapter version there "
            "is a model release: make prepare-model, build-image, deploy"
        )
    live = describe(sm, target.live_component)
    if live is None:
        raise AdapterRefused(
            f"no inference component {target.live_component}: make deploy creates each adapter's "
            "component; make release-adapter replaces the version of one that exists"
        )
    return live


def _candidate_component(sm: Any, target: ReleaseTarget, url: str) -> dict[str, Any] | None:
    """The candidate component left by an earlier run of this release (None: none); refused
    when it holds another version (another release of the adapter, under way or cut off)."""
    candidate = describe(sm, target.candidate_component)
    if candidate is not None and artifact_of(candidate) != url:
        raise AdapterRefused(
            f"{target.candidate_component} exists with {artifact_of(candidate)}: another release "
            f"of {target.adapter} is under way (or was cut off); run it again, or delete that "
            "component, then release"
        )
    return candidate


def _after_swap(sm: Any, cw: Any, target: ReleaseTarget, clock: Clock) -> str | None:
    """What went wrong after the live component's update (it did not land, or an alarm fired
    during the watch), or None."""
    try:
        wait_for(sm, target.live_component, "InService", target, clock)
        return watch(cw, target, clock)
    except AdapterRefused as exc:
        return f"the update did not land: {exc}"


def _swap_back(
    sm: Any,
    target: ReleaseTarget,
    clock: Clock,
    out: Callable[[str], None],
    steps: list[str],
    previous: str,
    problem: str,
) -> None:
    """The live component back to the version it served before the swap."""
    out(f"rollback: {problem}; {target.live_component} back to {previous}")
    wait_for(sm, target.live_component, "InService", target, clock)
    sm.update_inference_component(
        InferenceComponentName=target.live_component,
        Specification=adapter_spec(target, previous),
    )
    steps.append(f"updated {target.live_component} back to {previous}")
    wait_for(sm, target.live_component, "InService", target, clock)


def _drop_candidate(
    sm: Any, target: ReleaseTarget, clock: Clock, out: Callable[[str], None], steps: list[str],
    reason: str,
) -> Outcome:  # fmt: skip
    """The rollback before (or after) the swap: the candidate component deleted once it may be
    (SageMaker refuses a delete while it is still Creating: wait for a settled status first)."""
    found = describe(sm, target.candidate_component)
    if found is not None:
        if found.get("InferenceComponentStatus") in ("Creating", "Updating"):
            # Failed, or still Creating: the delete says which
            with contextlib.suppress(AdapterRefused):
                wait_for(sm, target.candidate_component, "InService", target, clock)
        sm.delete_inference_component(InferenceComponentName=target.candidate_component)
        steps.append(f"deleted {target.candidate_component}")
        wait_for(sm, target.candidate_component, GONE, target, clock)
    out(f"rolled back: {reason}; {target.live_component} serves the previous version, "
        f"{target.base_component} untouched")  # fmt: skip
    return Outcome("rolled back", reason, steps)
