"""What a request body must look like before the hooks rewrite it or the engine sees it.

Every check raises :class:`RequestError` (answered 400) or :class:`LimitExceeded` (answered
413) with a message naming the field or the limit, so a malformed body is a 4xx that says what is
wrong, never an exception that escapes as a 500.

Sequences: this endpoint generates one sequence per request. ``n`` > 1, ``best_of`` > 1 and
beam search are refused with a 400 that says so: admission counts requests, and one request
asking for 256 sequences would take the whole batch past the admission limit.
"""

from __future__ import annotations

from typing import Any


class RequestError(ValueError):
    """A client error: answered 400 with this message."""


class LimitExceeded(RequestError):
    """The body is larger than a configured limit: answered 413 naming the limit."""


#: Fields that ask the engine for more than one sequence per request (refused when > 1 / true).
_MULTI_SEQUENCE = ("n", "best_of")


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_sequences(body: dict[str, Any]) -> None:
    for key in _MULTI_SEQUENCE:
        value = body.get(key)
        if value is None:
            continue
        if not _positive_int(value):
            raise RequestError(f"'{key}' must be a positive integer")
        if value > 1:
            raise RequestError(
                f"'{key}': {value} is not supported: this endpoint generates one sequence per "
                "request (admission counts requests); send separate requests instead"
            )
    if body.get("use_beam_search"):
        raise RequestError("'use_beam_search' is not supported by this endpoint")


def check_messages(messages: object, max_messages: int) -> list[dict[str, Any]]:
    """The chat ``messages`` list: non-empty, at most ``max_messages``, each an object with a
    string ``role`` and a ``content`` that is null, a string or a list of content parts whose
    ``text`` (when present) is a string."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list of {role, content} objects")
    if len(messages) > max_messages:
        raise LimitExceeded(
            f"'messages' has {len(messages)} entries; MAX_MESSAGES allows {max_messages}"
        )
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(f"messages[{i}] must be an object with a string 'role'")
        content = m.get("content")
        if content is None or isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise RequestError(
                f"messages[{i}].content must be a string, null or a list of content parts"
            )
        for j, part in enumerate(content):
            if not isinstance(part, dict):
                raise RequestError(f"messages[{i}].content[{j}] must be an object")
            if "text" in part and not isinstance(part["text"], str):
                raise RequestError(f"messages[{i}].content[{j}].text must be a string")
    return messages


def check_tools(body: dict[str, Any]) -> list[Any] | None:
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise RequestError("'tools' must be a list of tool objects")
    return tools


def check_retrieval(raw: object) -> list[str]:
    if raw is None:
        return []
    retrieval = [raw] if isinstance(raw, str) else raw
    if not isinstance(retrieval, list) or not all(isinstance(d, str) for d in retrieval):
        raise RequestError("'retrieval' must be a string or a list of strings (ranked)")
    return retrieval


def check_max_tokens(body: dict[str, Any]) -> tuple[str, int | None]:
    key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    requested = body.get(key)
    if requested is not None and not _positive_int(requested):
        raise RequestError(f"'{key}' must be a positive integer")
    return key, requested
