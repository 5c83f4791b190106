"""How long an instance takes to serve, from the decision that asked for it: the assumptions the
plan started from, before the start was measured (issue 46).

Defined here, on the config's floor, because the config's own rule on
``rollout.capacity_timeout_minutes`` (``typed_config.operations.RolloutConfig``) needs a start
where the measured one is unknown; ``sizing.scale_out_time`` replaces the assumed engine start
with the measured one, and ``sizing.ready_bound`` derives the per-start bound every deploy time
and wait uses, with ``ASSUMED_READY_SECONDS`` as its floor.
"""

from __future__ import annotations

#: Assumed, not a SageMaker rule: from a capacity decision to the instance running the container.
#: The original team saw 5 to 8 minutes for ml.g5.xlarge; 390 s is inside that range.
ASSUMED_PROVISION_SECONDS = 390.0
#: Assumed: container start to /ping 200 (model load, adapters, warmup), ~75 s on ml.g5.xlarge.
#: Measured since (sizing.engine_start, issue 46): vLLM 0.26 with prod's engine took 120 s +- 23 s
#: with a matching compile cache and 202 s without on an H100. Kept at 75 s as the part of AWS's
#: published scale-out P50 that the measured start replaces (sizing.scale_out_time) and in the
#: floor below.
ASSUMED_STARTUP_SECONDS = 75.0
#: The floor of the per-start bound (when an instance of a new tag serves, counted from the
#: decision that asked for it). The bound itself is derived per config from the measured start
#: (sizing.ready_bound: the slowest variant's planned new-tag start plus a margin, never below
#: this): deploy times, the canary controller's waits and the simulator's deploys read it there.
#: Kept here because the config's own rule on rollout.capacity_timeout_minutes, checked on this
#: floor where the measured start is unknown, holds a value to at least one such start.
ASSUMED_READY_SECONDS = ASSUMED_PROVISION_SECONDS + ASSUMED_STARTUP_SECONDS
