"""Context budgeting (seed 000 scenario 5, seed 003 user story 5).

A chat request is cut into: the leading system messages (the stable prefix, budget
BUDGET_SYSTEM_TOKENS), retrieved documents (body field ``retrieval``, budget
BUDGET_RETRIEVAL_TOKENS, lower-ranked documents dropped first), the conversation turns and a
generation reserve (BUDGET_GENERATION_RESERVE_TOKENS). Turns get whatever remains of
max_model_len; when they do not fit, the oldest go first and a marker says how many.

Order, for prefix caching: system prompt, then the turns in order (append-only across a
session), then the retrieved documents inside the last user message. Nothing that changes per
request sits before the system prompt, and retrieval (which changes every turn) comes last so the
history before it stays a cache hit. The truncation marker follows the system prompt.

Counting is exact (the chat template is rendered and tokenized) but skipped when a cheap upper
bound already fits: a byte-level BPE or SentencePiece token covers at least one byte of text,
so UTF-8 bytes plus the template's per-message overhead bound the prompt's tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]


class BudgetError(ValueError):
    """The request cannot fit even after trimming (a client error: answered 400)."""


@dataclass(frozen=True)
class BudgetConfig:
    max_model_len: int
    system_tokens: int
    retrieval_tokens: int
    reserve_tokens: int


@dataclass
class BudgetResult:
    messages: list[Message]
    max_tokens: int
    trimmed_turns: int = 0
    dropped_documents: int = 0
    prompt_tokens_bound: int = 0
    exact: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def trimmed(self) -> bool:
        return bool(self.trimmed_turns or self.dropped_documents)


@dataclass(frozen=True)
class TokenCounter:
    """Counts tokens the way the engine will: ``render`` applies the chat template,
    ``encode_len`` tokenizes text. ``message_overhead`` and ``base_overhead`` bound the template's
    own tokens (measured once from the tokenizer, see :func:`counter_from_tokenizer`)."""

    render: Callable[[list[Message]], str]
    encode_len: Callable[[str], int]
    message_overhead: int
    base_overhead: int

    def count(self, messages: list[Message]) -> int:
        return self.encode_len(self.render(messages))

    def upper_bound(self, messages: Sequence[Message]) -> int:
        size = sum(len(text_of(m).encode()) for m in messages)
        return size + self.base_overhead + self.message_overhead * len(messages)


def counter_from_tokenizer(tokenizer: Any) -> TokenCounter:
    """A :class:`TokenCounter` for a Hugging Face tokenizer with a chat template."""

    def render(messages: list[Message]) -> str:
        flat = [{"role": m.get("role", "user"), "content": text_of(m)} for m in messages]
        text = tokenizer.apply_chat_template(flat, tokenize=False, add_generation_prompt=True)
        return str(text)

    def encode_len(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    one = encode_len(render([{"role": "user", "content": ""}]))
    two = encode_len(
        render([{"role": "user", "content": ""}, {"role": "assistant", "content": ""}])
    )
    per_message = max(two - one, 0)
    # +2 per message: a SentencePiece dummy prefix or a role name longer than "assistant".
    return TokenCounter(render, encode_len, per_message + 2, max(one - per_message, 0) + 2)


def text_of(message: Message) -> str:
    """The text of a message whose content is a string or a list of OpenAI content parts."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def marker(count: int) -> Message:
    return {"role": "system", "content": f"[Earlier conversation truncated: {count} turns omitted]"}


def _with_retrieval(message: Message, documents: list[str]) -> Message:
    context = "\n\n".join(documents)
    content = message.get("content")
    if isinstance(content, list):
        return {
            **message,
            "content": [{"type": "text", "text": f"Context:\n{context}\n\n"}, *content],
        }
    return {**message, "content": f"Context:\n{context}\n\nQuestion: {text_of(message)}"}


def apply_budget(
    messages: list[Message],
    *,
    retrieval: Sequence[str] = (),
    max_tokens: int | None,
    config: BudgetConfig,
    counter: TokenCounter,
) -> BudgetResult:
    """Fit a chat request into max_model_len; see the module docstring for the policy."""
    if not messages:
        raise BudgetError("'messages' is empty")
    n_system = 0
    while n_system < len(messages) - 1 and messages[n_system].get("role") in {
        "system",
        "developer",
    }:
        n_system += 1
    system, turns, current = messages[:n_system], messages[n_system:-1], messages[-1]

    if system and counter.upper_bound(system) > config.system_tokens:
        system_len = counter.encode_len("".join(text_of(m) for m in system))
        if system_len > config.system_tokens:
            raise BudgetError(
                f"system prompt is {system_len} tokens; BUDGET_SYSTEM_TOKENS allows "
                f"{config.system_tokens}"
            )

    kept_docs: list[str] = []
    used = 0
    for doc in retrieval:
        size = counter.encode_len(doc)
        if used + size > config.retrieval_tokens:
            break
        kept_docs.append(doc)
        used += size
    dropped_docs = len(retrieval) - len(kept_docs)
    if kept_docs:
        current = _with_retrieval(current, kept_docs)

    limit = config.max_model_len - config.reserve_tokens
    candidate = [*system, *turns, current]
    bound = counter.upper_bound(candidate)
    exact = False
    dropped = 0
    if bound > limit:
        # Exact count, then drop the oldest turns until it fits (per-turn bounds make the first
        # cut in one step; the exact count confirms it).
        total = counter.count(candidate)
        exact = True
        while total > limit:
            if dropped >= len(turns):
                raise BudgetError(
                    f"the last message needs {total} tokens with the system prompt; the context "
                    f"allows {limit} (VLLM_MAX_MODEL_LEN {config.max_model_len} minus the "
                    f"generation reserve {config.reserve_tokens})"
                )
            excess = total - limit
            freed = 0
            while dropped < len(turns) and freed < excess:
                freed += counter.upper_bound([turns[dropped]])
                dropped += 1
            # A conversation resumes on a user turn after the marker.
            while dropped < len(turns) and turns[dropped].get("role") == "assistant":
                dropped += 1
            candidate = [*system, marker(dropped), *turns[dropped:], current]
            total = counter.count(candidate)
        bound = total

    room = config.max_model_len - bound
    capped = room if max_tokens is None else max(1, min(max_tokens, room))
    return BudgetResult(
        messages=candidate,
        max_tokens=capped,
        trimmed_turns=dropped,
        dropped_documents=dropped_docs,
        prompt_tokens_bound=bound,
        exact=exact,
    )
