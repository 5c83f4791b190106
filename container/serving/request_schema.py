"""A body's OpenAI fields checked against vLLM's own request models, so a bad value is a 400 that
names the field on every route.

vLLM's ``/invocations`` tries each request type in turn and reports only the last one's failure:
``{"messages": [...], "temperature": "hot"}`` fails the chat model on ``temperature``, then the
completion model on its missing prompt, and the client read "Either prompt or prompt_embeds must
be provided and non-empty" (vllm/entrypoints/serve/sagemaker/api_router.py ``invocations``). The
same body on ``/v1/chat/completions`` names ``body.temperature``. Here the body is validated
against the model its shape selects (``messages``: chat, else completion) before the engine sees
it, and each failing field is named the way vLLM's own routes name it.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pydantic

from .request_checks import RequestError

#: At most this many field errors in one message (a body of 1,000 bad fields stays short).
MAX_ERRORS = 3


@cache
def _models() -> tuple[type[pydantic.BaseModel], type[pydantic.BaseModel], type[Exception]]:
    """vLLM's chat and completion request models and its client-error class (imported once,
    inside vLLM's server)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest
    from vllm.exceptions import VLLMClientError

    return ChatCompletionRequest, CompletionRequest, VLLMClientError


def _where(loc: tuple[int | str, ...]) -> str:
    return "body" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)


def check_fields(body: dict[str, Any]) -> None:
    """Raise :class:`RequestError` naming each field (up to :data:`MAX_ERRORS`) that vLLM's
    request model for this body's shape refuses."""
    chat, completion, client_error = _models()
    model = chat if "messages" in body else completion
    try:
        model.model_validate(body)
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        parts = [f"{_where(e['loc'])}: {e['msg']}" for e in errors[:MAX_ERRORS]]
        more = len(errors) - MAX_ERRORS
        if more > 0:
            parts.append(f"and {more} more")
        raise RequestError("; ".join(parts)) from None
    except (ValueError, TypeError, client_error) as exc:
        # vLLM's own "before" validators raise VLLMValidationError (a VLLMClientError, not a
        # ValueError) with the parameter: "`logprobs` must be an integer. (parameter=logprobs...)"
        field = getattr(exc, "parameter", None)
        where = f"body.{field}" if isinstance(field, str) and field else "body"
        raise RequestError(f"{where}: {exc}"[:500]) from None
