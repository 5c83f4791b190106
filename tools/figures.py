"""`make figures`: every figure the docs quote about a shipped environment, generated from
``config/<env>.yaml`` into ``docs/generated/<env>/`` (issue 43: figures are outputs).

A change to the fleet is then one edit to ``config/<env>.yaml``, ``make -o .venv/.stamp figures``
and one reviewed diff (prod.yaml and ``docs/generated/``, plus the doc blocks that quote them):
no test pins a shipped figure (tests run on tests/fixtures/configs) and no page copies one by
hand (a page quotes a generated file through a ``figures ENV FILE`` block: tools/doc_blocks.py).

The files, per environment (:data:`FIGURES`):

- ``plan.txt``: what ``make synth ENV=<env>`` prints (a real synth into a temporary directory):
  the fleet, the binding bound and scaling target, the SLO reach, the cost, the deploy's peak,
  the shadow stage, the alarms.
- ``alarms.json``: every CloudWatch alarm of the synthesized stacks with its threshold,
  statistic and periods (from the same synth).
- ``quotas.txt``: what ``make quotas ENV=<env>`` prints.
- ``capacity.txt``: what ``python -m simulator capacity --env <env>`` prints.
- ``simulate.md``: ``make simulate``'s summary over the built-in traces (a Markdown table).
- ``blast-radius.txt``: ``python -m simulator blast-radius --env <env>``'s tables (the bad builds
  through the canary steps, with and without the shadow stage).
- ``rollout.txt``: ``python -m simulator rollout --env <env>``'s table (the canary rollout on a
  normal day, capacity first against weights only).
- ``routing.txt``: ``python -m simulator routing --env <env>``'s tables (the routing strategies
  on the fleet in service at each window).
- ``inputs.json``: the SHA-256 of what the figures were generated from: the config and the
  source packages that compute them. The two simulator replays take minutes, so the golden test
  (tests/infra/test_generated_figures.py) regenerates the fast files and compares these digests
  for the rest: any edit to the config or to the code that computes a figure fails it with the
  command that regenerates them.

``python -m tools.figures`` writes them (``--env`` to limit, ``--check`` to change nothing and
exit 1 naming each file that differs).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sizing.fit_checks import load_config
from tools import REPO_ROOT
from typed_config import DeploymentConfig, config_path

#: The shipped environments whose figures are generated.
ENVS = ("dev", "prod")
#: Where the generated files live: one folder per environment.
GENERATED = REPO_ROOT / "docs" / "generated"
#: The command that regenerates them (the golden test prints it).
COMMAND = "make -o .venv/.stamp figures"
#: The source packages whose code computes a figure: a change in any of them may move one.
SOURCES = ("sizing", "simulator", "stacks", "typed_config", "lambdas/canary_controller")
INPUTS = "inputs.json"


@dataclass
class Context:
    """One environment's inputs, with the synth shared by the plan and the alarms."""

    env: str
    config: Path
    work: Path
    _synth: tuple[str, dict[str, Any]] | None = None

    @property
    def cfg(self) -> DeploymentConfig:
        return load_config(self.config, env=self.env)

    def synth(self) -> tuple[str, dict[str, Any]]:
        """(the plan's text, every stack's template) from one synth."""
        if self._synth is None:
            from sizing.plan import build_plan, render_plan
            from tools.synth import add_monthly, assemble

            cfg, assembly = assemble(self.env, self.work / "cdk.out", config=self.config)
            templates = {s.stack_name: s.template for s in assembly.stacks}
            plan = build_plan(cfg, templates)
            add_monthly(cfg, plan)
            self._synth = (render_plan(plan), templates)
        return self._synth


def plan_figure(ctx: Context) -> str:
    return ctx.synth()[0]


#: The alarm properties that are figures (a threshold, its statistic and its window).
ALARM_FIELDS = ("AlarmDescription", "Namespace", "MetricName", "Statistic", "ExtendedStatistic",
                "ComparisonOperator", "Threshold", "Period", "EvaluationPeriods",
                "DatapointsToAlarm", "TreatMissingData")  # fmt: skip


def alarms_figure(ctx: Context) -> str:
    """Every CloudWatch alarm of the synthesized stacks: its figures, by stack and logical id;
    a metric-math alarm lists its expressions and metrics."""
    alarms: dict[str, dict[str, Any]] = {}
    for stack, template in sorted(ctx.synth()[1].items()):
        for logical, res in sorted(template.get("Resources", {}).items()):
            if res.get("Type") != "AWS::CloudWatch::Alarm":
                continue
            props = res.get("Properties", {})
            entry = {k: props[k] for k in ALARM_FIELDS if k in props}
            if "Metrics" in props:
                entry["Metrics"] = [_metric_figures(m) for m in props["Metrics"]]
            alarms.setdefault(stack, {})[logical] = entry
    return json.dumps(alarms, indent=2, sort_keys=True) + "\n"


def _metric_figures(query: dict[str, Any]) -> dict[str, Any]:
    if "Expression" in query:
        return {"Id": query["Id"], "Expression": query["Expression"]}
    stat = query.get("MetricStat", {})
    metric = stat.get("Metric", {})
    return {"Id": query["Id"], "MetricName": metric.get("MetricName"),
            "Period": stat.get("Period"), "Stat": stat.get("Stat")}  # fmt: skip


def quotas_figure(ctx: Context) -> str:
    from tools.preflight import quota_report

    return quota_report(ctx.cfg)


