"""When a new instance serves, from its sources: AWS's published scale-out times and the size of
the image this product really builds.

AWS's container-caching post (AWS Machine Learning blog, "Introducing container caching in
Amazon SageMaker AI for faster model scaling", 2026-06-16; FACTS.md) publishes end-to-end
scale-out P50s (launch of a new instance to the endpoint serving on it) for three customers, with
and without the image cached, and the image and model sizes behind each:

========================  ==========  ==========  ===========  ==========
instance                  image       model (S3)  P50 no cache  P50 cached
========================  ==========  ==========  ===========  ==========
ml.g5.xlarge              10.6 GB     6.5 GB      346 s        216 s
ml.g5.2xlarge             17.5 GB     5.8 GB      346 s        164 s
ml.g4dn.xlarge            15.7 GB     0           381 s        134 s
========================  ==========  ==========  ===========  ==========

Caching "removes the container image pull" and is automatic on accelerator instance types; a
missing cache falls back to pulling from ECR. So for one instance type the difference between the
two P50s is what pulling that image costs: on ml.g5.xlarge 130 s for 10.6 GB, 12.3 s per GB.

This product bakes the weights and adapters into the image (no S3 download at start), so

- **cached** (a scale-out of a tag the variant already runs): the instance type's cached P50.
  It includes the customer's 6.5 GB model download from S3, which this image does not do: kept,
  a margin, not subtracted;
- **not cached** (the first instances of a new tag, or the cache unavailable): the cached P50 plus
  this image's compressed size at the instance type's seconds per GB.

The image's size: the GPU base (``vllm/vllm-openai``, assumed at :data:`GPU_BASE_GB`: its size is
not measurable without pulling it) + the product's own layers as measured on the tiny CPU image
that ``make test-image`` builds (``make image-size`` writes docs/measurements/image_size.json;
``tests/image`` holds the committed figure to the built image) less that image's tiny model +
the config's weights and adapters (sizing.capacity: AWQ int4 weights do not compress).

Instance types without a published figure take ml.g5.xlarge's, and the plan says so.

**The engine's part, measured** (issue 46): AWS's P50s hold some engine's start from container
start to serving, unpublished; the product assumes 75 s for it
(typed_config.instance_start.ASSUMED_STARTUP_SECONDS). This product's own start is measured
(sizing.engine_start: vLLM 0.26 on an H100, 120 s +- 23 s with a matching compile cache, 202 s
without), so the measured scale-out is the cached P50 less the assumed 75 s plus the measured
start (``measured_cached_seconds``; ``measured_edge_seconds`` at the start's pessimistic edge).
The simulator, the capacity gate and the fleet solver take ``planned_seconds`` (the start from
the release's compile cache where the variant's GPU is the preparation job's, cold otherwise, at
its pessimistic edge); a tag not yet cached adds the image pull (``planned_uncached_seconds``),
from which sizing.ready_bound derives the per-start bound of deploys and the canary controller's
waits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from sizing.capacity import lora_bytes, weight_bytes
from sizing.engine_start import measured
from typed_config import DeploymentConfig, VariantName
from typed_config.catalog import INSTANCE_CATALOG
from typed_config.instance_start import ASSUMED_STARTUP_SECONDS

GB = 1e9
MEASUREMENT = Path(__file__).resolve().parents[1] / "docs" / "measurements" / "image_size.json"

#: (image GB, model GB, P50 without caching s, P50 with caching s) per instance type, from AWS's
#: container-caching post (module docstring).
PUBLISHED_P50: dict[str, tuple[float, float, float, float]] = {
    "ml.g5.xlarge": (10.6, 6.5, 346.0, 216.0),
    "ml.g5.2xlarge": (17.5, 5.8, 346.0, 164.0),
    "ml.g4dn.xlarge": (15.7, 0.0, 381.0, 134.0),
}
#: Seconds SageMaker spends on an instance pool before its insufficient-capacity error moves a
#: scale-out on to the next pool: AWS publishes no figure, an assumption (the plan and the
#: simulator's pool-fallback scenario print it).
ICE_SECONDS = 60.0
#: The instance type whose figures stand in for types AWS published none for.
FALLBACK_TYPE = "ml.g5.xlarge"
#: Compressed size of the GPU base image, assumed: the smallest vLLM-class GPU image with a
#: published size in AWS's post (customer 3's, on ml.g5.xlarge; the SageMaker LMI vLLM image
#: there is 17.7 GB). Replace it with ``docker manifest inspect``'s sum for the pinned base.
GPU_BASE_GB = 10.6
GPU_BASE_SOURCE = (
    "assumed: the smallest vLLM-class GPU image in AWS's container-caching post "
    "(10.6 GB; the LMI vLLM image there is 17.7 GB)"
)


@dataclass(frozen=True)
class Term:
    name: str
    value: float
    unit: str
    source: str


@dataclass(frozen=True)
class ScaleOutTime:
    """Seconds from an instance's launch to serving, for one variant's instance type."""

    instance_type: str
    image_gb: float
    cached_seconds: float
    uncached_seconds: float
    terms: tuple[Term, ...]
    #: With the engine's start measured in place of the assumed one (module docstring).
    measured_cached_seconds: float = 0.0
    measured_edge_seconds: float = 0.0
    measured_uncached_seconds: float = 0.0
    #: The same without a compile cache: a variant on another GPU than the preparation job's
    #: (sizing/compile_cache_plan.py), or a release made before the job made one.
    measured_cold_cached_seconds: float = 0.0
    #: What the simulator, the capacity gate and the fleet solver plan on (issue 46 item 3): the
    #: measured start of this instance type's start (from the release's compile cache where the
    #: preparation job runs on the same GPU, cold otherwise) at its pessimistic edge.
    planned_seconds: float = 0.0
    #: Whether ``planned_seconds`` counts the start from the compile cache (else cold).
    planned_with_cache: bool = False
    #: Pulling this image at the instance type's seconds per GB (AWS's two P50s).
    image_pull_seconds: float = 0.0
    #: The same start for a tag not yet cached (a deploy's green fleet, a new tag's canary
    #: instances): ``planned_seconds`` plus the image pull. What the per-start bound of deploys
    #: and the canary controller's waits covers (sizing.ready_bound).
    planned_uncached_seconds: float = 0.0


@lru_cache(maxsize=4)
def measured_layers(path: Path = MEASUREMENT) -> dict[str, float]:
    """The product's layers as ``make image-size`` measured them on the tiny image (read once:
    the plan and the simulator ask per variant and per pool)."""
    data = json.loads(path.read_text())
    return {
        "product_bytes": float(data["product_bytes"]),
        "model_layer_bytes": float(data["model_layer_bytes"]),
    }


def image_terms(cfg: DeploymentConfig) -> tuple[float, tuple[Term, ...]]:
    """The serving image's compressed size in GB and its terms."""
    layers = measured_layers()
    code_gb = (layers["product_bytes"] - layers["model_layer_bytes"]) / GB
    weights_gb = weight_bytes(cfg.architecture, cfg.model.quantization) / GB
    rank = cfg.engine.max_lora_rank
    adapters_gb = lora_bytes(cfg.architecture, rank, len(cfg.adapters)) / GB if cfg.adapters else 0
    terms = (
        Term("GPU base image", GPU_BASE_GB, "GB", GPU_BASE_SOURCE),
        Term(
            "product layers",
            round(code_gb, 3),
            "GB",
            f"measured on the tiny image (make image-size: {MEASUREMENT.name}), its tiny model "
            "excluded",
        ),
        Term(
            "weights",
            round(weights_gb, 2),
            "GB",
            f"computed: {cfg.model.quantization} weights from the architecture (sizing.capacity)",
        ),
        Term(
            "adapters",
            round(adapters_gb, 2),
            "GB",
            f"computed: {len(cfg.adapters)} x rank {rank} on 7 projections, fp16",
        ),
    )
    return round(sum(t.value for t in terms), 2), terms


