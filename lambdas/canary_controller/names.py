"""Fixed names derived from the endpoint name, shared by the construct, the Lambda and the CLI.

Operators (``make canary-*``) address the controller by endpoint name, so these resources get
names derived from it instead of generated ones; none of them is replaced on a normal update.
"""

from __future__ import annotations

#: Lambda function names are at most 64 characters; endpoint names up to 63.
_FUNCTION_SUFFIX = "-canary-controller"
_STATE_MACHINE_SUFFIX = "-canary-rollout"


def controller_function_name(endpoint_name: str) -> str:
    return endpoint_name[: 64 - len(_FUNCTION_SUFFIX)].rstrip("-") + _FUNCTION_SUFFIX


def state_machine_name(endpoint_name: str) -> str:
    return endpoint_name + _STATE_MACHINE_SUFFIX