def _simulator(ctx: Context, *args: str) -> str:
    run = [sys.executable, "-m", "simulator", *args, "--env", ctx.env, "--config", str(ctx.config)]
    if args[0] != "capacity":
        run += ["--out", str(ctx.work / "sim-out")]
    done = subprocess.run(run, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(run)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def capacity_figure(ctx: Context) -> str:
    return _simulator(ctx, "capacity")


def blast_radius_figure(ctx: Context) -> str:
    """The tables alone: the last line names the output folder and the wall time."""
    lines = _simulator(ctx, "blast-radius").splitlines()
    kept = [ln for ln in lines if not ln.startswith("wrote blast-radius.json")]
    return "\n".join(kept).rstrip() + "\n"


def routing_figure(ctx: Context) -> str:
    """The routing comparison's tables (its last line names the folder and the wall time)."""
    lines = _simulator(ctx, "routing", "--no-charts").splitlines()
    kept = [ln for ln in lines if not ln.startswith("wrote ")]
    return "\n".join(kept).rstrip() + "\n"


def rollout_figure(ctx: Context) -> str:
    """The canary rollout replay's table (capacity first, and weights only before it)."""
    return _simulator(ctx, "rollout", "--no-charts")


def simulate_figure(ctx: Context) -> str:
    """``make simulate``'s summary per built-in trace (default assumptions), as a table."""
    from simulator.assumptions import Assumptions
    from simulator.run import simulate
    from simulator.traces import BUILTIN, resolve

    cfg = ctx.cfg
    rows = [
        "| trace | requests | rejected (429) | minutes over SLO | instance-hours | cost |",
        "|---|---|---|---|---|---|",
    ]
    for trace in BUILTIN:
        s = simulate(cfg, resolve(trace), Assumptions()).summary
        rejected = f"{s['rejected_429']:,}"
        if s["rejected_429"]:
            rejected += f" ({s['rejected_pct']:.3f}%)"
        rows.append(f"| {trace} | {s['requests']:,} | {rejected} | {s['minutes_over_slo']} | "
                    f"{s['instance_hours']:.2f} | ${s['cost_usd']:,.2f} |")  # fmt: skip
    return "\n".join(rows) + "\n"


@dataclass(frozen=True)
class Figure:
    name: str
    make: Callable[[Context], str]
    slow: bool  # minutes: the golden test checks its inputs' digest instead of regenerating it
    shows: str = ""  # the command whose output it is ({env}): a doc block's "$ ..." line


SIM = ".venv/bin/python -m simulator"
FIGURES = (
    Figure("plan.txt", plan_figure, slow=False, shows="make synth ENV={env}"),
    Figure("alarms.json", alarms_figure, slow=False),
    Figure("quotas.txt", quotas_figure, slow=False, shows="make quotas ENV={env}"),
    Figure("capacity.txt", capacity_figure, slow=False, shows=SIM + " capacity --env {env}"),
    Figure("simulate.md", simulate_figure, slow=True),
    Figure(
        "blast-radius.txt", blast_radius_figure, slow=True, shows=SIM + " blast-radius --env {env}"
    ),
    Figure("rollout.txt", rollout_figure, slow=True, shows=SIM + " rollout --env {env}"),
    Figure("routing.txt", routing_figure, slow=True, shows=SIM + " routing --env {env}"),
)


def shown_command(env: str, name: str) -> str:
    """The command a generated file's content is the output of (for a doc block's first line)."""
    shows = next((f.shows for f in FIGURES if f.name == name), "")
    return shows.format(env=env) if shows else f"{COMMAND} (docs/generated/{env}/{name})"


def _digest(paths: Iterable[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def inputs(env: str, config: Path | None = None) -> dict[str, str]:
    """The digests the figures of ``env`` were generated from (``inputs.json``)."""
    config = config or config_path(REPO_ROOT, env)
    out = {"config": hashlib.sha256(config.read_bytes()).hexdigest()}
    for package in SOURCES:
        out[package] = _digest((REPO_ROOT / package).rglob("*.py"))
    return out


def inputs_text(env: str, config: Path | None = None) -> str:
    return (
        json.dumps({"generated_by": COMMAND, "env": env, "sha256": inputs(env, config)}, indent=2)
        + "\n"
    )


def generate(env: str, work: Path, names: Iterable[str] | None = None,
             config: Path | None = None) -> dict[str, str]:  # fmt: skip
    """The figures of ``env`` by file name (all of them, or ``names``)."""
    ctx = Context(env, config or config_path(REPO_ROOT, env), work)
    wanted = set(names) if names is not None else {f.name for f in FIGURES}
    out = {f.name: f.make(ctx) for f in FIGURES if f.name in wanted}
    if names is None or INPUTS in wanted:
        out[INPUTS] = inputs_text(env, ctx.config)
    return out


def differences(env: str, fresh: dict[str, str], root: Path = GENERATED) -> list[str]:
    """A diff per generated file of ``env`` that is not what ``fresh`` holds."""
    problems = []
    for name, text in sorted(fresh.items()):
        path = root / env / name
        old = path.read_text() if path.is_file() else ""
        if old != text:
            where = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
            diff = difflib.unified_diff(old.splitlines(), text.splitlines(), f"{where} (committed)",
                                        f"{where} (generated now)", lineterm="", n=1)  # fmt: skip
            problems.append("\n".join(list(diff)[:60]))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", action="append", choices=ENVS, help="default: every one")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on a diff")
    args = parser.parse_args(argv)
    problems: list[str] = []
    for env in args.env or ENVS:
        with tempfile.TemporaryDirectory() as work:
            fresh = generate(env, Path(work))
        problems += differences(env, fresh)
        if not args.check:
            (GENERATED / env).mkdir(parents=True, exist_ok=True)
            for name, text in fresh.items():
                (GENERATED / env / name).write_text(text)
            print(f"docs/generated/{env}/: {', '.join(sorted(fresh))}")
    if args.check and problems:
        print(f"generated figures that differ from what the configs give now ({COMMAND}):")
        print("\n\n".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
