"""Prefix-aware routing (issue 21): the ``routing`` section of a variant, its rules (AWS's ranges,
the prefix fields with PREFIX_AWARE only, the prefix against the system prompt, the threshold
against what one instance runs), the template's RoutingConfig, the plan's line, and the key order
of the bodies the smoke gate and the bench send (docs/routing.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match

from container.serving import warmup
from lambdas.smoke_gate import checks
from sizing.capacity import estimate
from sizing.plan import build_plan, render_plan
from sizing.scaling_target import concurrency_target, least_spill_threshold
from stacks.constructs.endpoint import _routing
from typed_config import DeploymentConfig, RoutingConfig, prefix_floor_bytes

from .conftest import REPO_ROOT, assert_names_yaml_path, load_env, parse

PREFIX_AWARE = {
    "strategy": "PREFIX_AWARE",
    "prefix_length_bytes": 2048,
    # left out: derived from the scaling target (sizing.scaling_target.spill_threshold)
    "concurrency_threshold": None,
}
#: Keys a body may put before ``messages``: the same on every turn of one conversation.
CONVERSATION_KEYS = {"model", "user"}


def with_routing(raw: dict[str, Any], variant: str = "primary", **routing: Any) -> dict[str, Any]:
    """``raw`` with a fresh routing dict on ``variant`` (prod.yaml shares one through an anchor);
    a value of None deletes that key."""
    merged = {**PREFIX_AWARE, **routing}
    raw["variants"][variant]["routing"] = {k: v for k, v in merged.items() if v is not None}
    return raw


def instance_runs(env: str = "prod", cfg: DeploymentConfig | None = None) -> int:
    cfg = cfg or load_env(env)
    cap = estimate(cfg, cfg.variants.primary.instance_type)
    return min(cfg.engine.max_num_seqs, cap.concurrency_at_typical_length)


# -- the section's own rules: AWS's ranges and which fields go with which strategy ------------


@pytest.mark.parametrize(
    ("routing", "where", "why"),
    [
        ({"prefix_length_bytes": 1023}, "prefix_length_bytes", "greater than or equal to 1024"),
        ({"prefix_length_bytes": 65537}, "prefix_length_bytes", "less than or equal to 65536"),
        ({"concurrency_threshold": 0}, "concurrency_threshold", "greater than or equal to 1"),
        ({"concurrency_threshold": 1025}, "concurrency_threshold", "less than or equal to 1024"),
        ({"strategy": "ROUND_ROBIN"}, "strategy", "'RANDOM' or 'PREFIX_AWARE'"),
        ({"prefix_length_bytes": None}, "prefix_length_bytes", "required with strategy PREFIX"),
        ({"concurrency_threshold": 64}, "concurrency_threshold", "below the variant's scaling"),
        ({"strategy": "RANDOM"}, "prefix_length_bytes", "only with strategy PREFIX_AWARE"),
        (
            {"strategy": "RANDOM", "concurrency_threshold": 200},
            "concurrency_threshold",
            "only with strategy PREFIX_AWARE",
        ),
        (
            {
                "strategy": "LEAST_OUTSTANDING_REQUESTS",
                "prefix_length_bytes": None,
                "concurrency_threshold": 200,
            },
            "concurrency_threshold",
            "AWS refuses PrefixAwareRoutingConfig with LEAST_OUTSTANDING_REQUESTS",
        ),
        ({"prefix_len": 2048}, "prefix_len", "unknown key"),
    ],
    ids=lambda v: json.dumps(v) if isinstance(v, dict) else None,
)
def test_each_routing_field_out_of_aws_rules_is_a_config_error_naming_it(
    prod_raw, routing, where, why
) -> None:
    raw = with_routing(prod_raw, **routing)
    assert_names_yaml_path(raw, f"variants.primary.routing.{where}", why)


def test_strategies_without_prefix_fields_and_no_section_at_all_are_valid(prod_raw) -> None:
    for strategy in ("RANDOM", "LEAST_OUTSTANDING_REQUESTS"):
        raw = with_routing(
            prod_raw, strategy=strategy, prefix_length_bytes=None, concurrency_threshold=None
        )
        assert parse(raw).variants.primary.routing == RoutingConfig(strategy=strategy)
    del prod_raw["variants"]["primary"]["routing"]
    del prod_raw["variants"]["canary"]["routing"]
    cfg = parse(prod_raw)
    assert cfg.variants.primary.routing is None and cfg.variants.canary.routing is None


# -- the rules against the engine ------------------------------------------------------------


def test_prod_prefix_floor_is_the_system_prompt_plus_the_start_of_the_conversation() -> None:
    """The floor is measured on a real body: the first user turn's text starts at
    floor - FIRST_TURN_BYTES in a body shaped as docs/routing.md says, with the longest adapter
    and a 400-token (4 bytes/token) English system prompt."""
    cfg = load_env("prod")
    floor = prefix_floor_bytes(400, [a.name for a in cfg.adapters])
    assert floor == 1834
    body = {
        "model": "general_support",
        "messages": [
            {"role": "system", "content": "x" * 1600},
            {"role": "user", "content": "QUESTION"},
        ],
        "max_tokens": 180,
    }
    assert json.dumps(body).encode().index(b"QUESTION") + 128 == floor


def test_prefix_shorter_than_the_system_prompt_and_the_first_turn_is_an_error(prod_raw) -> None:
    assert_names_yaml_path(
        with_routing(prod_raw, prefix_length_bytes=1833),
        "variants.primary.routing.prefix_length_bytes",
        "1833 bytes end inside the system prompt or before the conversation: "
        "engine.context_budget.system_tokens 400 x 4 bytes/token",
    )
    assert parse(with_routing(prod_raw, prefix_length_bytes=1834)).variants.primary.routing


def test_prefix_floor_follows_the_engine_system_budget(prod_raw) -> None:
    """2,048 bytes hold prod's 400-token system prompt but not a 500-token one."""
    prod_raw["engine"]["context_budget"]["system_tokens"] = 500
    assert_names_yaml_path(
        with_routing(prod_raw, variant="canary"),
        "variants.canary.routing.prefix_length_bytes",
        "system_tokens 500 x 4 bytes/token, the body's JSON and 128 bytes of the first user "
        "turn need 2234",
    )


