"""The routing comparison (simulator/routing/compare.py, simulator/sessions.py): what each SageMaker
routing strategy does to vLLM's prefix cache on the same multi-turn sessions.

Each test replays a few minutes of constant traffic on a small fleet with one seed, so every
strategy sees the same sessions; assertions are on behaviour (hit rates, shares), never on time.
The fleet is prod's before issue 36 (sim_helpers.legacy_prod: ml.g5.xlarge, whose 73 sequences
a hot instance fills at these rates), not the solved ml.g6e.xlarge; the tables docs/simulator.md
quotes are shipped prod's (docs/generated/prod/routing.txt; tests/infra/
test_generated_figures.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sim_helpers import legacy_prod

from simulator.prefix_cache import PrefixCache
from simulator.routing.compare import prefill_cost, specs
from simulator.routing.fleet import Fleet, budget_of
from simulator.routing.strategies import RouterSpec, configured_routing
from simulator.routing.windows import Window
from simulator.sessions import Segment, Session, SessionModel, build_request, prefix_key
from sizing import speed_model
from sizing.fit_checks import load_config
from tests.fixtures import config_fixture

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cfg() -> Any:
    return legacy_prod()


@pytest.fixture(scope="module")
def prod() -> Any:
    return load_config(config_fixture("prod"), env="prod")


def window(rpm: float, instances: int, minutes: int = 3, warmup: int = 3) -> Window:
    return Window("test", warmup, minutes, warmup, instances, (rpm,) * (warmup + minutes))


def run(cfg: Any, spec: RouterSpec, w: Window, seed: int = 1) -> Any:
    return Fleet(cfg, "primary", spec, w.instances, SessionModel(), seed).run(w, 1.0, seed)


SESSION_FIRST = RouterSpec("PREFIX_AWARE", 1024, 1024, "session-first")
SYSTEM_ONLY = RouterSpec("PREFIX_AWARE", 1024, 1024, "system-first")


def test_a_prefix_that_names_the_conversation_beats_random_on_the_same_sessions(cfg) -> None:
    w = window(rpm=600, instances=4)
    rand = run(cfg, RouterSpec("RANDOM"), w)
    aware = run(cfg, SESSION_FIRST, w)
    # the same sessions (one seed); faster answers bring follow-ups into the window sooner, so
    # the cached fleet sees as many requests or more (at the gate's speed, ~10 % more here)
    assert rand.requests * 0.95 <= aware.requests <= rand.requests * 1.25
    assert aware.hit_rate > rand.hit_rate + 0.15
    assert aware.cached_tokens_mean > rand.cached_tokens_mean
    # fewer prefill tokens: a faster first token and more requests per instance
    assert max(aware.prefill_tps_per_instance) < min(rand.prefill_tps_per_instance)
    assert aware.ttft_p50_ms < rand.ttft_p50_ms


def test_a_prefix_of_only_the_system_prompt_sends_every_request_to_one_instance(cfg) -> None:
    # 1,024 bytes (AWS's minimum) end inside the ~1,670-byte system prompt: one hash for all
    w = window(rpm=120, instances=4)
    r = run(cfg, SYSTEM_ONLY, w)
    assert r.busiest_share == 1.0
    assert r.spilled_share == 0.0


def test_the_threshold_spills_the_hot_instance_and_bounds_its_share(cfg) -> None:
    w = window(rpm=600, instances=4)
    hot = run(cfg, SYSTEM_ONLY, w)
    spilling = run(cfg, replace(SYSTEM_ONLY, concurrency_threshold=8), w)
    assert spilling.spilled_share > 0.3
    assert spilling.busiest_share < hot.busiest_share
    assert spilling.busiest_share < 0.6
    # one hot instance queues (at 1,024 nothing spills); spilling serves the first token sooner
    assert spilling.ttft_p95_ms < hot.ttft_p95_ms


def test_same_seed_same_figures(cfg) -> None:
    w = window(rpm=300, instances=3, minutes=2, warmup=2)
    for spec in (RouterSpec("RANDOM"), RouterSpec("LEAST_OUTSTANDING_REQUESTS"), SESSION_FIRST):
        assert run(cfg, spec, w, seed=7).as_dict() == run(cfg, spec, w, seed=7).as_dict()
    assert (
        run(cfg, RouterSpec("RANDOM"), w, seed=7).as_dict()
        != run(cfg, RouterSpec("RANDOM"), w, seed=8).as_dict()
    )


def test_least_outstanding_balances_requests_better_than_random(cfg) -> None:
    w = window(rpm=900, instances=6)
    lor = run(cfg, RouterSpec("LEAST_OUTSTANDING_REQUESTS"), w)
    rand = run(cfg, RouterSpec("RANDOM"), w)
    assert lor.busiest_share <= rand.busiest_share
    assert max(lor.prefill_tps_per_instance) <= max(rand.prefill_tps_per_instance)


def test_body_key_order_decides_what_the_prefix_holds(cfg) -> None:
    budget, model = budget_of(cfg), SessionModel()
    a, b = (Session(i, 2, [20, 30], [300, 250], [180, 150]) for i in (1, 2))
    first = {
        layout: [prefix_key(build_request(s, budget, model, layout).body, 1024) for s in (a, b)]
        for layout in ("system-first", "session-first")
    }
    assert first["system-first"][0] == first["system-first"][1]  # everyone alike
    assert first["session-first"][0] != first["session-first"][1]  # one per conversation
    # a follow-up turn of one conversation keeps its session-first prefix ...
    a.turn = 1
    again = prefix_key(build_request(a, budget, model, "session-first").body, 1024)
    assert again == first["session-first"][0]
    # ... while a prefix long enough to reach this turn's fields changes every turn
    a.turn = 0
    t0 = prefix_key(build_request(a, budget, model, "system-first").body, 65536)
    a.turn = 1
    t1 = prefix_key(build_request(a, budget, model, "system-first").body, 65536)
    assert t0 != t1


def test_the_prompt_stays_within_the_context_budget_and_trimming_breaks_the_history() -> None:
    from simulator.sessions import Budget

    budget = Budget(400, 1400, 600, 4096)
    model = SessionModel()
    s = Session(0, 40, [40] * 40, [400] * 40, [270] * 40)
    trimmed_at = None
    for k in range(40):
        s.turn = k
        req = build_request(s, budget, model, "system-first")
        assert req.prompt_tokens <= budget.prompt_limit
        if req.trimmed_turns and trimmed_at is None:
            trimmed_at = k
            assert req.prompt[1].key[0] == "marker"  # the marker follows the system prompt
    assert trimmed_at is not None
    cache = PrefixCache(100_000, 16)
    s.turn = trimmed_at
    prev = build_request(s, budget, model, "system-first")
    cache.store(0, prev.prompt, Segment(("answer", 0, trimmed_at), 275, 0))
    s.turn = trimmed_at + 1
    nxt = build_request(s, budget, model, "system-first")
    # one more turn dropped: a different marker, so only the system prompt is a hit
    assert cache.match(0, nxt.prompt) == nxt.system_tokens // 16 * 16


def test_the_prefix_cache_matches_whole_blocks_and_evicts_the_least_recent() -> None:
    budget = budget_of(load_config(config_fixture("prod"), env="prod"))
    model = SessionModel()
    cache = PrefixCache(10_000, 16)
    sessions = [Session(i, 3, [20, 20, 20], [300, 300, 300], [180, 180, 180]) for i in range(3)]
    for s in sessions:
        # turn 1 served here; turn 0's question went out with its documents before it, so turn
        # 2 is the first whose history (turn 0, as sent in turn 1) can be a hit
        s.turn = 1
        req = build_request(s, budget, model, "system-first")
        cache.store(s.sid, req.prompt, Segment(("answer", s.sid, 1), 185, 0))
        s.turn = 2
    req = build_request(sessions[0], budget, model, "system-first")
    hit = cache.match(0, req.prompt)
    assert hit % 16 == 0 and hit >= req.system_tokens + 200
    cache.make_room(cache.held - 1)  # one token too many: the oldest entry loses its tail
    assert cache.match(0, req.prompt) <= hit
    cache.make_room(0)
    assert cache.match(0, req.prompt) == req.system_tokens // 16 * 16


def test_the_config_routing_is_a_row_and_no_section_means_random(cfg) -> None:
    mine = configured_routing(cfg, "primary")
    rows = specs(cfg, "primary")
    assert sum(r.configured for r in rows) == 1
    assert mine in rows
    bare = SimpleNamespace(variants={"primary": SimpleNamespace(routing=None)})
    assert configured_routing(bare, "primary") == RouterSpec("RANDOM", configured=True)  # type: ignore[arg-type]


def test_the_prefill_cost_is_the_speed_models_marginal_token(cfg) -> None:
    cost = speed_model.step_cost(cfg.architecture, cfg.model.quantization, "A10G")
    p = prefill_cost(cost)
    big = 4096
    step = cost.seconds(1, 0.0, big + 1, 0.0) - cost.seconds(1, 0.0, big, 0.0)
    assert p.seconds_per_token == pytest.approx(step, rel=1e-6)
    assert "sizing/speed_model.py" in p.describe()
