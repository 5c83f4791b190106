"""Reading a config file's YAML strictly: a duplicate key is an error naming both lines, and a
syntax error names the file and the line.

PyYAML's ``safe_load`` keeps the last of two equal keys without a word: a second ``smoke_gate:``
block at the end of a config silently replaced the first (and with it switched the smoke gate
off). YAML 1.2 says keys of a mapping are unique; this loader holds it. Merge keys (``<<: *x``)
stay allowed: a key written beside a merge overrides the merged value, which is what they are for.

``yaml.safe_load(text)`` also names every error's source ``"<unicode string>"``; here the loader
carries the file's path, so the message says where to look.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from typed_config.base import ConfigError

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping holding one key twice."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _value in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: SafeLoader reports it itself below
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None,
                    f"duplicate key {key!r}: first on line {first.start_mark.line + 1}, again on "
                    f"line {key_node.start_mark.line + 1} (YAML keeps only the last one; remove "
                    "or merge one of them)",
                    key_node.start_mark,
                )  # fmt: skip
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def _where(mark: Any, source: Path) -> str:
    return f"{source}, line {mark.line + 1}, column {mark.column + 1}"


def parse_yaml(text: str, *, source: Path) -> Any:
    """Parse one YAML document from ``text`` read from ``source``; errors are ``ConfigError``s
    that start with the file, line and column."""
    return _parse(text, source)[0]


def _parse(text: str, source: Path) -> tuple[Any, yaml.Node | None]:
    """The document and its node tree (composed once: the data is constructed from it and the
    line map read from it)."""
    loader = _UniqueKeyLoader(text)
    loader.name = str(source)  # the marks (and so any message PyYAML writes) name the file
    try:
        node = loader.get_single_node()
        return (loader.construct_document(node) if node is not None else None), node
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = _where(mark, source) if mark is not None else str(source)
        what = exc.problem or "not valid YAML"
        context = ""
        if exc.context and exc.context_mark is not None and exc.context_mark is not mark:
            context = f" ({exc.context} at line {exc.context_mark.line + 1})"
        raise ConfigError(f"{where}: not valid YAML: {what}{context}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def read_yaml(path: Path) -> Any:
    """Read and parse a config file (see :func:`parse_yaml`)."""
    return read_yaml_with_lines(path)[0]


#: A value's place in the document (mapping keys and list indexes, as pydantic's ``loc``) ->
#: the 1-based line it starts on.
LineMap = dict[tuple[str | int, ...], int]


def read_yaml_with_lines(path: Path) -> tuple[Any, LineMap]:
    """The parsed document and where each value is (:func:`key_lines`), so an error in a
    field names the line to fix, not only a YAML syntax error."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from None
    return parse_yaml_with_lines(text, source=path)


def parse_yaml_with_lines(text: str, *, source: Path) -> tuple[Any, LineMap]:
    """:func:`read_yaml_with_lines` of text not (yet) in a file: ``source`` names it."""
    data, node = _parse(text, source)
    return data, key_lines(node)


def key_lines(root: yaml.Node | None) -> LineMap:
    """Each mapping key's and list item's line in the document ``root`` composes."""
    out: LineMap = {}

    def walk(node: yaml.Node, path: tuple[str | int, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != _MERGE_TAG:
                    out.setdefault((*path, key.value), key.start_mark.line + 1)
                    walk(value, (*path, key.value))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                out.setdefault((*path, i), item.start_mark.line + 1)
                walk(item, (*path, i))

    if root is not None:
        walk(root, ())
    return out
