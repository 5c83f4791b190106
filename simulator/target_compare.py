"""The two targets' cost for the configured traffic, for the plan (``make synth`` prints it when
``bedrock.enabled``): the product's own traffic model (the ordinary day of simulator/traces.py,
scaled by ``fleet.traffic_share``), run through the SageMaker fleet with its scaling
(simulator.run.simulate: the instance-minutes it bills, launches included) and, minute by minute,
through Bedrock's copies and 5-minute billing windows (sizing/target_costs.py).

The Bedrock side takes the whole day's traffic on one imported model (the fallback's: the default
adapter's merged model); traffic split over several merged models could only need more copies
(each model's copies round up on their own).
"""

from __future__ import annotations

from typing import Any

from simulator.assumptions import Assumptions
from simulator.fleet.scenarios import scaled
from simulator.run import simulate
from simulator.traces import normal_day
from simulator.user_figures import monthly_bill
from sizing.target_costs import bedrock_month, sagemaker_month
from typed_config import DeploymentConfig


def targets_section(cfg: DeploymentConfig, a: Assumptions | None = None) -> dict[str, Any]:
    """SageMaker's and Bedrock's monthly cost of the ordinary day, as the plan holds it."""
    trace = scaled(cfg, normal_day())
    result = simulate(cfg, trace, a or Assumptions(), label="targets")
    per_minute = 60 // next(iter(result.runs.values())).tick_seconds
    billed = [
        (float(run.series["launched"].sum()) / per_minute, run.instance.price_per_hour)
        for run in result.runs.values()
    ]
    demand = [float(x) for x in trace.rpm]
    return {
        "traffic": trace.name,
        "traffic_share": cfg.fleet.traffic_share,
        "models": len(cfg.bedrock.models),
        # the one monthly figure (simulator.user_figures): the week's days, the canary's raise
        "sagemaker_monthly": round(monthly_bill(cfg, a), 2),
        "sagemaker_monthly_this_day": sagemaker_month(billed),
        "bedrock": bedrock_month(
            demand,
            copy_rpm=cfg.bedrock.copy_requests_per_minute,
            cmus_per_copy=cfg.bedrock.custom_model_units_per_copy,
            models=len(cfg.bedrock.models),
        ),
    }
