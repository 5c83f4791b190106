"""Which SLOs of ``fleet.slos`` an instance type can hold at a useful load (no CDK, no simulator):
the capacity gate holds the rest, the fleet solver lets only these bind the scaling target, and the
plan prints both lists."""

from __future__ import annotations

from sizing.scaling_target import target_basis
from typed_config import VARIANT_NAMES, DeploymentConfig, GateSlo

#: Each gate SLO: its name in the speed model's bounds and its ``monitoring`` field.
SLO_FIELDS: dict[GateSlo, str] = {
    "rejected": "(none: 0 rejected)",
    "queue_wait_p95": "slo_queue_wait_p95_ms",
    "ttft_p50": "slo_ttft_p50_ms",
    "latency_p99": "slo_latency_p99_ms",
}
_BOUND_NAMES = {"ttft_p50": "TTFT p50", "latency_p99": "end-to-end p99"}

#: An SLO that holds only below this share of the requests an instance runs (the lower of
#: max_num_seqs and the KV cache) is not held: a fleet would keep most of every GPU idle for it
#: (on an L40S with LoRA, TTFT p50 < 200 ms holds up to 6 of 128 in flight), and the solver
#: would size the fleet on that idle share. It is named instead, with what it would take.
MIN_USEFUL_SHARE = 0.25


def unreachable(cfg: DeploymentConfig) -> dict[str, str]:
    """SLOs of ``fleet.slos`` that a variant's instance type cannot hold at a useful load (speed
    model at the planning edge, Poisson arrivals, the typical request): ``{slo: why}``."""
    out: dict[str, str] = {}
    for v in VARIANT_NAMES:
        basis = target_basis(cfg, v)
        engine_bound = min(basis.max_num_seqs, basis.kv_bound)
        for key, bound_name in _BOUND_NAMES.items():
            if key not in cfg.fleet.slos or key in out:
                continue
            b = next(x for x in basis.slo if x.slo == bound_name)
            shape = f"{cfg.engine.typical_prompt_tokens}+{cfg.engine.typical_output_tokens} tokens"
            field = f"monitoring.{SLO_FIELDS[key]} {b.limit:,.0f} ms"
            if b.concurrency == 0:
                out[key] = (
                    f"{field}: the best on {basis.instance_type} is {b.best:,.0f} ms with one "
                    f"request in flight ({shape})"
                )
            elif b.concurrency < MIN_USEFUL_SHARE * engine_bound:
                out[key] = (
                    f"{field}: holds on {basis.instance_type} only up to {b.concurrency} in "
                    f"flight of the {engine_bound} it runs (under {MIN_USEFUL_SHARE:.0%}; best "
                    f"{b.best:,.0f} ms alone, {shape}): not planned on"
                )
    return out


def held(cfg: DeploymentConfig) -> list[GateSlo]:
    """``fleet.slos`` less those :func:`unreachable` names."""
    gone = unreachable(cfg)
    return [s for s in cfg.fleet.slos if s not in gone]