def test_threshold_above_what_one_instance_runs_is_an_error(prod_raw) -> None:
    # prod on ml.g5.xlarge, where the KV cache binds below max_num_seqs (prod's ml.g6e.xlarge
    # runs all 128: there max_num_seqs binds, test_threshold_is_held_to_max_num_seqs_...)
    for variant in ("primary", "canary"):
        prod_raw["variants"][variant]["instance_type"] = "ml.g5.xlarge"
    runs = instance_runs(cfg=parse(prod_raw))
    assert runs == 73  # the plan's "73 at typical" on an ml.g5.xlarge
    assert_names_yaml_path(
        with_routing(prod_raw, concurrency_threshold=runs + 1),
        "variants.primary.routing.concurrency_threshold",
        f"{runs + 1} exceeds what one ml.g5.xlarge runs at once ({runs}: engine.max_num_seqs 128, "
        f"KV cache at the typical request {runs})",
    )
    assert parse(with_routing(prod_raw, concurrency_threshold=runs)).variants.primary.routing


def test_threshold_is_held_to_max_num_seqs_when_that_binds(prod_raw) -> None:
    prod_raw["engine"]["max_num_seqs"] = 32
    assert_names_yaml_path(
        with_routing(prod_raw, variant="canary", concurrency_threshold=64),
        "variants.canary.routing.concurrency_threshold",
        "64 exceeds what one ml.g6e.xlarge runs at once (32: engine.max_num_seqs 32",
    )


def test_threshold_holds_on_every_instance_pool_of_the_variant(prod_raw) -> None:
    """The prefix may select an instance of any pool: a fallback pool that runs fewer
    sequences at once binds the threshold too."""
    prod_raw["variants"]["primary"]["instance_pools"] = [
        {"instance_type": "ml.g5.xlarge", "priority": 1},
        {"instance_type": "ml.g6.xlarge", "priority": 2, "engine": {"max_num_seqs": 32}},
    ]
    assert_names_yaml_path(
        with_routing(prod_raw, concurrency_threshold=64),
        "variants.primary.routing.concurrency_threshold",
        "64 exceeds what one ml.g6.xlarge runs at once (32: engine.max_num_seqs 32",
    )


def test_engine_rules_are_reported_with_the_other_rules_across_sections(prod_raw) -> None:
    above = instance_runs() + 1  # more than one of prod's instances runs at once
    raw = with_routing(prod_raw, prefix_length_bytes=1024, concurrency_threshold=above)
    raw["default_adapter"] = "nope"
    for where in ("prefix_length_bytes", "concurrency_threshold"):
        assert_names_yaml_path(raw, f"variants.primary.routing.{where}", "")
    assert_names_yaml_path(raw, "default_adapter", "is not one of the adapters")


# -- the template and the plan ---------------------------------------------------------------


def test_prod_template_carries_prefix_aware_routing_on_both_variants(prod_templates) -> None:
    # prod leaves the threshold out: the template carries the scaling target, rounded up
    threshold = least_spill_threshold(load_env("prod"), "primary")
    assert threshold >= concurrency_target(load_env("prod"), "primary")
    routing = {
        "RoutingStrategy": "PREFIX_AWARE",
        "PrefixAwareRoutingConfig": {"PrefixLength": 2048, "ConcurrencyThreshold": threshold},
    }
    prod_templates["endpoint"].has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {
            "ProductionVariants": [
                Match.object_like({"VariantName": "primary", "RoutingConfig": routing}),
                Match.object_like({"VariantName": "canary", "RoutingConfig": routing}),
            ]
        },
    )


def test_other_strategies_carry_no_prefix_config_and_no_section_no_routing_config() -> None:
    plain = _routing(RoutingConfig(strategy="LEAST_OUTSTANDING_REQUESTS"))
    assert plain is not None
    assert plain.routing_strategy == "LEAST_OUTSTANDING_REQUESTS"
    assert plain.prefix_aware_routing_config is None
    assert _routing(None) is None  # SageMaker's default (random)


