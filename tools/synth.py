"""`make synth ENV=...`: synthesize config/ENV.yaml into cdk.out/ENV, print and save the plan.

Fails (exit 1) on a config error, a capacity error, or any cdk-nag finding left unsuppressed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk

from simulator.slo_cost import bound_costs
from simulator.target_compare import targets_section
from simulator.user_figures import monthly_by_edge
from sizing.capacity import CapacityError
from sizing.deploy_options import DeployOptions
from sizing.plan import build_plan, render_plan
from sizing.serving_speed import PLANNING_EDGE
from stacks.app_builder import build_app, cdk_json_context
from tools import REPO_ROOT
from typed_config import ConfigError, DeploymentConfig


def add_release_args(parser: argparse.ArgumentParser) -> None:
    """``--image-tag`` and ``--artifact``: a release's inputs without editing the YAML."""
    parser.add_argument("--image-tag", default="",
                        help="TAG for every variant, or primary=TAG,canary=TAG")  # fmt: skip
    parser.add_argument("--artifact", default="", help="model.artifact: a version or its s3 URI")


def release_options(args: argparse.Namespace) -> DeployOptions:
    """The release inputs as DeployOptions (parsed like the CDK context ``make diff`` passes)."""
    given = {"image_tag": args.image_tag or None, "model_artifact": args.artifact or None}
    return DeployOptions.from_context(given.get)


def plan_text(
    env: str, out: Path, options: DeployOptions | None = None, config: Path | None = None
) -> str:
    """The plan as `make synth` prints it (tools/doc_blocks.py quotes it in the docs)."""
    cfg, assembly = assemble(env, out, options, config)
    plan = build_plan(cfg, {s.stack_name: s.template for s in assembly.stacks})
    add_monthly(cfg, plan)
    return render_plan(plan)


def add_monthly(cfg: DeploymentConfig, plan: dict[str, Any]) -> dict[str, Any]:
    """Put the plan's one monthly figure in its cost section: the normal day simulated with the
    fleet's scaling (the simulator's bill, as make simulate and make fleet quote it), beside the
    budget, at each edge of the speed model's error (simulator.user_figures.monthly_by_edge),
    with what each bound of the scaling target costs (simulator.slo_cost.bound_costs). Returns
    the targets section it came from (SageMaker beside Bedrock)."""
    targets = targets_section(cfg)
    month = targets["sagemaker_monthly"]
    plan["cost"]["monthly"] = month
    plan["cost"]["monthly_by_edge"] = monthly_by_edge(cfg, known={PLANNING_EDGE: month}).as_dict()
    plan["cost"]["bound_costs"] = bound_costs(cfg, month=month).as_dict()
    plan["cost"]["budget_usd_per_month"] = cfg.fleet.budget_usd_per_month
    return targets


def assemble(
    env: str, out: Path, options: DeployOptions | None = None, config: Path | None = None
) -> tuple[DeploymentConfig, cdk.cx_api.CloudAssembly]:
    """The config synth loads and the cloud assembly it writes into ``out``."""
    app = cdk.App(outdir=str(out), context={**cdk_json_context(REPO_ROOT), "env": env})
    cfg = build_app(app, repo_root=REPO_ROOT, env=env, options=options, config=config)
    return cfg, app.synth()


def synth(
    env: str, out: Path, options: DeployOptions | None = None, config: Path | None = None
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Synthesize; return templates by stack name and the cdk-nag/CDK error messages.
    ``options``: the release inputs given on the command line (IMAGE_TAG=, ARTIFACT=)."""
    cfg, assembly = assemble(env, out, options, config)
    templates = {s.stack_name: s.template for s in assembly.stacks}
    errors = [
        f"{s.stack_name}{m.id}: {m.entry.data}"
        for s in assembly.stacks
        for m in s.messages
        if m.level == cdk.cx_api.SynthesisMessageLevel.ERROR
    ]
    cdk_warnings = sum(
        m.level == cdk.cx_api.SynthesisMessageLevel.WARNING
        for s in assembly.stacks
        for m in s.messages
    )
    if cdk_warnings:
        # CDK's validation report (cdk.json: @aws-cdk/core:annotationsInValidationReport) has
        # printed them already; printing them again doubled every one
        print(
            f"{cdk_warnings} CDK construct warning(s) above, from CDK or cdk-nag (the product's "
            "own warnings are in the plan): their \"Acknowledge with 'Annotation::ID'\" is "
            "for code, Annotations.of(construct).acknowledge_warning(ID, reason), not config",
            file=sys.stderr,
        )
    plan = build_plan(cfg, templates)
    targets = add_monthly(cfg, plan)
    if cfg.bedrock.enabled:  # the second target's cost beside the fleet's (docs/bedrock.md)
        plan["targets"] = targets
    (out / "plan.json").write_text(json.dumps(plan, indent=2, default=str) + "\n")
    text = render_plan(plan)
    print(text)
    write_plan_markdown(out / "plan.md", env, text, options or DeployOptions())
    return templates, errors


def write_plan_markdown(path: Path, env: str, text: str, options: DeployOptions) -> None:
    """The plan as Markdown (``plan.md``): what a reviewer reads on a pull request. In GitHub
    Actions it is also appended to the job summary, the file ``$GITHUB_STEP_SUMMARY`` names
    (GitHub Actions, "Adding a job summary"), so the plan shows on the run's page."""
    inputs = options.as_context()
    given = (
        ", ".join(f"{k}={v}" for k, v in sorted(inputs.items())) or "none (config/" + env + ".yaml)"
    )
    body = (
        f"## Plan: {env}\n\nRelease inputs on the command line: {given}\n\n```text\n{text}\n```\n"
    )
    path.write_text(body)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with Path(summary).open("a") as fh:
            fh.write(body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--env", default="dev")
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="a config file instead of config/<env>.yaml (its env: must be --env)",
    )
    parser.add_argument("--out", type=Path, default=None)
    add_release_args(parser)
    args = parser.parse_args(argv)
    out = args.out or REPO_ROOT / "cdk.out" / args.env
    try:
        _, errors = synth(args.env, out, release_options(args), args.config)
    except (ConfigError, CapacityError) as err:
        print(f"synth failed: {err}", file=sys.stderr)
        return 1
    except RuntimeError as err:  # CDK policy validation (cdk-nag errors) fails the synth itself
        if "ValidationFailed" not in str(err):
            raise
        print(f"synth failed: cdk-nag findings without suppression:\n{err}", file=sys.stderr)
        return 1
    if errors:
        print(f"cdk-nag: {len(errors)} unsuppressed finding(s):", file=sys.stderr)
        for e in errors:
            print(f"  {e}", file=sys.stderr)
        return 1
    print(f"synthesized {args.env} into {out} (plan: {out / 'plan.json'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
