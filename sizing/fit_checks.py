"""The rules a config must pass that need the capacity model, and the one way to read a config
to act on it.

``typed_config`` states every rule it can without the sizing model; these need it (a pool's GPU
must hold the model; a routing threshold must fit what one instance runs; the blue/green update
and the canary's capacity wait must hold the per-start bound derived from the measured start:
sizing.ready_bound). ``typed_config`` sits
below this package and cannot import it, so these checks travel in pydantic's validation context
(``typed_config.FIT_CHECKS_CONTEXT``):
:func:`load_config`, :func:`parse_config` and :func:`validate_config` always pass them, so every
config the stacks, the simulator and the tools act on has passed them, reported with the rest,
one line per broken rule naming the field. What only a deploy must hold (every variant's GPU
holds the model; every watched alarm's threshold sits above what a healthy instance answers in:
sizing.alarm_headroom)
is :func:`check_deployable`, which synth runs on the config with its release inputs applied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sizing.alarm_headroom import watched_alarm_problems
from sizing.capacity import CapacityError, estimate
from sizing.fit_advice import does_not_fit
from sizing.ready_bound import ready_bound_errors
from sizing.scaling_target import least_spill_threshold
from typed_config import (
    ARCHITECTURE_CONTEXT,
    FIT_CHECKS_CONTEXT,
    VARIANT_NAMES,
    DeploymentConfig,
    FitCheck,
    ModelArchitecture,
    parse_config_data,
    read_config,
)
from typed_config.loader import error_lines, prefix_aware_routings


def pool_errors(cfg: DeploymentConfig) -> list[str]:
    """Each instance pool (``variants.<name>.instance_pools.<i>``) that could not serve.

    - Its engine settings merged into the variant's break an engine rule (``engine``).
    - Its GPU cannot hold the model with those settings: the pool's capacity plan
      (sizing.capacity.estimate) leaves no KV cache, or less than one sequence at
      engine.max_model_len (``instance_type``, the plan's memory terms in the message).
      SageMaker falls back to the pool on an insufficient capacity error (developer guide,
      "Deploy to multiple instance types with instance pools"), so a pool that cannot load the
      model turns a capacity shortage into failed instances in the middle of a scale-out.
    """
    errors: list[str] = []
    if cfg._known_architecture is None:
        return errors
    for vname in VARIANT_NAMES:
        variant = cfg.variants[vname]
        for i, pool in enumerate(variant.instance_pools or ()):
            field = f"variants.{vname}.instance_pools.{i}"
            try:
                pool_cfg = cfg.for_pool(pool)
            except ValidationError as err:
                errors += [f"{field}.engine.{line}" for line in error_lines(err.errors())]
                continue
            try:
                estimate(pool_cfg, pool.instance_type)
            except CapacityError as err:
                errors.append(
                    does_not_fit(
                        pool_cfg, f"{field}.instance_type", pool.instance_type, str(err),
                        label=f" (priority {pool.priority})",
                    )
                )  # fmt: skip
    return errors


def routing_threshold_errors(cfg: DeploymentConfig) -> list[str]:
    """Each PREFIX_AWARE ``concurrency_threshold`` above what one instance runs at once (the
    plan's figure: engine.max_num_seqs capped by the KV cache at the typical request length,
    sizing.capacity.estimate): the prefix-selected instance then queues requests inside vLLM
    before any goes to an idle instance, so one instance hot-spots. (The prefix's own rule,
    which needs no capacity model, is typed_config.routing_errors.)"""
    errors: list[str] = []
    for field, variant, routing in prefix_aware_routings(cfg):
        threshold = routing.concurrency_threshold
        if threshold is None or cfg._known_architecture is None:
            continue
        below = _below_target(cfg, field, threshold)
        if below:
            errors.append(below)
            continue
        for pool in variant.pools:  # every pool's instances: any may be prefix-selected
            try:
                pool_cfg = cfg.for_pool(pool)
                cap = estimate(pool_cfg, pool.instance_type)
            except (CapacityError, ValidationError):
                continue  # the model does not fit at all: pool_errors / build_stacks report it
            seqs = pool_cfg.engine.max_num_seqs
            runs = min(seqs, cap.concurrency_at_typical_length)
            if threshold > runs:
                errors.append(
                    f"{field}.concurrency_threshold: {threshold} exceeds what one "
                    f"{pool.instance_type} runs at once ({runs}: engine.max_num_seqs "
                    f"{seqs}, KV cache at the typical request "
                    f"{cap.concurrency_at_typical_length}); the prefix-selected instance would "
                    "queue requests before any spills to another, so one instance hot-spots"
                )
                break
    return errors


def _below_target(cfg: DeploymentConfig, field: str, threshold: int) -> str | None:
    """A configured ``concurrency_threshold`` below the variant's scaling target
    (sizing.scaling_target.spill_threshold says why that is refused)."""
    name = field.split(".")[1]
    if name not in VARIANT_NAMES:
        return None
    try:
        least = least_spill_threshold(cfg, name)
    except (CapacityError, ValueError, KeyError, StopIteration):
        return None  # the model does not fit: pool_errors reports it
    if threshold >= least:
        return None
    return (
        f"{field}.concurrency_threshold: {threshold} is below the variant's scaling target "
        f"({least} in flight, rounded up: sizing.scaling_target.concurrency_target): an instance "
        "would spill a conversation off the instance that caches it while it still has the room "
        f"autoscaling holds it at; set it to {least} or more, or leave it out to derive it from "
        "the target"
    )


#: Every fit check, in the order their errors are reported.
FIT_CHECKS: tuple[FitCheck, ...] = (pool_errors, routing_threshold_errors, ready_bound_errors)


def fit_errors(cfg: DeploymentConfig) -> list[str]:
    """Each variant's instance type (or instance pool) whose GPU cannot hold the model, as
    ``field: why`` with what would fit (sizing.fit_advice); a second variant on the same type
    with the same engine points at the first."""
    errors: list[str] = []
    told: dict[tuple[str, str], str] = {}
    for vname in VARIANT_NAMES:
        variant = cfg.variants[vname]
        placed = (
            [(f"variants.{vname}.instance_pools.{i}.instance_type", p)
             for i, p in enumerate(variant.instance_pools)]
            if variant.instance_pools
            else [(f"variants.{vname}.instance_type", variant.pools[0])]
        )  # fmt: skip
        for field, pool in placed:
            pool_cfg = cfg.for_pool(pool)
            try:
                estimate(pool_cfg, pool.instance_type)
            except CapacityError as err:
                key = (pool.instance_type, pool_cfg.engine.model_dump_json())
                if key in told:
                    errors.append(
                        f"{field}: {pool.instance_type} cannot hold the model either "
                        f"(see {told[key]})"
                    )
                else:
                    told[key] = field
                    errors.append(does_not_fit(pool_cfg, field, pool.instance_type, str(err)))
    return errors


def check_deployable(cfg: DeploymentConfig) -> None:
    """What synth refuses on the config a deploy will run (its release inputs applied, which
    may pin another instance type): a variant's GPU that cannot hold the model (ConfigError
    naming the field and its line, the memory terms and what would fit: :func:`fit_errors`)
    or a watched alarm a healthy fleet at its scaling target sets off (ConfigError naming each
    field, the rule and both figures: sizing.alarm_headroom). Not a
    load rule: the plan and the simulator still show such a config and say why it cannot
    ship."""
    misfits = fit_errors(cfg)
    if misfits:
        raise cfg.error(misfits)
    latency = watched_alarm_problems(cfg)
    if latency:
        raise cfg.error(latency)


def load_config(path: Path, *, env: str) -> DeploymentConfig:
    """Read and validate ``config/<env>.yaml``: the config's own rules and the fit checks."""
    return read_config(path, env=env, fit_checks=FIT_CHECKS)


def parse_config(raw: Any, *, env: str, source: Path, base_dir: Path) -> DeploymentConfig:
    """Validate an already-parsed YAML document: the config's own rules and the fit checks."""
    return parse_config_data(raw, env=env, source=source, base_dir=base_dir, fit_checks=FIT_CHECKS)


def validate_config(
    data: dict[str, Any], *, architecture: ModelArchitecture | None = None
) -> DeploymentConfig:
    """A config derived in code (a deploy's inputs applied, a solver's candidate fleet): the
    same rules as :func:`load_config`. ``architecture``: the one read from the original's
    ``model.architecture_file``, when it named one."""
    context: dict[str, Any] = {FIT_CHECKS_CONTEXT: FIT_CHECKS}
    if architecture is not None:
        context[ARCHITECTURE_CONTEXT] = architecture
    return DeploymentConfig.model_validate(data, context=context)