def time_to_serve(
    cfg: DeploymentConfig, variant: VariantName, instance_type: str | None = None
) -> ScaleOutTime:
    """Launch to serving for ``variant``'s instance type (or ``instance_type``, one of its
    pools) and this product's image."""
    itype = instance_type or cfg.variants[variant].instance_type
    known = itype in PUBLISHED_P50
    img_pub, model_pub, uncached_pub, cached_pub = PUBLISHED_P50[itype if known else FALLBACK_TYPE]
    per_gb = (uncached_pub - cached_pub) / img_pub
    image_gb, image = image_terms(cfg)
    where = itype if known else f"{FALLBACK_TYPE}'s (AWS published none for {itype})"
    terms = (
        *image,
        Term(
            "launch to serving, image cached",
            cached_pub,
            "s",
            f"AWS P50 on {where}: {img_pub:g} GB image, {model_pub:g} GB model from S3 "
            "(this image downloads none: kept as margin)",
        ),
        Term(
            "image pull",
            round(per_gb, 1),
            "s/GB",
            f"AWS P50s on {where}: {uncached_pub:g} s without the cache - {cached_pub:g} s with "
            f"it, over its {img_pub:g} GB image",
        ),
    )
    start = measured()
    terms += (
        Term(
            "engine start in AWS's P50",
            ASSUMED_STARTUP_SECONDS,
            "s",
            "assumed: container start to /ping 200 (typed_config.instance_start."
            "ASSUMED_STARTUP_SECONDS); AWS publishes no split of its P50",
        ),
        Term(
            "engine start, measured",
            start.warm_seconds,
            "s",
            f"vLLM {start.vllm} on one {start.device} with a matching compile cache, "
            f"+- {start.error_seconds:g} s ({start.cold_seconds:g} s without; {start.source}); "
            "carried to the target GPU unchanged: host work, the GPU idle (sizing.engine_start)",
        ),
    )
    engine = cached_pub - ASSUMED_STARTUP_SECONDS
    warm = uses_compile_cache(cfg, itype)
    own_start = start.warm_seconds if warm else start.cold_seconds
    planned = engine + own_start + start.error_seconds
    return ScaleOutTime(
        instance_type=itype,
        image_gb=image_gb,
        cached_seconds=cached_pub,
        uncached_seconds=round(cached_pub + image_gb * per_gb),
        terms=terms,
        measured_cached_seconds=round(engine + start.warm_seconds),
        measured_edge_seconds=round(engine + start.warm_seconds + start.error_seconds),
        measured_uncached_seconds=round(engine + start.warm_seconds + image_gb * per_gb),
        measured_cold_cached_seconds=round(engine + start.cold_seconds),
        planned_seconds=round(planned),
        planned_with_cache=warm,
        image_pull_seconds=round(image_gb * per_gb),
        planned_uncached_seconds=round(planned + image_gb * per_gb),
    )


