"""SageMaker (the product's fleet) beside Bedrock Custom Model Import for the same traffic: the
monthly cost of each and what each lacks for this workload. Pure arithmetic on a per-minute
demand curve and the SageMaker fleet's billed instance-minutes; the traffic and the fleet come
from the simulator (simulator/target_compare.py), the plan prints the result (sizing/plan.py).

Bedrock's cost, and where each figure comes from:

- "Calculate the cost of running a custom model" (Bedrock User Guide,
  https://docs.aws.amazon.com/bedrock/latest/userguide/import-model-calculate-cost.html):
  cost = running model copies x CMUs per copy x price per CMU per minute x 5 per 5-minute
  window; "Billing is charged over 5-minute billing windows from the first successful inference
  call"; Bedrock "can increase or decrease the number of running model copies" with demand.
  Read pessimistically: a window is billed in full for every copy running in it, and a copy
  runs in a window when the window's busiest minute needs it.
- Price per CMU per minute: the pricing page's worked example bills a 2-CMU copy at $0.1570 per
  minute, $0.0785 per CMU (https://aws.amazon.com/bedrock/pricing/, Custom Model Import); public
  write-ups quote $0.05718 in us-east-1 for the current CMU version. The plan takes the higher:
  the rate depends on the CMU version Bedrock assigns at import (GetImportedModel
  ``customModelUnitsVersion``), which is unknown until then.
- Storage: $1.95 per CMU per month per imported model (same pricing page, as quoted publicly).
- CMUs per copy (``bedrock.custom_model_units_per_copy``, 2) and requests per copy
  (``bedrock.copy_requests_per_minute``, 326) are the config's: AWS decides the first at import
  and publishes nothing on the second (typed_config/bedrock.py says where the defaults come from).
- Cold start: AWS says an imported model not used for a while is unloaded and answers
  ModelNotReadyException until restored (AWS re:Post knowledge center,
  https://repost.aws/knowledge-center/bedrock-imported-models-modelnotreadyexception: "typically
  an hour"); a public measurement saw 96 s for the first call after import. A traffic curve that
  never goes quiet for that long never scales to zero, and then pays no cold start.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from typed_config.catalog import HOURS_PER_MONTH

#: Bedrock Custom Model Import billing (module docstring).
BILLING_WINDOW_MINUTES = 5
CMU_PRICE_PER_MINUTE = 0.0785
CMU_PRICE_PER_MINUTE_LISTED = 0.05718
CMU_STORAGE_PER_MONTH = 1.95
COLD_START_SECONDS_MEASURED = 96
#: A month of days: the plan's and the simulator's month (typed_config.catalog.HOURS_PER_MONTH,
#: AWS's 730 hours) in days.
DAYS_PER_MONTH = HOURS_PER_MONTH / 24

#: What each target lacks for this workload (seeds 002 section 11's decision table, read against
#: what this product uses; docs/bedrock.md).
BEDROCK_LACKS = (
    "multi-LoRA: each adapter is its own imported model (merged), with its own copies and CMUs",
    "prefix caching: not exposed; the plan's prefix-cache hit rate does not apply",
    "custom health and readiness: no /ping hook; a cold copy answers ModelNotReadyException",
    "AWQ W4A16: imports take bf16/fp16/fp32 weights, so an 8B model needs 2 CMUs",
    "queue-aware autoscaling and admission: Bedrock scales copies itself; no 429 control",
)
SAGEMAKER_LACKS = (
    "Bedrock-native APIs (Guardrails, Agents) for this model",
    "scale to zero: a variant endpoint keeps min_capacity running (only inference components "
    "scale to zero)",
    "managed runtime: the product owns the image, CUDA, vLLM and the scaling policies",
)


def copies_per_window(demand_rpm: Sequence[float], copy_rpm: float) -> list[int]:
    """Copies running in each 5-minute window: what the window's busiest minute needs (0 when
    no request arrives in it: no window is billed)."""
    out = []
    for start in range(0, len(demand_rpm), BILLING_WINDOW_MINUTES):
        peak = max(demand_rpm[start : start + BILLING_WINDOW_MINUTES])
        out.append(math.ceil(peak / copy_rpm) if peak > 0 else 0)
    return out


def bedrock_month(
    demand_rpm: Sequence[float],
    *,
    copy_rpm: float,
    cmus_per_copy: int,
    models: int,
    price_per_cmu_minute: float = CMU_PRICE_PER_MINUTE,
) -> dict[str, Any]:
    """A month of one day's demand (per minute, one model's traffic) on Bedrock, plus the
    storage of ``models`` imported models."""
    copies = copies_per_window(demand_rpm, copy_rpm)
    day = sum(copies) * cmus_per_copy * price_per_cmu_minute * BILLING_WINDOW_MINUTES
    storage = models * cmus_per_copy * CMU_STORAGE_PER_MONTH
    return {
        "peak_rpm": round(max(demand_rpm), 1),
        "peak_copies": max(copies),
        "copy_rpm": copy_rpm,
        "cmus_per_copy": cmus_per_copy,
        "price_per_cmu_minute": price_per_cmu_minute,
        "idle_windows": copies.count(0),
        "monthly_inference": round(day * DAYS_PER_MONTH, 2),
        "monthly_storage": round(storage, 2),
        "monthly": round(day * DAYS_PER_MONTH + storage, 2),
        "monthly_at_listed_price": round(
            day * DAYS_PER_MONTH * CMU_PRICE_PER_MINUTE_LISTED / price_per_cmu_minute + storage,
            2,
        ),
    }


def sagemaker_month(billed_instance_minutes: Sequence[tuple[float, float]]) -> float:
    """A month of one simulated day: (instance-minutes billed, price per hour) per variant."""
    day = sum(minutes * price / 60 for minutes, price in billed_instance_minutes)
    return round(day * DAYS_PER_MONTH, 2)


def render_targets(t: dict[str, Any]) -> list[str]:
    """The plan's lines for the two targets (sizing/plan.py prints them after the cost)."""
    b = t["bedrock"]
    lines = [
        f"  targets for {t['traffic']} (x{t['traffic_share']:g}), as a {DAYS_PER_MONTH:.2f}-day "
        "month of it:",
        "          SageMaker (this fleet, simulated with its scaling): "
        f"${t['sagemaker_monthly']:,.0f}/month",
        f"          Bedrock Custom Model Import ({t['models']} imported model(s)): "
        f"${b['monthly']:,.0f}/month = inference ${b['monthly_inference']:,.0f} + storage "
        f"${b['monthly_storage']:,.0f} (${b['monthly_at_listed_price']:,.0f} at the listed "
        f"${CMU_PRICE_PER_MINUTE_LISTED}/CMU-min)",
        f"            {b['peak_copies']} copies at the peak ({b['peak_rpm']:,.0f} req/min at "
        f"{b['copy_rpm']:g} req/min per copy, assumed: AWS publishes none) x {b['cmus_per_copy']} "
        f"CMU x ${b['price_per_cmu_minute']}/CMU-min, billed per {BILLING_WINDOW_MINUTES}-min "
        f"window; {b['idle_windows']} idle windows a day (cold start "
        f"~{COLD_START_SECONDS_MEASURED} s measured publicly, undocumented by AWS)",
        "          Bedrock lacks, for this workload:",
        *(f"            - {gap}" for gap in BEDROCK_LACKS),
        "          SageMaker lacks:",
        *(f"            - {gap}" for gap in SAGEMAKER_LACKS),
    ]
    return lines
