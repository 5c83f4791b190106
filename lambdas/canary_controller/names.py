"""Names shared by the construct, the Lambda and the CLI: resource names derived from the endpoint
name, and the rollout statuses.

Operators (``make canary-*``) address the controller by endpoint name, so these resources get
names derived from it instead of generated ones; none of them is replaced on a normal update.

Each rollout status is spelled once, in :data:`RolloutStatus`: the controller records it, the
rollout state machine's Choice states branch on it, the CLI prints it. This module imports
nothing of the controller (and no boto3), so the stacks import it at synth.
"""

from __future__ import annotations

from typing import Literal, get_args

#: Lambda function names are at most 64 characters; endpoint names up to 63.
_FUNCTION_SUFFIX = "-canary-controller"
_STATE_MACHINE_SUFFIX = "-canary-rollout"

#: A rollout's ``status`` as the controller records and answers it. SUPERSEDED is never
#: recorded: it answers a tick or rollback from an execution whose rollout is no longer current.
RolloutStatus = Literal[
    "RUNNING", "ROLLING_BACK", "COMPLETED", "ROLLED_BACK", "FAILED", "SUPERSEDED"
]  # fmt: skip
ROLLOUT_STATUSES: tuple[RolloutStatus, ...] = get_args(RolloutStatus)
RUNNING, ROLLING_BACK, COMPLETED, ROLLED_BACK, FAILED, SUPERSEDED = ROLLOUT_STATUSES
#: Statuses that hold the per-endpoint lock (a rollout or its rollback is still acting).
LOCKED: tuple[RolloutStatus, ...] = (RUNNING, ROLLING_BACK)
#: Statuses a rollout ends in; each releases the lock and is notified.
ENDED: tuple[RolloutStatus, ...] = (COMPLETED, ROLLED_BACK, FAILED)

#: The controller's actions that its own machinery sends (the state machine, EventBridge): the
#: construct builds their events, the controller validates and serves them.
TICK, ROLLBACK, CONTINUE, EXECUTION_ENDED = "tick", "rollback", "continue", "execution-ended"
#: Step Functions execution statuses that end an execution without a Succeed state
#: (DescribeExecution ``status``; the "Step Functions Execution Status Change" EventBridge event's
#: ``detail.status``): the EventBridge rule sends these to the controller as ``execution-ended``.
EXECUTION_ENDED_STATUSES: tuple[str, ...] = ("FAILED", "TIMED_OUT", "ABORTED")


def controller_function_name(endpoint_name: str) -> str:
    return endpoint_name[: 64 - len(_FUNCTION_SUFFIX)].rstrip("-") + _FUNCTION_SUFFIX


def state_machine_name(endpoint_name: str) -> str:
    return endpoint_name + _STATE_MACHINE_SUFFIX
