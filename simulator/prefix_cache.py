"""The prefix cache of one instance in the routing comparison (:mod:`simulator.routing.compare`).

vLLM's automatic prefix caching per instance: full blocks of ``engine.block_size`` tokens, the
longest cached prefix of the prompt is not recomputed (at least the last prompt token is). The
system prompt is cached on every instance (every request carries it). A finished request leaves
its conversation's blocks in the cache; they are evictable, least recently used first (vLLM
frees a request's blocks tail first), and running requests take their KV cache from the same
``sizing.capacity.estimate(...).kv_capacity_tokens``: a busy instance keeps little history.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from simulator.sessions import Segment


@dataclass
class _Entry:
    keys: tuple[tuple[object, ...], ...]
    #: Tokens up to the end of each key's segment (cumulative, system excluded).
    ends: tuple[int, ...]
    held: int


class PrefixCache:
    """vLLM's automatic prefix caching on one instance, per conversation: each session's last
    sequence (beyond the system prompt, which stays cached), evicted least recently used."""

    def __init__(self, capacity_tokens: int, block: int) -> None:
        self.capacity = capacity_tokens
        self.block = block
        self.entries: OrderedDict[int, _Entry] = OrderedDict()
        self.held = 0

    def match(self, sid: int, prompt: tuple[Segment, ...]) -> int:
        """Prompt tokens found in the cache (whole blocks, at least one token recomputed)."""
        system = prompt[0].tokens
        cached = system
        entry = self.entries.get(sid)
        if entry is not None:
            for i, seg in enumerate(prompt[1:]):
                if i >= len(entry.keys) or entry.keys[i] != seg.key:
                    break
                if entry.ends[i] > entry.held:
                    cached = system + entry.held
                    break
                cached = system + entry.ends[i]
        total = sum(s.tokens for s in prompt)
        return min(cached // self.block * self.block, (total - 1) // self.block * self.block)

    def take(self, sid: int) -> None:
        """The session's blocks are in use by a running request (not evictable, counted there)."""
        entry = self.entries.pop(sid, None)
        if entry is not None:
            self.held -= entry.held

    def store(self, sid: int, prompt: tuple[Segment, ...], answer: Segment) -> None:
        segs = (*prompt[1:], answer)
        ends, at = [], 0
        for s in segs:
            at += s.tokens
            ends.append(at)
        self.take(sid)
        self.entries[sid] = _Entry(tuple(s.key for s in segs), tuple(ends), at)
        self.held += at

    def make_room(self, free: int) -> None:
        """Evict least recently used history (tail first) until ``held`` <= ``free``."""
        while self.held > max(0, free) and self.entries:
            sid, entry = next(iter(self.entries.items()))
            cut = min(entry.held, self.held - max(0, free))
            entry.held -= cut
            self.held -= cut
            if entry.held <= 0:
                del self.entries[sid]
