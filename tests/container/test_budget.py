"""Context budget logic with the tiny model's real tokenizer and chat template."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from container.serving.budget import BudgetConfig, BudgetError, apply_budget, counter_from_tokenizer

CFG = BudgetConfig(max_model_len=512, system_tokens=64, retrieval_tokens=96, reserve_tokens=64)
SYSTEM = {"role": "system", "content": "You are a manga shopping assistant."}


@pytest.fixture(scope="module")
def counter(tiny_src: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    return counter_from_tokenizer(AutoTokenizer.from_pretrained(tiny_src / "base"))


def conversation(turns: int) -> list[dict[str, str]]:
    out = [SYSTEM]
    for i in range(turns):
        out.append({"role": "user", "content": f"Turn {i}: is Berserk volume {i} in stock?"})
        out.append({"role": "assistant", "content": f"Yes, volume {i} ships tomorrow."})
    return [*out, {"role": "user", "content": "And box sets?"}]


def test_upper_bound_never_undercounts(counter) -> None:  # type: ignore[no-untyped-def]
    for turns in (0, 1, 5, 30):
        msgs = conversation(turns)
        assert counter.upper_bound(msgs) >= counter.count(msgs)


def test_short_conversation_untouched(counter) -> None:  # type: ignore[no-untyped-def]
    msgs = conversation(2)
    result = apply_budget(msgs, max_tokens=32, config=CFG, counter=counter)
    assert result.messages == msgs and not result.trimmed and result.max_tokens == 32


def test_long_conversation_loses_oldest_turns_with_a_marker(counter) -> None:  # type: ignore[no-untyped-def]
    msgs = conversation(40)
    assert counter.count(msgs) > CFG.max_model_len
    result = apply_budget(msgs, max_tokens=1000, config=CFG, counter=counter)
    out = result.messages
    assert out[0] == SYSTEM  # the stable prefix stays first
    assert out[1]["content"].startswith("[Earlier conversation truncated:")
    assert out[2]["role"] == "user"  # resumes on a user turn
    assert out[-1] == msgs[-1] and out[-2] == msgs[-2]  # the most recent turns survive
    assert result.trimmed_turns > 0
    tokens = counter.count(out)
    assert tokens <= CFG.max_model_len - CFG.reserve_tokens
    assert tokens + result.max_tokens <= CFG.max_model_len


def test_retrieval_goes_last_and_lower_ranked_documents_drop_first(counter) -> None:  # type: ignore[no-untyped-def]
    docs = ["Frieren volume 12 is in stock.", "Berserk deluxe edition ships in May. " * 20]
    result = apply_budget(
        conversation(1), retrieval=docs, max_tokens=None, config=CFG, counter=counter
    )
    assert result.dropped_documents == 1
    assert result.messages[0] == SYSTEM
    assert result.messages[-1]["content"].startswith("Context:\nFrieren volume 12")
    assert result.messages[-1]["content"].endswith("Question: And box sets?")


def test_system_prompt_over_budget_is_a_client_error(counter) -> None:  # type: ignore[no-untyped-def]
    msgs = [{"role": "system", "content": "rule " * 200}, {"role": "user", "content": "hi"}]
    with pytest.raises(BudgetError, match="BUDGET_SYSTEM_TOKENS"):
        apply_budget(msgs, max_tokens=None, config=CFG, counter=counter)


def test_single_message_longer_than_the_context_is_a_client_error(counter) -> None:  # type: ignore[no-untyped-def]
    msgs = [SYSTEM, {"role": "user", "content": "manga " * 600}]
    with pytest.raises(BudgetError, match="the context allows"):
        apply_budget(msgs, max_tokens=None, config=CFG, counter=counter)


def test_upper_bound_counts_long_roles_and_tool_schemas(counter) -> None:  # type: ignore[no-untyped-def]
    long_role = [SYSTEM, {"role": "x" * 3000, "content": "hi"}]
    assert counter.upper_bound(long_role) >= counter.count(long_role)
    tools = [{"type": "function", "function": {"name": "stock", "description": "d " * 400,
                                               "parameters": {"type": "object"}}}]  # fmt: skip
    msgs = conversation(2)
    assert counter.count(msgs, tools) > counter.count(msgs)  # the template renders the tools
    assert counter.upper_bound(msgs, tools) >= counter.count(msgs, tools)


def test_a_long_role_near_the_limit_is_trimmed_to_fit_exactly(counter) -> None:  # type: ignore[no-untyped-def]
    msgs = [*conversation(6)[:-1], {"role": "x" * 300, "content": "hi"}, conversation(0)[-1]]
    result = apply_budget(msgs, max_tokens=None, config=CFG, counter=counter)
    assert counter.count(result.messages) <= CFG.max_model_len - CFG.reserve_tokens
    assert counter.count(result.messages) + result.max_tokens <= CFG.max_model_len


def test_tool_schemas_count_against_the_context(counter) -> None:  # type: ignore[no-untyped-def]
    tools = [{"type": "function", "function": {"name": "stock", "description": "volume " * 60}}]
    msgs = conversation(12)
    result = apply_budget(msgs, max_tokens=None, config=CFG, counter=counter, tools=tools)
    assert result.trimmed_turns > 0
    assert counter.count(result.messages, tools) <= CFG.max_model_len - CFG.reserve_tokens


def test_long_conversation_is_counted_once_newest_first(counter) -> None:  # type: ignore[no-untyped-def]
    calls = {"render": 0, "encoded_chars": 0}

    def render(messages, tools=None):  # type: ignore[no-untyped-def]
        calls["render"] += 1
        return counter.render(messages, tools)

    def encode_len(text: str) -> int:
        calls["encoded_chars"] += len(text)
        return counter.encode_len(text)

    spy = replace(counter, render=render, encode_len=encode_len)
    msgs = conversation(2000)
    size = sum(len(m["content"]) for m in msgs)
    result = apply_budget(msgs, max_tokens=None, config=CFG, counter=spy)
    assert result.trimmed_turns > 3900
    assert calls["render"] <= 2  # the kept conversation, plus at most one correction
    assert calls["encoded_chars"] < size / 20  # old turns are never tokenized
