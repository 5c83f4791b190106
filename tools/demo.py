"""`make demo`: the product on this machine as a story that fits a screen or two.

What it builds (the prod config synthesized and checked), what the plan says, a tiny model
prepared as the preparation job prepares a real one and served through the real entrypoint
(every adapter answering), and what to try next. The tools' own output (the CDK's, checkov's,
llmcompressor's progress bars, vLLM's log) goes to files under ``build/logs/``, each named on the
line that ends its step; the screen gets the lines that say what happened.

The story's length is bounded by construction: each step shows at most ``show_max`` of its
lines (tools/progress.py counts the rest), the plan is printed once with its alarms as counts,
and the serving step prints at most ``container.demo_lines.MAX_LINES``.
tests/infra/test_demo_story.py adds those up against :data:`LINE_BUDGET`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from container.demo_lines import MAX_LINES as SERVE_MAX_LINES
from sizing.plan import render_plan
from tools import REPO_ROOT, progress

#: The most lines `make demo` prints once the venvs exist (a first run adds the venv installs'
#: progress lines before the story: about five per venv).
LINE_BUDGET = 150
ENV = "prod"
OUT = Path("cdk.out") / ENV
LOGS = Path("build") / "logs"


@dataclass(frozen=True)
class Step:
    """One step of the story: a make target run through tools/progress.py."""

    title: str
    target: str
    #: Its output goes to this file (None: it prints its own concise lines, container/demo.py).
    log: Path | None
    #: The lines of its output shown on the screen (the rest stay in the log).
    show: str = ""
    show_max: int = 0

    def command(self, make: str) -> list[str]:
        return [make, "-s", "--no-print-directory", self.target, f"ENV={ENV}"]

    def max_lines(self) -> int:
        """Its start and end lines, the shown lines and the "N more" line; a step without a
        log prints its own output (the serving step: container/demo_lines.py)."""
        if self.log is None:
            return 2 + SERVE_MAX_LINES
        return 2 + self.show_max + 1


BUILD = Step(
    "1/3 synthesize config/prod.yaml into CloudFormation, check it with cfn-lint and checkov",
    "validate",
    LOGS / "demo-synth-validate.log",
    show=r"^(cfn-lint|checkov): ",
    show_max=2,
)
PREPARE = Step(
    "2/3 a tiny random Llama with 3 LoRA adapters, prepared as the preparation job prepares a "
    "real model",
    "tiny-model",
    LOGS / "demo-model-prep.log",
    show=r"^(model-prep: [a-z-]+ [0-9.]+s |note: )",
    show_max=7,
)
SERVE = Step(
    "3/3 serve it through the product's entrypoint on vLLM (CPU), SageMaker's contract",
    "demo-serve",
    None,
)
STEPS = (BUILD, PREPARE, SERVE)

HEADER = [
    "make demo: the product on this machine, no AWS account and no GPU, in three steps.",
    "The tools' own output goes to build/logs/ (each step names its file).",
]
NEXT = [
    "What next:",
    "  make synth ENV=dev       dev's plan (config/dev.yaml); CONFIG=path for a file of yours",
    "  make simulate ENV=prod   a day of traffic, a deploy at peak, a canary rollout and routing,",
    "                           replayed against prod's scaling policy (a few minutes)",
    "  make fleet ENV=prod      the cheapest fleet that holds prod's SLOs, and the config change",
    "  make serve-local         the tiny model on :8080 (SERVE_PORT=) for your own requests",
    "  make test                every suite: ~30 min on 2 cores, ~20 GiB of disk, root for podman",
    "  docs/deploy.md           to a real account: deploy-model-release, prepare-model, deploy",
]


def built_lines(out: Path) -> list[str]:
    """What synth wrote: each stack with its resource count, and where the whole plan is."""
    lines = ["Built:"]
    for template in sorted(out.glob("*.template.json")):
        resources = json.loads(template.read_text()).get("Resources", {})
        lines.append(f"  {template.name.removesuffix('.template.json'):<36} "
                     f"{len(resources):>3} resources")  # fmt: skip
    return lines


def plan_lines(plan: dict[str, Any], out: Path) -> list[str]:
    """The plan as `make synth` prints it, its alarms as counts (the whole list is in
    ``out/plan.md``)."""
    return [
        f"The plan (all of it, every alarm with what to do: {out / 'plan.md'}):",
        *render_plan(plan, alarm_list=False).splitlines(),
    ]


def story_middle(out: Path) -> list[str]:
    """What the story prints between the build step and the tiny model: what synth wrote into
    ``out`` and the plan it saved there (plan.json)."""
    plan = json.loads((out / "plan.json").read_text())
    return built_lines(out) + plan_lines(plan, out)


def run_step(step: Step, make: str) -> int:
    show = re.compile(step.show) if step.show else None
    return progress.run(
        step.title, step.command(make), pip=False, every=10, out=sys.stdout,
        log=step.log, show=show,
        show_max=step.show_max,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--make", default="make", help="the make to run the steps with")
    args = parser.parse_args(argv)
    os.chdir(REPO_ROOT)  # the steps' logs and make's targets are relative to the repository
    print("\n".join(HEADER), flush=True)
    if run_step(BUILD, args.make):
        return 1
    print("\n".join(story_middle(OUT)), flush=True)
    for step in (PREPARE, SERVE):
        if run_step(step, args.make):
            return 1
    print("\n".join(NEXT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
