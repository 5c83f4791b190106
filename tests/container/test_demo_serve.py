"""`make demo-serve`'s conversation on the session server (the real entrypoint, the tiny model):
every adapter answers text, and its section of the demo stays within the lines the demo's budget
counts on (container.demo_lines.MAX_LINES, tests/infra/test_demo_story.py)."""

from __future__ import annotations

from _serving_support import ADAPTERS, Server

from container import demo, demo_lines


def test_every_adapter_answers_the_demo_conversation_with_text(server: Server) -> None:
    names = ["base", *ADAPTERS]  # the session server serves model_dir/base as "base"
    answers = demo.converse(server.url, names)
    assert [a.name for a in answers] == names
    assert [a.status for a in answers] == [200] * len(names)
    empty = [a.name for a in answers if not a.text.strip()]
    assert empty == [], f"no text from {empty}: the smoke gate fails a deploy on an empty answer"
    assert answers[-1].chunks and answers[-1].chunks > 1  # the last one really streamed
    assert len({a.text for a in answers}) == len(answers)  # each adapter changes the answer
    lines = [a.line() for a in answers]
    assert all(line.count("\n") == 0 for line in lines)
    assert len(names) <= 1 + demo_lines.MAX_ADAPTERS
