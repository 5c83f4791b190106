"""Which instances start from the release's compile cache, and which start cold.

The preparation job makes the cache on its own GPU (``model_prep.instance_type``;
container/model_prep/compile_cache_step.py), and an instance uses it only on a GPU of the same
architecture with the same vLLM and torch (container/serving/compile_cache.py refuses any other,
with a log line). The plan counts by GPU model, not only architecture: Inductor keys its compiled
graphs by the GPU's name as well (torch/_inductor/codecache.py, ``CacheBase.get_system``: the
device name is in the system hash), so an L4 given an L40S cache (both compute capability 8.9)
passes the check and still compiles. A variant (or instance pool) on another GPU than the job's
is therefore planned as a cold start: correct, only slower, by the measured difference
(sizing/engine_start.py: cold minus warm). Nothing is refused; the plan says it.

One job makes one cache: a config whose variants run on two GPUs ships a cache for one of them.
Making a second (a second job on the other GPU type, the release carrying one cache per
architecture) is not built; the plan names the variants it would serve.
"""

from __future__ import annotations

from typing import Any

from sizing.engine_start import EngineStart, measured
from sizing.scale_out_time import uses_compile_cache
from typed_config import VARIANT_NAMES, DeploymentConfig
from typed_config.catalog import INSTANCE_CATALOG


def _gpu(instance_type: str) -> str | None:
    inst = INSTANCE_CATALOG.get(instance_type)
    return inst.gpu if inst is not None else None


def cache_section(cfg: DeploymentConfig, m: EngineStart | None = None) -> dict[str, Any]:
    """The job's GPU and, per variant (and instance pool when it has several), whether its
    instances use the cache; ``m``: the start measurement giving a cold start's extra seconds."""
    m = m or measured()
    job_type = cfg.model_prep.instance_type
    job_gpu = _gpu(job_type)
    servers = []
    for name in VARIANT_NAMES:
        pools = cfg.variants[name].pools
        for pool in pools:
            gpu = _gpu(pool.instance_type)
            servers.append(
                {
                    "variant": name,
                    "who": name if len(pools) == 1 else f"{name} pool {pool.priority}",
                    "instance_type": pool.instance_type,
                    "gpu": gpu,
                    "uses_cache": uses_compile_cache(cfg, pool.instance_type),
                }
            )
    return {
        "job_instance_type": job_type,
        "job_gpu": job_gpu,
        "servers": servers,
        "cold_extra_seconds": m.saved_by_cache_seconds,
        "measured_on": m.device,
        "source": "sizing/engine_start.py",
    }


def render_cache(c: dict[str, Any]) -> list[str]:
    """``compile cache: produced on <GPU>, used by <variants>; <variant> on <GPU> starts cold
    (+N s, sizing/engine_start.py)``, and what would give the cold ones a cache."""
    job = c["job_gpu"] or f"{c['job_instance_type']} (a GPU the catalog does not know)"
    used = [s["who"] for s in c["servers"] if s["uses_cache"]]
    cold = [s for s in c["servers"] if not s["uses_cache"]]
    line = (
        f"  compile cache: produced on {job} (model_prep.instance_type {c['job_instance_type']}), "
        f"used by {', '.join(used) or 'no variant'}"
    )
    extra = f"+{c['cold_extra_seconds']:g} s, {c['source']}"
    by_gpu: dict[str, list[str]] = {}
    for s in cold:
        by_gpu.setdefault(s["gpu"] or s["instance_type"], []).append(s["who"])
    for gpu, who in sorted(by_gpu.items()):
        verb = "starts" if len(who) == 1 else "start"
        line += f"; {' and '.join(who)} on {gpu} {verb} cold ({extra})"
    lines = [line]
    if cold:
        lines.append(
            "          a start from the cache needs the preparation job on an instance type with "
            f"the {' or the '.join(sorted(by_gpu))} (model_prep.instance_type; one job makes one "
            "cache); a cold start is correct, only slower (the figure measured on one "
            f"{c['measured_on']})"
        )
    return lines
