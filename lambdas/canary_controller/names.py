"""Names shared by the construct, the Lambda and the CLI: resource names derived from the endpoint
name, and the rollout statuses.

Operators (``make canary-*``) address the controller by endpoint name, so these resources get
names derived from it instead of generated ones; none of them is replaced on a normal update.

Each rollout status is spelled once, in :data:`RolloutStatus`: the controller records it, the
rollout state machine's Choice states branch on it, the CLI prints it. This module imports
nothing of the controller (and no boto3), so the stacks import it at synth.
"""

from __future__ import annotations

import hashlib
from typing import Literal, get_args

#: Lambda function names are at most 64 characters ("If you specify only the function name, it
#: is limited to 64 characters in length": Lambda API reference, CreateFunction,
#: https://docs.aws.amazon.com/lambda/latest/api/API_CreateFunction.html); endpoint names up to
#: 63. State machine names up to 80 (Step Functions API reference, CreateStateMachine), so
#: ``<endpoint>-canary-rollout`` (78 at most) always fits.
FUNCTION_NAME_LIMIT = 64
#: Hex digits of the endpoint name's sha256 in a shortened function name.
_DIGEST_CHARS = 8
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
    """``<endpoint>-canary-controller``. An endpoint name too long for that (over 46
    characters) keeps its beginning and adds 8 hex of its sha256, so two long endpoint names
    that share a beginning still get a function each (a plain cut gave them one name)."""
    name = endpoint_name + _FUNCTION_SUFFIX
    if len(name) <= FUNCTION_NAME_LIMIT:
        return name
    digest = hashlib.sha256(endpoint_name.encode()).hexdigest()[:_DIGEST_CHARS]
    keep = FUNCTION_NAME_LIMIT - len(_FUNCTION_SUFFIX) - _DIGEST_CHARS - 1
    return f"{endpoint_name[:keep].rstrip('-')}-{digest}{_FUNCTION_SUFFIX}"


def state_machine_name(endpoint_name: str) -> str:
    return endpoint_name + _STATE_MACHINE_SUFFIX


def sized_shadow_config_prefix(endpoint_name: str) -> str:
    """What every endpoint config the controller sizes for the shadow stage begins with
    (:func:`sized_shadow_config`): the controller's IAM grants name ``endpoint-config/<this>*``."""
    return f"{endpoint_name[:40].rstrip('-')}-shadow-"


def sized_shadow_config(endpoint_name: str, base: str, count: int) -> str:
    """The endpoint config of the stack's shadow config ``base`` with the shadow at ``count``
    instances (lambdas/canary_controller/aws.py, ``create_sized_config``): within SageMaker's
    EndpointConfigName (at most 63 characters of ``[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}``, API
    reference, CreateEndpointConfig), a different name for every ``base`` (a digest of it: a
    deploy that replaces the stack's config gets new ones)."""
    digest = hashlib.sha256(base.encode()).hexdigest()[:8]
    return f"{sized_shadow_config_prefix(endpoint_name)}{digest}-s{count}"
