"""Context budgeting: long conversations keep their newest turns and the stable system prefix.

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
so the UTF-8 bytes of everything the template can render (role, content, name, tool calls, the
request's tool schemas) plus the template's per-message overhead bound the prompt's tokens.

Over the bound, the counting is done once and incrementally: each turn is tokenized at most once,
newest first, and only until the budget is spent (older turns are never tokenized), then the kept
conversation is rendered with the chat template (tools included) and counted exactly. A cut that
the exact count still finds too long drops one more turn, re-using the per-turn counts.
"""

from __future__ import annotations

import json
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


#: Message fields a chat template may render besides role and content (counted by the bound).
_RENDERED_FIELDS = ("name", "tool_calls", "tool_call_id", "reasoning_content")


def _utf8_len(text: str) -> int:
    # surrogatepass: a lone surrogate (valid JSON, invalid UTF-8) is counted, not an exception.
    return len(text.encode("utf-8", "surrogatepass"))


def _extra_len(message: Message) -> int:
    size = 0
    for key in _RENDERED_FIELDS:
        value = message.get(key)
        if value is not None:
            size += _utf8_len(value if isinstance(value, str) else json.dumps(value))
    return size


@dataclass(frozen=True)
class TokenCounter:
    """Counts tokens the way the engine will: ``render`` applies the chat template (with the
    request's tool schemas), ``encode_len`` tokenizes text. ``message_overhead`` and
    ``base_overhead`` bound the template's own tokens (measured once from the tokenizer, see
    :func:`counter_from_tokenizer`)."""

    render: Callable[[list[Message], Sequence[Any] | None], str]
    encode_len: Callable[[str], int]
    message_overhead: int
    base_overhead: int

    def count(self, messages: list[Message], tools: Sequence[Any] | None = None) -> int:
        return self.encode_len(self.render(messages, tools))

    def message_bound(self, message: Message) -> int:
        """Upper bound of one message's tokens: every byte it can render, plus overhead."""
        role = message.get("role")
        content = message.get("content")
        text = content if isinstance(content, str) else text_of(message)
        size = _utf8_len(text) + (_extra_len(message) if len(message) > 2 else 0)
        if isinstance(role, str):
            size += _utf8_len(role)
        return size + self.message_overhead

    def upper_bound(self, messages: Sequence[Message], tools: Sequence[Any] | None = None) -> int:
        size = sum(self.message_bound(m) for m in messages) + self.base_overhead
        return size + (_utf8_len(json.dumps(tools)) if tools else 0)

    def message_tokens(self, message: Message) -> int:
        """Exact tokens of one message's text plus the template's per-message overhead (role
        names and extra fields counted by their own tokens)."""
        role = message.get("role")
        text = text_of(message)
        extra = "".join(
            v if isinstance(v, str) else json.dumps(v)
            for k in _RENDERED_FIELDS
            if (v := message.get(k)) is not None
        )
        role_len = self.encode_len(role) if isinstance(role, str) and len(role) > 16 else 0
        return self.encode_len(text + extra) + role_len + self.message_overhead


def counter_from_tokenizer(tokenizer: Any) -> TokenCounter:
    """A :class:`TokenCounter` for a Hugging Face tokenizer with a chat template."""

    def render(messages: list[Message], tools: Sequence[Any] | None = None) -> str:
        flat = []
        for m in messages:
            item: dict[str, Any] = {"role": m.get("role", "user"), "content": text_of(m)}
            item.update({k: m[k] for k in _RENDERED_FIELDS if m.get(k) is not None})
            flat.append(item)
        text = tokenizer.apply_chat_template(
            flat, tools=list(tools) if tools else None, tokenize=False, add_generation_prompt=True
        )
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
    """The text of a message whose content is a string or a list of OpenAI content parts
    (non-text parts and non-string ``text`` values contribute nothing: the request checks
    refuse those before the budget runs)."""
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


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


def _render_count(
    counter: TokenCounter, messages: list[Message], tools: Sequence[Any] | None
) -> int:
    try:
        return counter.count(messages, tools)
    except Exception as exc:  # jinja errors of a template fed a malformed field
        raise BudgetError(f"the chat template cannot render this conversation: {exc}") from exc


def apply_budget(
    messages: list[Message],
    *,
    retrieval: Sequence[str] = (),
    max_tokens: int | None,
    config: BudgetConfig,
    counter: TokenCounter,
    tools: Sequence[Any] | None = None,
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
    bound = counter.upper_bound(candidate, tools)
    exact = False
    dropped = 0
    if bound > limit:
        exact = True
        dropped, candidate, bound = _fit(system, turns, current, tools, limit, counter, config)

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


def _fit(
    system: list[Message], turns: list[Message], current: Message, tools: Sequence[Any] | None,
    limit: int, counter: TokenCounter, config: BudgetConfig,
) -> tuple[int, list[Message], int]:  # fmt: skip
    """Drop the oldest turns until the rendered conversation fits ``limit``.

    Returns (turns dropped, messages, exact prompt tokens). Each turn is tokenized once, newest
    first, stopping as soon as the budget is spent; the chat template then renders only the kept
    conversation."""
    fixed = [*system, marker(len(turns)), current]
    spent = sum(counter.message_tokens(m) for m in fixed) + counter.base_overhead
    if tools:
        spent += counter.encode_len(json.dumps(tools))
    keep = 0
    for turn in reversed(turns):
        cost = counter.message_tokens(turn)
        if spent + cost > limit:
            break
        spent += cost
        keep += 1
    while True:
        dropped = len(turns) - keep
        # A conversation resumes on a user turn after the marker.
        while dropped < len(turns) and turns[dropped].get("role") == "assistant":
            dropped += 1
        if dropped:
            candidate = [*system, marker(dropped), *turns[dropped:], current]
        else:
            candidate = [*system, *turns, current]
        total = _render_count(counter, candidate, tools)
        if total <= limit:
            return dropped, candidate, total
        if dropped >= len(turns):
            raise BudgetError(
                f"the last message needs {total} tokens with the system prompt; the context "
                f"allows {limit} (VLLM_MAX_MODEL_LEN {config.max_model_len} minus the "
                f"generation reserve {config.reserve_tokens})"
            )
        keep = len(turns) - dropped - 1
