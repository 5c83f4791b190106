"""How long each release job may run, from its own steps' bounds: the job's ``timeout-minutes``,
the session it asks for (``role-duration-seconds``) and the deploy role's MaxSessionDuration.

Why. ``aws-actions/configure-aws-credentials`` asks STS for a one-hour session unless given
``role-duration-seconds`` (its README, inputs; AssumeRoleWithWebIdentity's DurationSeconds
"By default, the value is set to 3600 seconds", STS API reference). A release job that builds,
prepares the model and deploys runs far longer, and every call after the hour fails with
ExpiredToken. The session may last up to the role's MaxSessionDuration (1 to 12 hours; a longer
DurationSeconds "fails", same reference; IAM API reference, CreateRole MaxSessionDuration).

How. A job's bound is the sum of its steps' bounds: where a step has a hard limit of its own
(the preparation job's StoppingCondition, the blue/green update's MaximumExecutionTimeout,
tools/deploy.py's wait for the raised counts) that limit, else a stated allowance. The job's
``timeout-minutes`` is that bound, so GitHub ends the job before any step can outrun it, and
the session lasts as long as the job can (it starts after checkout, so it outlives the job's
remaining time). ``make ci-config`` writes both as job outputs (tools/ci_config.py) and the
workflow reads them; DeployAccessStack sets the role's MaxSessionDuration to the longest
session of the environment's jobs, so the request never exceeds it.

AWS's own limit: IAM allows at most 12 hours (43,200 s); a bound beyond it is refused here,
naming the fields that make it up. GitHub-hosted runners stop a job after 6 hours ("Usage
limits, billing, and administration", job execution time): a bound beyond 360 minutes is
allowed (a self-hosted ``IMAGE_RUNNER`` runs up to 5 days) and ``make ci-config`` warns.

The CDK CLI's own sessions (it assumes the bootstrap deploy role from this one: role chaining,
at most one hour each, STS AssumeRole DurationSeconds) are asked for per ``cdk deploy``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from typed_config import DeploymentConfig

#: IAM: MaxSessionDuration "can have a value from 1 hour to 12 hours" (CreateRole/UpdateRole).
MAX_SESSION_SECONDS = 12 * 3600
MIN_SESSION_SECONDS = 3600
#: GitHub-hosted runners: "Each job in a workflow can run for up to 6 hours of execution time".
HOSTED_JOB_MINUTES = 360
#: The canary-wait job: bounded by the hosted runner's limit, not by the plan (its wait stops at
#: TIMEOUT_MIN=350 and says the rollout continues; re-running the job waits again).
CANARY_WAIT_MINUTES = 358

#: Allowances (not measured; each a step with no limit of its own):
#: cdk deploy of the image stack alone (an ECR repository and its lifecycle policy).
REPOSITORY_SECONDS = 15 * 60
#: one docker build and push of an image (the job image, or the serving image with the model).
IMAGE_BUILD_SECONDS = 45 * 60
#: a training job's Starting/Downloading phases before its runtime limit counts.
JOB_PROVISIONING_SECONDS = 15 * 60
#: SageMaker "sends the algorithm the SIGTERM signal, which delays job termination for 120
#: seconds" when the runtime limit is reached (SageMaker API reference, StoppingCondition).
JOB_STOP_GRACE_SECONDS = 120
#: cdk deploy's synth, CloudFormation's own work and the smoke gate around the endpoint update.
DEPLOY_OVERHEAD_SECONDS = 15 * 60
#: tools/deploy.py's wait for raised counts before the update (execute's timeout_seconds).
DEPLOY_RAISE_SECONDS = 3600
#: one canary controller invocation (make canary-start, make canary-rollback).
CONTROLLER_SECONDS = 5 * 60
#: make promote-model: the model release copied S3 to S3 and every file read back (a few GB).
PROMOTE_MODEL_SECONDS = 30 * 60
#: make promote-image: the image copied registry to registry (imagetools create) and read back.
PROMOTE_IMAGE_SECONDS = 30 * 60


@dataclass(frozen=True)
class JobBound:
    """A release job's steps, each ``(what, seconds)``, and what follows from their sum."""

    job: str
    steps: tuple[tuple[str, int], ...]

    @property
    def seconds(self) -> int:
        return sum(s for _, s in self.steps)

    @property
    def minutes(self) -> int:
        """The job's ``timeout-minutes``."""
        return math.ceil(self.seconds / 60)

    @property
    def session_seconds(self) -> int:
        """The job's ``role-duration-seconds``: its whole timeout, at least STS's 15 minutes."""
        return max(self.minutes * 60, 900)


