"""Multi-turn MangaAssist sessions, as tokens (what vLLM's prefix cache sees) and as the bytes of
the InvokeEndpoint body (what SageMaker's prefix-aware router hashes): input of
:mod:`simulator.routing.compare`.

A session is a geometric number of turns with mean :attr:`SessionModel.mean_turns` (4.2, the
brief's "average MangaAssist session: 4.2 turns"; the geometric then puts 11.3 % of sessions
past 8 turns, the brief's "conversations exceeding 8 turns (top 12% of sessions)"). Between turns
the user reads the streamed answer and types: an exponential think time (an assumption; the brief
gives none). Each turn adds a user message, the retrieved catalog context of that turn (the
brief: "each turn adds 200-400 tokens of catalog context") and the answer.

The prompt is laid out as the serving container's context budget lays it out
(container/serving/budget.py): the system prompt, then the earlier turns in order (append-only),
then the current user message with this turn's retrieved documents inside it. When system +
turns + current exceed ``max_model_len - generation_reserve_tokens`` the oldest turns go and a
marker follows the system prompt, as the budget does; the marker (and every turn after it)
differs from the previous request's, so a trimmed session's history stops being a cache hit.

The body is JSON in the key order of a :data:`LAYOUTS` entry. ``system-first`` is the order
docs/routing.md gives clients (``{"model": <adapter>, "messages": [system, ...], "retrieval":
[...], "max_tokens": ...}``; container/bench.py and lambdas/smoke_gate send ``messages`` first
too): its first bytes are the system prompt, the same for every request of an adapter (every
session is taken to use the default adapter). ``session-first`` puts OpenAI's ``user`` field
(a stable per-conversation id;
vLLM's ChatCompletionRequest accepts it and the chat template does not render it, so vLLM's
prefix cache is unchanged) before ``messages``: the first bytes then name the conversation.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

#: Key orders of the request body (see the module docstring).
Layout = Literal["system-first", "session-first"]
LAYOUTS: tuple[Layout, ...] = ("system-first", "session-first")

#: Chat-template tokens around each message (Llama 3: <|start_header_id|>role<|end_header_id|>
#: \n\n ... <|eot_id|>).
TEMPLATE_TOKENS_PER_MESSAGE = 5
#: JSON bytes around one message's content: ``{"role":"assistant","content":""},``.
JSON_BYTES_PER_MESSAGE = 36
#: ``"user":"c-0000000000",``: a conversation id of 10 digits.
SESSION_ID_BYTES = 23


def head_bytes(layout: Layout, adapter: str) -> int:
    """Bytes before the system prompt's message: ``{"model":"<adapter>","messages":[`` (no
    ``model`` without an adapter), plus the conversation id first in ``session-first``."""
    head = f'{{"model":"{adapter}","messages":[' if adapter else '{"messages":['
    return len(head.encode()) + (SESSION_ID_BYTES if layout == "session-first" else 0)


@dataclass(frozen=True)
class SessionModel:
    """What a MangaAssist conversation looks like (turns and think time: CLI options)."""

    #: Mean turns per session, geometric (the brief: 4.2; 11.3 % of sessions then exceed 8 turns,
    #: the brief's 12 %).
    mean_turns: float = 4.2
    #: No session is longer (a cap on the geometric's tail; 0.762^100: none in practice).
    max_turns: int = 100
    #: Mean seconds from an answer's end to the next question (exponential). An assumption: a
    #: ~180-token answer is ~135 words to read, then a short question to type.
    think_seconds: float = 20.0
    #: Tokens of a user message, uniform (the brief's examples: 6-8 tokens; "What about box
    #: sets?" up to a sentence or two).
    user_tokens: tuple[int, int] = (6, 40)
    #: Retrieved catalog context of one turn, uniform (the brief: 200-400 tokens per turn).
    retrieval_tokens: tuple[int, int] = (200, 400)
    #: Answer tokens as a share of engine.typical_output_tokens, uniform.
    output_spread: tuple[float, float] = (0.5, 1.5)
    #: UTF-8 bytes per token of the text (Llama 3's tokenizer: ~4 characters of English per
    #: token, OpenAI's and Meta's rule of thumb; an assumption for Japanese-heavy text, which
    #: has more bytes per token).
    bytes_per_token: float = 4.0

    def __post_init__(self) -> None:
        ok = (
            1 <= self.mean_turns <= self.max_turns
            and self.think_seconds >= 0
            and 1 <= self.user_tokens[0] <= self.user_tokens[1]
            and 0 <= self.retrieval_tokens[0] <= self.retrieval_tokens[1]
            and 0 < self.output_spread[0] <= self.output_spread[1]
            and self.bytes_per_token > 0
        )
        if not ok:
            raise ValueError(f"invalid session model: {self}")

    def turns(self, rng: random.Random) -> int:
        """A geometric number of turns (>= 1) with mean ``mean_turns``."""
        p = 1 / self.mean_turns
        if p >= 1:
            return 1
        return min(self.max_turns, 1 + int(math.log(1 - rng.random()) / math.log(1 - p)))

    def share_over(self, turns: int) -> float:
        """Share of sessions with more than ``turns`` turns."""
        return float((1 - 1 / self.mean_turns) ** turns)


@dataclass(frozen=True)
class Segment:
    """One piece of a request: its identity (equal keys, equal text), tokens and body bytes."""

    key: tuple[object, ...]
    tokens: int
    nbytes: int


@dataclass
class Session:
    sid: int
    turns: int
    user: list[int]
    retrieval: list[int]
    output: list[int]
    #: The turn the next request asks (0-based).
    turn: int = 0


@dataclass(frozen=True)
class Request:
    session: Session
    turn: int
    #: Token segments in prompt order (system, [marker], earlier turns, current + retrieval).
    prompt: tuple[Segment, ...]
    prompt_tokens: int
    output_tokens: int
    #: The first bytes of the body, as segments (only as far as routing needs to look).
    body: tuple[Segment, ...]
    trimmed_turns: int

    @property
    def system_tokens(self) -> int:
        return self.prompt[0].tokens


def new_session(sid: int, model: SessionModel, typical_output: int, rng: random.Random) -> Session:
    n = model.turns(rng)
    lo, hi = model.output_spread
    return Session(
        sid=sid,
        turns=n,
        user=[rng.randint(*model.user_tokens) for _ in range(n)],
        retrieval=[rng.randint(*model.retrieval_tokens) for _ in range(n)],
        output=[max(1, round(typical_output * rng.uniform(lo, hi))) for _ in range(n)],
    )


@dataclass(frozen=True)
class Budget:
    """engine.context_budget and max_model_len, as container/serving/budget.py applies them."""

    system_tokens: int
    retrieval_tokens: int
    reserve_tokens: int
    max_model_len: int
    #: The body's ``model`` (the adapter; config default_adapter), the same for every session.
    adapter: str = ""

    @property
    def prompt_limit(self) -> int:
        return self.max_model_len - self.reserve_tokens


def _msg(key: tuple[object, ...], tokens: int, model: SessionModel) -> Segment:
    return Segment(
        key,
        tokens + TEMPLATE_TOKENS_PER_MESSAGE,
        JSON_BYTES_PER_MESSAGE + round(tokens * model.bytes_per_token),
    )


def build_request(s: Session, budget: Budget, model: SessionModel, layout: Layout) -> Request:
    """Turn ``s.turn`` of ``s``: the prompt vLLM sees and the body's leading bytes."""
    k = s.turn
    system = _msg(("system",), budget.system_tokens, model)
    history: list[Segment] = []
    for j in range(k):
        history.append(_msg(("user", s.sid, j), s.user[j], model))
        history.append(_msg(("answer", s.sid, j), s.output[j], model))
    retrieval = min(s.retrieval[k], budget.retrieval_tokens)
    current = _msg(("current", s.sid, k), s.user[k] + retrieval, model)
    # the budget: drop the oldest whole turns (user + answer) until the prompt fits
    fixed = system.tokens + current.tokens
    room = budget.prompt_limit - fixed
    kept = list(history)
    dropped = 0
    while kept and sum(x.tokens for x in kept) > room - TEMPLATE_TOKENS_PER_MESSAGE - 8:
        kept = kept[2:]
        dropped += 1
    prompt = [system]
    if dropped:
        prompt.append(_msg(("marker", dropped), 8, model))  # same text for every session
    prompt += kept
    prompt.append(current)
    # The body holds every turn the client sends (the budget trims inside the container) and,
    # after the messages, the turn's documents and sampling fields.
    user_msg = _msg(("user", s.sid, k), s.user[k], model)
    body: list[Segment] = []
    head_key: tuple[object, ...] = ("head", s.sid) if layout == "session-first" else ("head",)
    body.append(Segment(head_key, 0, head_bytes(layout, budget.adapter)))
    body.append(Segment(("system",), 0, system.nbytes))
    body += [Segment(x.key, 0, x.nbytes) for x in history]
    body.append(Segment(user_msg.key, 0, user_msg.nbytes))
    # "]," then "retrieval": [...] and the sampling fields: this turn's, different every turn
    body.append(Segment(("tail", s.sid, k), 0, 40 + round(retrieval * model.bytes_per_token)))
    return Request(
        session=s,
        turn=k,
        prompt=tuple(prompt),
        prompt_tokens=sum(x.tokens for x in prompt),
        output_tokens=s.output[k],
        body=tuple(body),
        trimmed_turns=dropped,
    )


def prefix_key(body: tuple[Segment, ...], length: int) -> tuple[object, ...]:
    """What the first ``length`` bytes of the body are: the keys of the segments they cover and
    how far into the last one they reach (equal keys, equal bytes)."""
    out: list[object] = []
    left = length
    for seg in body:
        if left <= 0:
            break
        out.append(seg.key)
        if seg.nbytes >= left:
            out.append(left)
            break
        left -= seg.nbytes
    return tuple(out)


def byte_offsets(body: tuple[Segment, ...]) -> list[tuple[tuple[object, ...], int]]:
    """(segment key, byte offset where it ends) for a body."""
    out, at = [], 0
    for seg in body:
        at += seg.nbytes
        out.append((seg.key, at))
    return out