def test_dev_keeps_sagemakers_default_routing() -> None:
    dev = load_env("dev")
    assert dev.variants.primary.routing is None and dev.variants.canary.routing is None


def test_plan_prints_each_variants_routing_with_the_figures_it_was_checked_against() -> None:
    cfg = load_env("prod")
    plan = build_plan(cfg, {})
    for v in plan["variants"]:
        assert v["routing"] == {
            "strategy": "PREFIX_AWARE",
            "prefix_length_bytes": 2048,
            "concurrency_threshold": least_spill_threshold(cfg, "primary"),
            "threshold_derived": True,
            "prefix_floor_bytes": 1834,
            "system_tokens": 400,
            "instance_runs": 128,  # ml.g6e.xlarge: max_num_seqs, below the KV cache's bound
        }
    line = (
        "routing: PREFIX_AWARE on the body's first 2,048 bytes (>= 1,834: a 400-token system "
        "prompt + the conversation's start); spills from "
        f"{least_spill_threshold(cfg, 'primary')} in flight (the scaling target, rounded up) "
        "(one instance runs 128)"
    )
    printed = [ln.strip() for ln in render_plan(plan).splitlines()]
    # the canary routes as the primary does: printed once, and the canary says so
    assert printed.count(line) == 1
    same = next(ln for ln in printed if ln.startswith("same as primary:"))
    assert "routing" in same.split(": ", 1)[1].split(", ")
    # docs/routing.md quotes the shipped prod's line through a generated block (make figures;
    # tests/infra/test_generated_figures.py holds it to the plan), not this fixture's
    assert "routing: PREFIX_AWARE" in (REPO_ROOT / "docs" / "routing.md").read_text()
    dev_plan = render_plan(build_plan(load_env("dev"), {}))
    assert dev_plan.count("routing: SageMaker's default (random; no RoutingConfig)") == 1


# -- the bodies clients send -------------------------------------------------------------------


def assert_conversation_first(raw: bytes) -> None:
    """Only per-conversation keys before ``messages``; the system prompt, when sent, first in it
    (docs/routing.md: the first PrefixLength bytes must hold the conversation)."""
    body = json.loads(raw)
    keys = list(body)
    assert "messages" in keys, keys
    before = keys[: keys.index("messages")]
    assert set(before) <= CONVERSATION_KEYS, f"{before} precede messages: {keys}"
    roles = [m["role"] for m in body["messages"]]
    assert "system" not in roles[1:], roles
    assert re.match(rb'^\{("model": "[^"]*", )?"messages": \[', raw), raw[:60]


class _Runtime:
    """Records the Body of each InvokeEndpoint(-WithResponseStream) call the gate makes."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def invoke_endpoint(self, **kw: Any) -> dict[str, Any]:
        self.bodies.append(kw["Body"])
        raise checks.BotoCoreError()

    invoke_endpoint_with_response_stream = invoke_endpoint


@pytest.mark.parametrize("adapter", ["manga_domain", None])
@pytest.mark.parametrize("stream", [False, True])
def test_smoke_gate_sends_the_conversation_before_per_request_fields(adapter, stream) -> None:
    runtime = _Runtime()
    props = {"endpoint": "e", "prompt": "Recommend a manga like Frieren.", "max_tokens": 16}
    checks.call_once(runtime, props, "primary", adapter, stream=stream)
    (raw,) = runtime.bodies
    assert_conversation_first(raw)
    body = json.loads(raw)
    assert next(iter(body)) == ("model" if adapter else "messages")
    assert body.get("model") == adapter and bool(body.get("stream")) == stream


def test_bench_and_warmup_bodies_put_the_adapter_then_the_conversation_first() -> None:
    """container/bench.py builds its bodies with warmup.chat (tests/container/test_bench_body.py
    checks the bench module itself, in the serving venv)."""
    named = json.dumps(warmup.chat("Recommend a manga.", 16, model="jp_style")).encode()
    assert_conversation_first(named)
    assert list(json.loads(named))[:2] == ["model", "messages"]
    assert json.loads(named)["messages"][0] == {"role": "system", "content": warmup.SYSTEM}
    assert_conversation_first(json.dumps(warmup.chat("Recommend a manga.")).encode())


def test_a_body_with_per_request_fields_first_is_refused_by_the_check() -> None:
    """The check itself catches the shapes docs/routing.md forbids."""
    for bad in (
        {"max_tokens": 8, "messages": [{"role": "user", "content": "x"}]},
        {"retrieval": ["doc"], "model": "a", "messages": [{"role": "user", "content": "x"}]},
    ):
        with pytest.raises(AssertionError):
            assert_conversation_first(json.dumps(bad).encode())


def test_routing_doc_is_linked_from_the_readme() -> None:
    assert "(docs/routing.md)" in (REPO_ROOT / "README.md").read_text()
    assert Path(REPO_ROOT / "docs" / "routing.md").is_file()
