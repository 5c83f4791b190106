"""How a config error reads: the file, then one line per mistake naming the field the way the
file shows it, and the line to fix.

A field's path is the YAML keys down to it; a list item is named by what the file writes in it
(``scaling.schedules[us-evening-end].min_capacity``: its ``name``, else its ``instance_type``),
or by its place counted from 1 where it has neither (``steps[item 2]``), never by a 0-based
index the file does not show. Every field is followed by ``(line N)``: the line of the longest part
of its path the file has (a missing key: its parent's line), written beside the field, before a
message that can run long: ``scaling.schedules[us-evening-end].min_capacity (line 172): ...``.

The rules that run after loading (``sizing.fit_checks.check_deployable`` on the config a deploy will
run) report the same way: the loader keeps the file's :class:`ConfigSource` on the config.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typed_config.yaml_source import LineMap

#: A field path at the start of a message line (``field: why``), its items 0-based indexes as
#: validators and pydantic write them.
FIELD_PATH = re.compile(r"^([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)*)(?=: |$)")
#: The keys that name a list item, in the order tried.
ITEM_NAMES = ("name", "instance_type")
#: A string item longer than this is named by its place (a message line stays readable).
MAX_SCALAR_LABEL = 40


@dataclass(frozen=True)
class ConfigSource:
    """Where a config came from: its file, the line of each key, and the data as written (to
    name list items as the file does). ``lines``/``data`` are None for a config built in code."""

    path: Path
    lines: LineMap | None = None
    data: Any = None

    def report(self, found: list[str]) -> str:
        """``found`` (``field: why`` each) as the error a person reads: the file and the count,
        then each mistake with its field named as written and its line."""
        shown = [self.located(line) for line in found]
        head = f"{self.path}: {len(shown)} invalid value(s)"
        return "\n".join([head, *(f"  {s}" for s in shown)])

    def located(self, line: str) -> str:
        """One ``field: why`` line with the field's list items named and ``(line N)`` added."""
        match = FIELD_PATH.match(line)
        if match is None:
            return line
        parts: list[str | int] = [int(p) if p.isdigit() else p for p in match.group(1).split(".")]
        at = self.line_of(parts)
        where = f" (line {at})" if at is not None else ""
        return item_path(parts, self.data) + where + line[match.end() :]

    def line_of(self, parts: list[str | int]) -> int | None:
        """The line of the longest part of ``parts`` the file has."""
        if not self.lines:
            return None
        parts = list(parts)
        while parts:
            at = self.lines.get(tuple(parts))
            if at is not None:
                return at
            parts.pop()
        return None


def item_path(parts: list[str | int], data: Any) -> str:
    """``parts`` as a dotted path whose list items are named the way the file shows them."""
    out = ""
    holder = data
    for part in parts:
        if isinstance(part, int):
            item = holder[part] if isinstance(holder, list) and part < len(holder) else None
            out += f"[{item_label(item, part)}]"
            holder = item
        else:
            out += f".{part}" if out else part
            holder = holder.get(part) if isinstance(holder, dict) else None
    return out


def item_label(item: Any, index: int) -> str:
    """How a list item is named in a message: what the file names it by (a mapping's ``name``
    or ``instance_type``; a short scalar itself, ``reset_on_update[DesiredCount]``), else
    ``item N`` (counted from 1, as a person counts the file's dashes)."""
    if isinstance(item, dict):
        for key in ITEM_NAMES:
            value = item.get(key)
            if isinstance(value, str | int) and not isinstance(value, bool):
                return str(value)
    elif isinstance(item, str) and 0 < len(item) <= MAX_SCALAR_LABEL and "]" not in item:
        return item
    return f"item {index + 1}"
