"""``python -m simulator``: replay traces against config/<env>.yaml's scaling policy.

Commands:
  run        every built-in trace (or --trace ...) -> <out>/<trace>.png, <trace>.json, summary.json
  capacity   how per-instance capacity is derived for each variant
  validate   the One Piece incident with the original team's policy (simulator/validation.py)
  scenarios  operator events on a timeline (simulator/scenarios/registry.py), e.g. deploy-at-peak
  rollout    canary rollout 5 -> 100 on a normal day with the controller's own rules
             (simulator/rollout.py) -> <out>/canary-rollout.png, canary-rollout.json
  blast-radius  four bad builds (2 % errors, 2x latency, truncated answers, one adapter
             failing) through the release as configured and with(out) a shadow stage: where
             each is stopped, after how long, what share of the day's requests it answered
             (simulator/blast_radius.py) -> <out>/blast-radius.json
  routing    multi-turn sessions under RANDOM, LEAST_OUTSTANDING_REQUESTS and PREFIX_AWARE
             routing with vLLM's prefix cache per instance (simulator/routing/compare.py)
             -> <out>/routing.json
  gate       the capacity gate: every scenario of fleet.scenarios, every SLO of fleet.slos,
             minute by minute at the pessimistic edge (simulator/slo_gate.py); exit 1 on a miss
             -> <out>/capacity-gate.json
  fleet      the cheapest fleet per instance type that passes the gate (simulator/fleet/solver.py),
             then the prefix-cache hit rate iterated to its fixed point on the cheapest fleet
             (simulator/hit_rate_loop.py) -> <out>/fleet.json
  hit-rate   the prefix-cache hit rate at the config's own fleet's load: the fixed point of
             hit rate -> fleet -> hit rate (simulator/hit_rate_loop.py)
  components the component shape (inference_components:): copies, instances, cold requests and
             the month's cost beside the variant shape's on the same traffic, and an adapter
             release replayed like a canary (simulator/components.py, adapter_rollout.py)
             -> <out>/components.json. With such a config, `run` is this command, `gate` holds
             this shape, and the variant-only replays say they are skipped.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any, cast

from simulator.assumptions import Assumptions
from simulator.capacity import BANDWIDTH_EFFICIENCY, instance_model
from simulator.routing.windows import MINUTES, WARMUP, WINDOWS
from simulator.run import Result, instance_models, simulate
from simulator.scaling_policies import SimulationError
from simulator.shadow_replay import SHADOW_LOADS
from simulator.traces import BUILTIN, TraceError, resolve
from sizing.capacity import CapacityError
from sizing.fit_checks import load_config
from sizing.scale_out_time import time_to_serve
from sizing.serving_speed import EDGES
from typed_config import ConfigError, DeploymentConfig, VariantName, config_path
from typed_config.yaml_source import read_yaml

REPO = Path(__file__).resolve().parent.parent


def _load(path: Path) -> DeploymentConfig:
    """Load any config file; its env comes from the file itself (or its name)."""
    raw = read_yaml(path)
    env = raw.get("env") if isinstance(raw, dict) else None
    return load_config(path, env=env if isinstance(env, str) else path.stem)


#: Float assumptions as options: (flag, Assumptions field, help); defaults from Assumptions.
FLOAT_OPTIONS = (
    (
        "--provision-seconds",
        "provision_seconds",
        "scaling decision to instance running (default: the plan's scale-out figure, image "
        "cached; deploys: the plan's per-start bound, sizing.ready_bound)",
    ),
    ("--startup-seconds", "startup_seconds", "container start to /ping 200 (observed: ~75)"),
    (
        "--decode-tps",
        "decode_tokens_per_second",
        "what-if: a constant decode tokens/s per sequence instead of the speed model",
    ),
    ("--prefill-tps", "prefill_tokens_per_second", "with --decode-tps: prefill tokens/s [10000]"),
    ("--prefix-cache-hit-rate", "prefix_cache_hit_rate", "share of prompt tokens cached"),
    (
        "--slo-queue-wait-ms",
        "slo_queue_wait_ms",
        "what-if: a minute is over SLO above this queue wait (default: the config's "
        "monitoring.slo_queue_wait_p95_ms)",
    ),
    (
        "--slo-error-rate",
        "slo_error_rate",
        "what-if: ...or above this share of rejected requests (default: the config's "
        "monitoring.slo_error_rate_percent / 100)",
    ),
)


def _assumption_args(p: argparse.ArgumentParser) -> None:
    d = Assumptions()
    g = p.add_argument_group(
        "assumptions (beyond the config; defaults in simulator/assumptions.py)"
    )
    for flag, name, text in FLOAT_OPTIONS:
        g.add_argument(
            flag, dest=name, type=float, default=getattr(d, name), help=f"{text} [%(default)s]"
        )
    g.add_argument(
        "--speed-edge",
        choices=EDGES,
        default=d.speed_edge,
        help="edge of the speed model's error band (sizing/serving_speed.py) [%(default)s]",
    )
    g.add_argument("--tick-seconds", type=int, default=d.tick_seconds, choices=(5, 10, 30, 60))
    g.add_argument(
        "--no-serialize-updates",
        dest="serialize_updates",
        action="store_false",
        help="let a capacity change start while instances are still starting",
    )
    g.add_argument(
        "--tt-out-datapoint-seconds",
        type=int,
        default=None,
        help="target tracking scale-out datapoint length (default 10 s for "
        "concurrency, 60 s for invocations)",
    )
    g.add_argument(
        "--disable-policy",
        dest="disabled_policies",
        action="append",
        default=[],
        metavar="NAME",
        help="leave this step policy out (repeatable)",
    )


def _routing_args(p: argparse.ArgumentParser) -> None:
    from simulator.sessions import SessionModel

    d = SessionModel()
    g = p.add_argument_group(
        "routing comparison (simulator/routing/compare.py, simulator/sessions.py)"
    )
    g.add_argument("--routing-trace", default="normal-day", help="arrival rates [%(default)s]")
    g.add_argument(
        "--window",
        action="append",
        metavar="HH:MM",
        help=f"start of a measured window, JST (repeatable) [{' '.join(WINDOWS)}]",
    )
    g.add_argument("--minutes", type=int, default=MINUTES, help="measured minutes [%(default)s]")
    g.add_argument(
        "--warmup-minutes",
        type=int,
        default=WARMUP,
        help="minutes before, not measured [%(default)s]",
    )
    g.add_argument(
        "--instances", type=int, default=None, help="fleet size [the scaling simulation's]"
    )
    g.add_argument("--variant", choices=("primary", "canary"), default="primary")
    g.add_argument("--mean-turns", type=float, default=d.mean_turns, help="[%(default)s]")
    g.add_argument(
        "--think-seconds",
        type=float,
        default=d.think_seconds,
        help="mean seconds between an answer and the next turn [%(default)s]",
    )
    g.add_argument("--seed", type=int, default=0, help="[%(default)s]")


def _assumptions(args: argparse.Namespace) -> Assumptions:
    names = {f.name for f in fields(Assumptions)}
    values = {k: v for k, v in vars(args).items() if k in names}
    values["disabled_policies"] = tuple(values.get("disabled_policies", ()))
    return replace(Assumptions(), **values)


def _config(args: argparse.Namespace) -> DeploymentConfig:
    if args.config:
        return _load(Path(args.config))
    return load_config(config_path(REPO, args.env), env=args.env)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "run"


def output_dir(args: argparse.Namespace, env: str, label: str) -> Path:
    """--out, else ``sim-out/<env>`` (what make simulate writes), or for a comparison its own
    ``sim-out/compare/<label>-vs-<baseline>``: a comparison once overwrote make simulate's
    summary.json and charts in sim-out/prod."""
    if args.out:
        return Path(args.out)
    if getattr(args, "baseline", None):
        return Path("sim-out/compare") / f"{_slug(label)}-vs-{_slug(Path(args.baseline).stem)}"
    return Path("sim-out") / env


def _variant_only(args: argparse.Namespace, what: str) -> bool:
    """True (and says so) when the config ships the component shape: ``what`` replays variants."""
    cfg = _config(args)
    if cfg.inference_components is None:
        return False
    print(f"{what}: skipped: {cfg.env} ships the component shape (inference_components:), which "
          "this replay does not model; `python -m simulator components` replays it")  # fmt: skip
    return True


def cmd_components(args: argparse.Namespace) -> int:
    from simulator.adapter_rollout import replay_releases
    from simulator.adapter_rollout import table as release_table
    from simulator.component_gate import scenario_traces
    from simulator.components import simulate_components, summary

    cfg, a = _config(args), _assumptions(args)
    ic = cfg.inference_components
    if ic is None:
        raise SimulationError(
            f"{cfg.env}: no inference_components section; `python -m simulator run` replays the "
            "variant shape"
        )
    started = time.perf_counter()
    report: dict[str, object] = {"config": cfg.env, "traces": {}}
    traces = report["traces"]
    assert isinstance(traces, dict)
    print(
        f"component shape, {cfg.env}: {ic.copies_per_instance} cop"
        f"{'y' if ic.copies_per_instance == 1 else 'ies'} per {ic.instance_type}, copies "
        f"{ic.base.copies.min}-{ic.base.copies.max} at {ic.base.target_requests_per_copy:g} "
        f"concurrent requests per copy, instances {ic.instances.min}-{ic.instances.max}"
    )
    for name, tr in scenario_traces(cfg, a):
        if tr is None:
            continue
        s = summary(simulate_components(cfg, tr, a))
        variant = simulate(cfg, tr, a).summary
        s["variant_shape_cost_per_month_usd"] = variant["cost_per_month_usd"]
        s["variant_shape_rejected_429"] = variant["rejected_429"]
        traces[name] = s
        copies, inst = s["copies"], s["instances"]
        assert isinstance(copies, dict) and isinstance(inst, dict)
        print(
            f"  {name}: copies {copies['min']}-{copies['max']}, instances {inst['min']}-"
            f"{inst['max']} ({s['copy_scale_outs']} copy and {s['instance_scale_outs']} instance "
            f"scale-outs); ${s['cost_per_month_usd']:,}/month vs the variant shape's "
            f"${variant['cost_per_month_usd']:,} on the same traffic; 429s {s['rejected_429']:,} "
            f"(variant shape {variant['rejected_429']:,})"
        )
        if ic.scales_to_zero and (s["minutes_at_zero"] or s["cold_failures"]):
            spells = s["cold_spells"]
            assert isinstance(spells, list)
            print(
                f"      at zero {s['minutes_at_zero']:,} min, {s['nights_at_zero']} night(s) at "
                f"zero; {s['cold_failures']:,} cold requests (NoCapacityInvocationFailures, not "
                f"429s) in {len(spells)} wake(s), the longest wait {s['longest_cold_wait_s']} s "
                "until the first copy served (the client route retries or falls back); at most "
                f"{s['copies_desired_max']} copies asked"
            )
    print(f"  start times: {_start_line(cfg, a)}")
    outcomes = replay_releases(cfg, dict(_share(x) for x in args.adapter_share))
    print(release_table(outcomes))
    report["adapter_releases"] = [o.as_dict() for o in outcomes]
    out = output_dir(args, cfg.env, "")
    out.mkdir(parents=True, exist_ok=True)
    (out / "components.json").write_text(json.dumps(report, indent=2, default=str))
    print(f"wrote components.json to {out}/ in {time.perf_counter() - started:.1f} s")
    return 0


def _start_line(cfg: DeploymentConfig, a: Assumptions) -> str:
    from simulator.components import start_times

    return start_times(cfg, a).source


def cmd_run(args: argparse.Namespace) -> int:
    if _config(args).inference_components is not None:
        return cmd_components(args)
    cfg, a = _config(args), _assumptions(args)
    baseline = _load(Path(args.baseline)) if args.baseline else None
    base_a = replace(a, disabled_policies=())  # --disable-policy applies to the candidate only
    traces = [resolve(t) for t in (args.trace or list(BUILTIN))]
    label = args.label or f"{cfg.env}" + (" (candidate)" if baseline else "")
    out = output_dir(args, cfg.env, label)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    per_trace: dict[str, object] = {}
    summary: dict[str, object] = {"config": cfg.env, "assumptions": a.__dict__, "traces": per_trace}
    for tr in traces:
        res: Result = simulate(cfg, tr, a, label=label)
        base = (
            simulate(baseline, tr, base_a, label=f"baseline {Path(args.baseline).name}")
            if baseline is not None
            else None
        )
        entry: dict[str, object] = {"summary": res.summary, "activities": _activities(res)}
        if base is not None:
            entry["baseline"] = {
                "config": str(args.baseline),
                "summary": base.summary,
                "activities": _activities(base),
            }
        (out / f"{tr.name}.json").write_text(json.dumps(entry, indent=2, default=str))
        if not args.no_charts:
            from simulator.report import chart

            chart(res, out / f"{tr.name}.png", base)
        per_trace[tr.name] = entry
        from simulator.report import table

        print(table(res, base), end="\n\n")
    for variant in ("primary", "canary"):
        print(f"scale-out ({variant}): {_scale_out_source(cfg, variant, a)}")
    for line in _plan_figures(cfg, a):
        print(line)
    summary["wall_seconds"] = round(time.perf_counter() - started, 2)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    print(f"wrote {len(traces)} trace(s) to {out}/ in {summary['wall_seconds']} s")
    return 0


def _plan_figures(
    cfg: DeploymentConfig,
    a: Assumptions,
    month: float | None = None,
    optimistic: float | None = None,
) -> list[str]:
    """The plan's figures for ``cfg`` (simulator/user_figures.py: the one function each command
    imports): what a user sees at the scaling target, and the month beside the budget at each
    edge of the speed model's error. The traces above are replays of single days; these are what
    the plan, make fleet and the gate quote. ``month``/``optimistic``: the months the caller has
    already replayed at ``a``'s edge and at the optimistic one (the solver's)."""
    from simulator.user_figures import at_target_lines, monthly_by_edge
    from sizing.plan import monthly_line
    from sizing.serving_speed import Edge

    # ``month``: the gate's figure for this fleet, which is monthly_bill's (the same arithmetic
    # on the same replays: simulator.user_figures.week_monthly)
    known: dict[Edge, float] = {a.speed_edge: month or 0.0}
    if optimistic:
        known["optimistic"] = optimistic
    line, warning = monthly_line(
        monthly_by_edge(cfg, a, known=known), cfg.fleet.budget_usd_per_month
    )
    out = [f"the plan's figures ({cfg.env}):"]
    out += [f"  {x}" for x in at_target_lines(cfg)]
    out.append(f"  cost {line}")
    if warning:
        out.append(f"  WARNING: {warning}")
    return out


def _activities(res: Result) -> list[dict[str, object]]:
    return [{"variant": v, **x.as_dict()} for v, r in res.runs.items() for x in r.activities]


def _scale_out_source(cfg: DeploymentConfig, variant: VariantName, a: Assumptions) -> str:
    """Where the simulator's scale-out and new-tag delays come from (printed with them)."""
    if a.provision_seconds is not None:
        return (
            f"every new instance serves {a.scale_out_seconds(cfg, variant):g} s after the "
            "decision (--provision-seconds + --startup-seconds)"
        )
    t = time_to_serve(cfg, variant)
    start = "from the release's compile cache" if t.planned_with_cache else "cold (no cache)"
    return (
        f"a scale-out serves {t.planned_seconds:g} s after the decision (AWS's P50 with the image "
        f"cached, {t.cached_seconds:g} s, its assumed engine start replaced by the measured one "
        f"{start} at its pessimistic edge: sizing/scale_out_time.py, sizing/engine_start.py; "
        f"{t.planned_uncached_seconds:g} s with this {t.image_gb:g} GB image not yet cached); a "
        f"new tag's instances {a.new_tag_seconds(cfg):g} s (the plan's per-start bound, the "
        "slowest variant's such start + a margin: sizing.ready_bound)"
    )


