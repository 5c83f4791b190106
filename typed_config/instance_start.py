"""How long an instance takes to serve, from the decision that asked for it: the assumptions the
rollout config's waits, the deploy preflight, the plan and the simulator all start from.

Defined here, on the config's floor, because the config itself derives its default waits from
them (``typed_config.operations.RolloutConfig``); ``sizing.update_semantics`` and
``sizing.scale_out_time`` read them from here.
"""

from __future__ import annotations

#: Assumed, not a SageMaker rule: from a capacity decision to the instance running the container.
#: The original team saw 5 to 8 minutes for ml.g5.xlarge; 390 s is inside that range.
ASSUMED_PROVISION_SECONDS = 390.0
#: Assumed: container start to /ping 200 (model load, adapters, warmup), ~75 s on ml.g5.xlarge.
#: Measured since (sizing.engine_start, issue 46): vLLM 0.26 with prod's engine took 120 s +- 23 s
#: with a matching compile cache and 202 s without on an H100. Kept at 75 s because prod's fleet
#: and every deploy bound were solved on it; the plan prints the measured figures beside it and
#: warns where they cross a bound. Raising it is one edit, then `make fleet ENV=prod`.
ASSUMED_STARTUP_SECONDS = 75.0
#: When an instance of a new tag serves, counted from the decision that asked for it: the
#: per-start bound of deploy times, the canary controller's capacity waits and the simulator's
#: deploys and canary instances. A bound, not a median: the plan checks it is not below the
#: uncached P50 it computes from AWS's figures and the image's size (sizing.scale_out_time,
#: 421 s for prod's image on ml.g5.xlarge); a scale-out of a running tag is faster (cached, 216 s).
ASSUMED_READY_SECONDS = ASSUMED_PROVISION_SECONDS + ASSUMED_STARTUP_SECONDS