def uses_compile_cache(cfg: DeploymentConfig, instance_type: str) -> bool:
    """Whether an instance of ``instance_type`` starts from the release's compile cache: the
    preparation job that makes it runs on the same GPU (sizing/compile_cache_plan.py)."""
    gpu = INSTANCE_CATALOG.get(instance_type)
    job = INSTANCE_CATALOG.get(cfg.model_prep.instance_type)
    return gpu is not None and job is not None and gpu.gpu == job.gpu


def scale_out_section(
    cfg: DeploymentConfig, variant: VariantName, *, deploy_bound_seconds: float
) -> dict[str, object]:
    """The plan's scale-out figures for ``variant``; the simulator's scale-outs use
    ``planned_seconds`` (simulator.assumptions), and deploys and the canary controller's waits
    use the per-start bound ``deploy_bound_seconds`` (sizing.ready_bound, derived from
    ``planned_uncached_seconds``), which the line checks is not below this variant's new-tag
    start."""
    t = time_to_serve(cfg, variant)
    pools = cfg.variants[variant].pools
    fallbacks = [
        {
            "priority": pool.priority,
            "instance_type": pool.instance_type,
            "cached_seconds": time_to_serve(cfg, variant, pool.instance_type).planned_seconds
            + (pool.priority - 1) * ICE_SECONDS,
            "published": pool.instance_type in PUBLISHED_P50,
        }
        for pool in pools[1:]
    ]
    return {
        "instance_type": t.instance_type,
        "fallbacks": fallbacks,
        "image_gb": t.image_gb,
        "cached_seconds": t.cached_seconds,
        "uncached_seconds": t.uncached_seconds,
        "deploy_bound_seconds": deploy_bound_seconds,
        "measured_cached_seconds": t.measured_cached_seconds,
        "measured_edge_seconds": t.measured_edge_seconds,
        "measured_uncached_seconds": t.measured_uncached_seconds,
        "measured_cold_cached_seconds": t.measured_cold_cached_seconds,
        "planned_seconds": t.planned_seconds,
        "planned_with_cache": t.planned_with_cache,
        "planned_uncached_seconds": t.planned_uncached_seconds,
        "terms": [t.__dict__ for t in t.terms],
    }


