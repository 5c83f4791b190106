"""Each answer's own times, carried in the answer body: the one definition of the field.

The serving container writes it (``answer_timing.py``: on a whole JSON answer as one extra
top-level key, on a streamed answer in the last data event before ``[DONE]``), SageMaker's data
capture records it with the answer, and the canary controller's capture reader
(``lambdas/canary_controller/capture.py``) reads it back into the shadow comparison's per-adapter
latency and TTFT. Both sides import this module.

One file, two packages: the container and the Lambdas sit on the same floor (neither may import
the other, tests/infra/test_floors.py) and each ships only its own directory (the image copies
``container/serving/``, the Lambda asset holds ``lambdas/canary_controller/`` only). So this file
lives here and ``lambdas/canary_controller/answer_timing_contract.py`` is a symbolic link to it.
The CDK stages a link that points outside an asset's directory as the file it points to: its
``copyDirectory`` (aws-cdk-lib ``core/lib/fs/copy.ts``) follows ``options.follow ??
SymlinkFollowMode.EXTERNAL``, seen here with aws-cdk-lib 2.275 (the staged asset holds a plain
file). The API reference gives ``SymlinkFollowMode.NEVER`` as ``CopyOptions.follow``'s default
(https://docs.aws.amazon.com/cdk/api/v2/python/aws_cdk/CopyOptions.html), so the code does not
rest on the documented default: tests/lambdas/test_packaging.py imports every module of the
package from the staged asset and fails on a link left dangling, and test_shadow_capture.py
holds the link itself.

The keys, in milliseconds, all measured in the container on one clock from the moment the
request reached the serving hooks (after admission, before request shaping):

- ``ttft_ms``: to the first generated token, as vLLM's output processor stamped it (its
  ``RequestStateStats``: the same stamp its ``vllm:time_to_first_token_seconds`` histogram
  takes), so shaping, prompt rendering and the engine's queue are inside it;
- ``e2e_ms``: to the whole answer, the last byte of a JSON answer or the last event of a stream,
  as the hooks see it leave vLLM's handler;
- ``queue_ms``: the engine's own queue time (scheduled minus queued, vLLM's
  ``vllm:request_queue_time_seconds``); null when the engine kept no statistics.

Standard library only: imported inside the image (``serving.``), by the tests
(``container.serving.``) and by the Lambda (``canary_controller.``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The top-level key of a whole answer, and of a stream's last data event, that holds the times.
FIELD = "timing"
TTFT_MS = "ttft_ms"
E2E_MS = "e2e_ms"
QUEUE_MS = "queue_ms"


class TimingError(ValueError):
    """A ``timing`` field that is present but not what the container writes."""


@dataclass(frozen=True)
class AnswerTiming:
    """One answer's times in milliseconds (module docstring)."""

    ttft_ms: float
    e2e_ms: float
    queue_ms: float | None = None

    def as_field(self) -> dict[str, float | None]:
        """The field's value as the container writes it (rounded to 0.1 ms)."""
        return {
            TTFT_MS: round(self.ttft_ms, 1),
            E2E_MS: round(self.e2e_ms, 1),
            QUEUE_MS: None if self.queue_ms is None else round(self.queue_ms, 1),
        }


def _ms(value: Any, key: str, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TimingError(f"'{FIELD}.{key}' must be a number of milliseconds, got {value!r}")
    if value < 0:
        raise TimingError(f"'{FIELD}.{key}' must not be negative, got {value!r}")
    return float(value)


def read(body: Mapping[str, Any]) -> AnswerTiming | None:
    """The times ``body`` (a whole answer or one stream event) carries; None without the field.
    A field that is there but malformed raises :class:`TimingError` naming the key."""
    if FIELD not in body:
        return None
    value = body[FIELD]
    if not isinstance(value, Mapping):
        raise TimingError(f"'{FIELD}' must be an object, got {type(value).__name__}")
    ttft = _ms(value.get(TTFT_MS), TTFT_MS)
    e2e = _ms(value.get(E2E_MS), E2E_MS)
    queue = _ms(value.get(QUEUE_MS), QUEUE_MS, optional=True)
    assert ttft is not None and e2e is not None  # not optional: _ms raised otherwise
    return AnswerTiming(ttft_ms=ttft, e2e_ms=e2e, queue_ms=queue)