def cmd_capacity(args: argparse.Namespace) -> int:
    cfg, a = _config(args), _assumptions(args)
    for variant, m in instance_models(cfg, a).items():
        print(f"{variant}: {m.instance_type} at ${m.price_per_hour}/h")
        print(
            f"  KV cache {m.kv_capacity_tokens:,} tokens / ({m.prompt_tokens} prompt + "
            f"{m.output_tokens} output) = {m.concurrency} sequences "
            f"(engine.max_num_seqs {m.max_num_seqs})"
        )
        cached, shared = m.speed.cached_tokens(m.prompt_tokens)
        print(
            f"  service time S at {m.concurrency} running = time to first token "
            f"{m.typical.prefill_seconds:.3f} s + decode {m.typical.decode_seconds:.2f} s "
            f"({(m.output_tokens - 1) / m.typical.decode_seconds:.1f} tok/s per sequence) = "
            f"{m.service_seconds:.2f} s; prompt {m.prompt_tokens} of which {cached} cached "
            f"({a.hit_rate(cfg):.0%}, {shared} shared by every request)"
        )
        print(f"  speed: {m.speed_source}")
        print(f"  scale-out: {_scale_out_source(cfg, cast(VariantName, variant), a)}")
        print(
            f"  throughput = {m.concurrency} / {m.service_seconds:.2f} s = "
            f"{m.requests_per_minute:,.0f} requests/minute (the original team: ~1,200)"
        )
        if m.roofline is not None:
            print(
                f"  memory-bandwidth bound ({BANDWIDTH_EFFICIENCY:.0%} of peak): "
                f"{m.roofline.decode_tokens_per_second:.1f} tok/s per sequence -> "
                f"{m.roofline.requests_per_minute:,.0f} requests/minute"
            )
        print(
            f"  admission limit {m.admission_limit} in flight; GPUMemoryUtilization "
            f"{m.gpu_memory_percent:.0f}% (vLLM preallocates it)"
        )
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from simulator.validation import one_piece

    if _variant_only(args, "validate"):
        return 0
    cfg, a = _config(args), _assumptions(args)
    report = one_piece(cfg, a)
    out = output_dir(args, cfg.env, "")
    out.mkdir(parents=True, exist_ok=True)
    (out / "one-piece-validation.json").write_text(
        json.dumps(report.as_dict(), indent=2, default=str)
    )
    for run in report.runs:
        res = run.result
        s = res.summary
        deg = s.get("degraded") or {}
        spike = s.get("spike_window") or {}
        assert isinstance(deg, dict) and isinstance(spike, dict)
        print(
            f"One Piece, {res.label}: peak minute {deg.get('peak_minute_rejected_pct', 0)}% "
            f"rejected; {deg.get('rejected_pct_in_window', 0)}% over the "
            f"{deg.get('last_minute', 0) - deg.get('first_minute', 0) + 1 if deg else 0} "
            f"degraded minutes; {spike.get('rejected_pct')}% over 20:00-20:45"
        )
        if not args.no_charts:
            from simulator.report import chart

            chart(res, out / f"one-piece-old-policy-{run.minutes_to_capacity}min.png")
    print("reported: ~20% failed with 429 for ~13 minutes, 8-13 minutes trigger to capacity")
    return 0