def render_scale_out(s: dict[str, object]) -> list[str]:
    terms = {t["name"]: t for t in s["terms"]}  # type: ignore[attr-defined]
    image = " + ".join(
        f"{terms[n]['value']:g} {n}" for n in ("GPU base image", "product layers", "weights",
                                               "adapters")
    )  # fmt: skip
    start_s = terms["engine start, measured"]["value"]
    assumed_s = terms["engine start in AWS's P50"]["value"]
    planned = float(s["planned_seconds"])  # type: ignore[arg-type]
    how = (
        "from the release's compile cache"
        if s["planned_with_cache"]
        else "cold: another GPU than the preparation job's, the compile cache line"
    )
    lines = [
        f"          scale-out: a new instance serves {planned:g} s after launch with the image "
        f"cached (the simulator's, the capacity gate's and the fleet solver's figure): AWS's P50 "
        f"{s['cached_seconds']:g} s with its assumed {assumed_s:g} s engine start replaced by the "
        f"measured start {how}, at its pessimistic edge ({s['measured_edge_seconds']:g} s with "
        f"the cache, {s['measured_cold_cached_seconds']:g} s + the error without; measured "
        f"{start_s:g} s with it); {s['planned_uncached_seconds']:g} s for a tag not yet cached, "
        f"the same start with the image pulled ({s['image_gb']:g} GB image = {image} GB; "
        f"{terms['image pull']['value']:g} s/GB; deploys and the canary controller's waits "
        f"bound a start at {s['deploy_bound_seconds']:g} s: sizing.ready_bound)",
        *(f"            - {n}: {t['source']}" for n, t in terms.items()),
    ]
    for f in s.get("fallbacks") or []:  # type: ignore[attr-defined]
        lines.append(
            f"            - a scale-out that falls back to pool {f['priority']} "
            f"({f['instance_type']}) serves {f['cached_seconds']:g} s after launch, cached: "
            f"{ICE_SECONDS:g} s per pool passed over (assumed: AWS publishes no figure)"
            + ("" if f["published"] else f"; {FALLBACK_TYPE}'s P50 (none for this type)")
        )
    new_tag = float(s["planned_uncached_seconds"])  # type: ignore[arg-type]
    bound = float(s["deploy_bound_seconds"])  # type: ignore[arg-type]
    if bound < new_tag:
        lines.append(
            f"          WARNING: a new tag's instance serves {new_tag:g} s after launch (the "
            f"measured start at its pessimistic edge and the image pull), above the {bound:g} s "
            "per start that deploy times and the canary controller's waits use "
            "(sizing.ready_bound)"
        )
    return lines