def preparation_seconds(cfg: DeploymentConfig) -> int:
    """The preparation job's limit: MaxWaitTimeInSeconds with managed spot (which "is the amount
    of time spent waiting for Spot capacity plus the amount of time the job can run"), else
    MaxRuntimeInSeconds (SageMaker API reference, StoppingCondition), plus provisioning and the
    stop's grace. ``make prepare-model`` watches it that long at most."""
    mp = cfg.model_prep
    limit = mp.max_wait_seconds if mp.use_spot and mp.max_wait_seconds else mp.max_runtime_seconds
    return JOB_PROVISIONING_SECONDS + limit + JOB_STOP_GRACE_SECONDS


def deploy_steps(cfg: DeploymentConfig) -> tuple[tuple[str, int], ...]:
    return (
        ("deploy: raise counts before the update (tools/deploy.py)", DEPLOY_RAISE_SECONDS),
        ("deploy: blue/green update (deployment.max_execution_timeout_seconds)",
         cfg.deployment.max_execution_timeout_seconds),
        ("deploy: cdk, CloudFormation and the smoke gate (allowance)", DEPLOY_OVERHEAD_SECONDS),
    )  # fmt: skip


def release_job(cfg: DeploymentConfig) -> JobBound:
    """The build-and-deploy job (release.yml ``dev``), or with ``promotion`` the promote-and-deploy
    job (``prod-canary``: it copies what the source environment built, and builds nothing)."""
    if cfg.promotion is not None:
        promoted: tuple[tuple[str, int], ...] = (
            ("deploy-repository (allowance)", REPOSITORY_SECONDS),
            ("promote-model: copy and verify the model release (allowance)",
             PROMOTE_MODEL_SECONDS),
            ("promote-image: copy and verify the image (allowance)", PROMOTE_IMAGE_SECONDS),
            *deploy_steps(cfg),
            ("canary-start (allowance)", CONTROLLER_SECONDS),
        )  # fmt: skip
        return JobBound("release", promoted)
    steps: tuple[tuple[str, int], ...] = (
        ("deploy-repository (allowance)", REPOSITORY_SECONDS),
        ("prepare-model: the job image build (allowance)", IMAGE_BUILD_SECONDS),
        ("prepare-model: the preparation job (model_prep.max_runtime_seconds or "
         "max_wait_seconds, + provisioning)", preparation_seconds(cfg)),
        ("push-image: the serving image build (allowance)", IMAGE_BUILD_SECONDS),
        *deploy_steps(cfg),
        ("canary-start (allowance)", CONTROLLER_SECONDS),
    )  # fmt: skip
    return JobBound("release", steps)


def promote_job(cfg: DeploymentConfig) -> JobBound:
    """release.yml ``promote``: a deploy, then the canary idled."""
    idle = ("canary-rollback REASON=promoted (allowance)", CONTROLLER_SECONDS)
    return JobBound("promote", (*deploy_steps(cfg), idle))


def canary_wait_job() -> JobBound:
    return JobBound("canary-wait", (("canary-wait (the hosted runner's limit)",
                                     CANARY_WAIT_MINUTES * 60),))  # fmt: skip


#: The release.yml jobs each environment's deploy role serves (tests/infra/test_workflows.py
#: checks this against the workflow). An environment not named here: every kind.
WORKFLOW_JOBS = {"dev": ("release",), "prod": ("release", "canary-wait", "promote")}


def jobs(cfg: DeploymentConfig) -> list[JobBound]:
    kinds = WORKFLOW_JOBS.get(cfg.env, ("release", "canary-wait", "promote"))
    every = {"release": release_job(cfg), "canary-wait": canary_wait_job(),
             "promote": promote_job(cfg)}  # fmt: skip
    return [every[k] for k in kinds]


class SessionTooLong(ValueError):
    """A job's bound exceeds what IAM allows one session."""


def checked(bound: JobBound) -> JobBound:
    if bound.session_seconds > MAX_SESSION_SECONDS:
        parts = "; ".join(f"{what} {s // 60} min" for what, s in bound.steps)
        raise SessionTooLong(
            f"the {bound.job} job may run {bound.minutes} min, longer than the 12 hours IAM "
            "allows one role session (MaxSessionDuration): lower model_prep.max_runtime_seconds "
            "(max_wait_seconds with use_spot) or deployment.max_execution_timeout_seconds "
            f"({parts})"
        )
    return bound


def role_max_session_seconds(cfg: DeploymentConfig) -> int:
    """The deploy role's MaxSessionDuration: the longest session its jobs ask for, and at least
    ``deploy_access.max_session_hours``."""
    floor = cfg.deploy_access.max_session_hours * 3600 if cfg.deploy_access else 0
    longest = max(checked(j).session_seconds for j in jobs(cfg))
    return max(MIN_SESSION_SECONDS, floor, longest)


def outputs(cfg: DeploymentConfig) -> dict[str, str]:
    """``<job>-minutes`` and ``<job>-session-seconds`` for each of the env's jobs."""
    out: dict[str, str] = {}
    for job in jobs(cfg):
        checked(job)
        out[f"{job.job}-minutes"] = str(job.minutes)
        out[f"{job.job}-session-seconds"] = str(job.session_seconds)
    return out