def cmd_scenarios(args: argparse.Namespace) -> int:
    """Operator scenarios (simulator/scenarios/registry.py): each writes its JSON and charts to
    --out."""
    from simulator.scenarios.registry import SCENARIOS

    if _variant_only(args, "scenarios"):
        return 0
    cfg, a = _config(args), _assumptions(args)
    names = args.scenario or list(SCENARIOS)
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        raise ValueError(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    for name in names:
        print(
            SCENARIOS[name](cfg, a, output_dir(args, cfg.env, ""), charts=not args.no_charts),
            end="\n\n",
        )
    return 0


def speed_line(cfg: DeploymentConfig, a: Assumptions) -> str:
    """Where the canary's per-instance speed comes from."""
    return instance_model(cfg, cfg.variants.canary.instance_type, a).speed_source


def cmd_rollout(args: argparse.Namespace) -> int:
    from simulator.rollout import NAME, simulate_rollout
    from simulator.rollout_report import chart, table

    if _variant_only(args, "rollout"):
        return 0
    cfg, a = _config(args), _assumptions(args)
    after = simulate_rollout(cfg, a)
    before = simulate_rollout(cfg, a, capacity_first=False)
    out = output_dir(args, cfg.env, "")
    out.mkdir(parents=True, exist_ok=True)
    report = {"capacity_first": after["summary"], "weights_only_before": before["summary"]}
    (out / f"{NAME}.json").write_text(json.dumps(report, indent=2, default=str))
    if not args.no_charts:
        chart(after, out / f"{NAME}.png", before)
    print(table(after, before))
    summary = after["summary"]
    over = summary["canary_minutes_over_capacity"]
    ceiling = summary["canary_minutes_over_capacity_at_ceiling"]
    if over > ceiling:
        print(
            f"error: the canary was over its capacity for {over - ceiling} minute(s) below its "
            "max_capacity (capacity did not come first)",
            file=sys.stderr,
        )
        return 1
    if ceiling:
        need = -(-summary["canary_peak_rpm"] // max(1, summary["canary_rpm_per_instance"]))
        print(
            f"warning: for {ceiling} minute(s) the canary ran at its max_capacity and still had "
            f"more traffic than capacity: {summary['canary_peak_rpm']:,} requests/minute at "
            f"{summary['canary_rpm_per_instance']:,} per instance needs {need} instances "
            f"({speed_line(cfg, a)}). The ceiling comes from "
            f"{'; '.join(summary['ceiling_fields'])}: raise that, or use a faster instance type"
        )
    return 0


def cmd_blast_radius(args: argparse.Namespace) -> int:
    """Every bad build through the canary steps alone, then through a shadow stage first (the
    config's, else rollout.shadow's defaults), once per shadow fleet load (--shadow-load: one)."""
    from simulator.bad_builds import adapter_shares
    from simulator.blast_radius import blast_radius, with_shadow, without_shadow
    from simulator.blast_radius_report import table

    if _variant_only(args, "blast-radius"):
        return 0
    cfg, a = _config(args), _assumptions(args)
    shares = adapter_shares(cfg, dict(_share(x) for x in args.adapter_share))
    started = time.perf_counter()
    stage = cfg.rollout.shadow
    loads = [args.shadow_load] if args.shadow_load else list(SHADOW_LOADS)
    shadowed = cfg if stage is not None else with_shadow(cfg)
    assert shadowed.rollout.shadow is not None
    sample = shadowed.rollout.shadow.sample_percent
    where = "as configured" if stage is not None else "with rollout.shadow at its defaults"
    runs = [
        (f"{where}: shadow stage (sample {sample} %, shadow fleet {load}), then canary steps",
         shadowed, load)
        for load in loads
    ]  # fmt: skip
    canary = ("as configured" if stage is None else "without the shadow stage") + ": canary only"
    runs.insert(0, (canary, without_shadow(cfg), loads[0]))
    report = []
    for title, c, load in runs:
        outcomes = blast_radius(c, a, shares=shares, shadow_load=load)
        print(table(title, outcomes), end="\n\n")
        report.append({"release": title, "builds": [o.as_dict() for o in outcomes]})
    out = output_dir(args, cfg.env, "")
    out.mkdir(parents=True, exist_ok=True)
    (out / "blast-radius.json").write_text(json.dumps(report, indent=2))
    print(f"wrote blast-radius.json to {out}/ in {time.perf_counter() - started:.1f} s")
    return 0


def _share(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    try:
        share = float(value) if sep else None
    except ValueError:
        share = None
    if share is None:
        raise ValueError(f"--adapter-share {text!r}: expected NAME=PERCENT, e.g. jp_style=10")
    return name, share


def cmd_routing(args: argparse.Namespace) -> int:
    """The routing comparison (simulator/routing/compare.py) on windows of a trace; the fleet is
    what the scaling simulation has in service then (``--instances`` to fix it)."""
    from simulator.routing.compare import compare
    from simulator.routing.report import table
    from simulator.routing.windows import windows
    from simulator.sessions import SessionModel

    if _variant_only(args, "routing"):
        return 0
    cfg, a = _config(args), _assumptions(args)
    tr = resolve(args.routing_trace)
    started = time.perf_counter()
    in_service = None
    if args.instances is None:
        in_service = simulate(cfg, tr, a).sampled("in_service", args.variant)
    sessions = SessionModel(mean_turns=args.mean_turns, think_seconds=args.think_seconds)
    out = output_dir(args, cfg.env, "")
    out.mkdir(parents=True, exist_ok=True)
    report = []
    for window in windows(
        tr,
        in_service,
        starts=tuple(args.window) if args.window else WINDOWS,
        minutes=args.minutes,
        warmup=args.warmup_minutes,
        instances=args.instances,
    ):
        c = compare(cfg, window, variant=args.variant, sessions=sessions, seed=args.seed)
        report.append(c.as_dict())
        print(table(c), end="\n\n")
    (out / "routing.json").write_text(json.dumps(report, indent=2, default=str))
    print(f"wrote routing.json to {out}/ in {time.perf_counter() - started:.1f} s")
    return 0


def cmd_gate(args: argparse.Namespace) -> int:
    from simulator.slo_gate import evaluate
    from simulator.user_figures import monthly_by_edge

    cfg, a = _config(args), _assumptions(args)
    if cfg.inference_components is not None:
        return _component_gate(args, cfg, a)
    started = time.perf_counter()
    report = evaluate(cfg, a)
    if report.monthly_usd:
        report.monthly_by_edge = monthly_by_edge(cfg, a, known={a.speed_edge: report.monthly_usd})
    print(report.render())
    print(f"({time.perf_counter() - started:.1f} s)")
    return _gate_written(
        args,
        cfg,
        {
            "passed": report.passed,
            "edge": report.edge,
            "held_slos": report.held_slos,
            "unreachable": report.unreachable,
            "scenarios": [
                {
                    "scenario": v.scenario,
                    "best_effort": v.best_effort,
                    "worst": v.worst,
                    "headroom_pct": v.headroom_pct,
                    "misses": [m.__dict__ for m in v.misses],
                }
                for v in report.verdicts
            ],
        },
        miss=f"fleet misses its SLOs (above); `make fleet ENV={cfg.env}` prints the cheapest "
        "fleet that holds them, or mark a scenario fleet.best_effort with a reason",
    )


def _gate_written(
    args: argparse.Namespace, cfg: DeploymentConfig, verdict: dict[str, Any], *, miss: str
) -> int:
    """The gate's ``verdict`` written to <out>/capacity-gate.json; exit 1 with ``miss`` (what
    missed and the fix) when it did not pass."""
    out = output_dir(args, cfg.env, "")
    out.mkdir(parents=True, exist_ok=True)
    (out / "capacity-gate.json").write_text(json.dumps(verdict, indent=2, default=str))
    if not verdict["passed"]:
        print(f"error: {cfg.env}'s {miss}", file=sys.stderr)
        return 1
    return 0


def _component_gate(args: argparse.Namespace, cfg: DeploymentConfig, a: Assumptions) -> int:
    """The gate for a config that ships the component shape (simulator/component_gate.py)."""
    from simulator.component_gate import evaluate_components

    report = evaluate_components(cfg, a)
    print(report.render())
    return _gate_written(
        args,
        cfg,
        {
            "shape": "inference_components",
            "passed": report.passed,
            "held_slos": report.held_slos,
            "scenarios": [
                {
                    "scenario": v.scenario,
                    "best_effort": v.best_effort,
                    "not_replayed": v.not_replayed,
                    "figures": v.figures,
                    "misses": [m.__dict__ for m in v.misses],
                }
                for v in report.verdicts
            ],
        },
        miss="component shape misses its SLOs (above): each miss names the field that held "
        "the copies; or mark a scenario fleet.best_effort with a reason",
    )


def cmd_fleet(args: argparse.Namespace) -> int:
    from simulator.fleet.report import (
        bound_cost_lines,
        config_change,
        months_by_edge,
        table,
        unreachable_advice,
    )
    from simulator.fleet.solver import candidates, solve

    cfg, a = _config(args), _assumptions(args)
    started = time.perf_counter()
    types = args.candidate or candidates(cfg)
    sols = solve(cfg, a, types)
    print(table(cfg, sols, months_by_edge(sols, a)))
    for line in unreachable_advice(cfg, sols):
        print(f"not held: {line}")
    best = next((s for s in sols if s.solved), None)
    out = output_dir(args, cfg.env, "")
    out.mkdir(parents=True, exist_ok=True)
    (out / "fleet.json").write_text(
        json.dumps(
            [
                {
                    "instance_type": s.instance_type,
                    "solved": s.solved,
                    "why_not": s.why_not,
                    "monthly_usd": round(s.monthly_usd),
                    "peak_instances": s.peak_instances,
                    "night_instances": s.night_instances,
                    "bounds": asdict(s.bounds) if s.bounds else None,
                    "policy_costs": s.policy_costs,
                    "start": s.start,
                    "rounds": s.rounds,
                    "seconds": round(s.seconds, 1),
                }
                for s in sols
            ],
            indent=2,
        )
    )
    if best is None:
        print("error: no candidate carries the scenarios within 100 instances", file=sys.stderr)
        return 1
    print()
    print(config_change(cfg, best))
    assert best.cfg is not None
    optimistic = best.optimistic.monthly_usd if best.optimistic is not None else None
    for line in _plan_figures(best.cfg, a, best.monthly_usd, optimistic):
        print(line)
    for line in bound_cost_lines(best.cfg, a, best.monthly_usd):
        print(f"  {line}")
    if not args.no_hit_rate_loop:
        print(_fleet_hit_rate(cfg, a, best))
    print(f"({len(types)} instance type(s) in {time.perf_counter() - started:.0f} s)")
    return 0


def _fleet_hit_rate(cfg: DeploymentConfig, a: Assumptions, best: object) -> str:
    """The hit rate iterated to its fixed point on the cheapest fleet: each rate re-solves that
    instance type under its chosen policy (simulator/hit_rate_loop.py)."""
    from simulator.fleet.solver import Solution, solve_policy
    from simulator.hit_rate_loop import fixed_point

    assert isinstance(best, Solution) and best.cfg is not None and best.policy is not None
    policy, itype, solved_at = best.policy, best.instance_type, a.hit_rate(cfg)

    def fleet_for(rate: float) -> DeploymentConfig:
        if abs(rate - solved_at) < 1e-9:
            assert best.cfg is not None
            return best.cfg
        s = solve_policy(cfg, itype, replace(a, prefix_cache_hit_rate=rate), policy)
        if s.cfg is None:
            raise ValueError(f"no {itype} fleet at a hit rate of {rate:.1%}: {s.why_not}")
        return s.cfg

    fp = fixed_point(cfg, a, fleet_for, start=solved_at)
    note = (
        ""
        if abs(fp.rate - solved_at) <= 0.01
        else f"; the fleet above was solved at {solved_at:.1%}: plan on {fp.rate:.1%} "
        "(sizing/prefix_hit_rate.py) and solve again"
    )
    return fp.line() + note


def cmd_hit_rate(args: argparse.Namespace) -> int:
    from simulator.hit_rate_loop import fixed_point

    cfg, a = _config(args), _assumptions(args)
    print(fixed_point(cfg, a).line())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    commands = (
        ("run", cmd_run),
        ("capacity", cmd_capacity),
        ("validate", cmd_validate),
        ("scenarios", cmd_scenarios),
        ("rollout", cmd_rollout),
        ("routing", cmd_routing),
        ("blast-radius", cmd_blast_radius),
        ("gate", cmd_gate),
        ("fleet", cmd_fleet),
        ("hit-rate", cmd_hit_rate),
        ("components", cmd_components),
    )
    for name, func in commands:
        p = sub.add_parser(name)
        p.set_defaults(func=func)
        p.add_argument("--env", default="prod", help="reads config/<env>.yaml [%(default)s]")
        p.add_argument("--config", help="a config file instead of config/<env>.yaml")
        _assumption_args(p)
        if name != "capacity":
            p.add_argument(
                "--out",
                help="output directory [sim-out/<env>; a comparison (--baseline): "
                "sim-out/compare/<label>-vs-<baseline>, so it never overwrites make simulate's]",
            )
            p.add_argument("--no-charts", action="store_true")
        if name == "run":
            p.add_argument(
                "--trace",
                action="append",
                help=f"built-in ({', '.join(BUILTIN)}) or a CSV file; repeatable",
            )
            p.add_argument("--baseline", help="a second config to compare against")
            p.add_argument("--label", help="name of the candidate in tables and charts")
        if name in ("components", "run"):
            p.add_argument(
                "--adapter-share",
                action="append",
                default=[],
                metavar="NAME=PERCENT",
                help="with inference_components: an adapter's share of the traffic in the "
                "adapter release's replay (repeatable; the rest split evenly)",
            )
        if name == "blast-radius":
            p.add_argument(
                "--adapter-share",
                action="append",
                default=[],
                metavar="NAME=PERCENT",
                help="an adapter's share of the traffic (repeatable; the rest split evenly; "
                "default: an even split, neither the config nor the traces carry one)",
            )
            p.add_argument(
                "--shadow-load",
                choices=SHADOW_LOADS,
                help="the shadow variant's fleet: tracking (the controller keeps it at the "
                "primary's load per instance, whole instances; the default), sized for its share "
                "at peak, or scaled on the primary's concurrency target "
                "(simulator/shadow_replay.py) [all three, a table each, tracking first]",
            )
        if name == "scenarios":
            p.add_argument("--scenario", action="append", help="one scenario (repeatable)")
        if name == "routing":
            _routing_args(p)
        if name == "fleet":
            p.add_argument(
                "--candidate",
                action="append",
                help="an instance type to solve for (repeatable) [fleet.candidates, else every "
                "catalog type that holds the model]",
            )
            p.add_argument(
                "--no-hit-rate-loop",
                action="store_true",
                help="skip iterating the prefix-cache hit rate to its fixed point on the "
                "cheapest fleet",
            )
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (ConfigError, TraceError, SimulationError, CapacityError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
