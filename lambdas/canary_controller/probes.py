"""The shadow stage's probes: a few whole and streamed requests the controller sends through the
endpoint when the stage's window opens, each marked so that data capture's record of it can be
found on both variants (``shadow_stage``'s ground check, issue 41 item 4).

Why. The stage judges the new build on what data capture records of the requests SageMaker
copies to the shadow variant. Whether a request sent with InvokeEndpointWithResponseStream is
copied to a shadow variant, and whether data capture records it, is not documented
(docs/limits.md, "What AWS leaves undocumented under the shadow stage"); the container serves
both kinds and users send both. So the controller asks: it sends ``n`` probes of each kind and
the ground check requires at least one of each kind in the capture of the primary and of the
shadow within ``GROUND_SECONDS``; what is missing then ends the stage FAILED naming it. A probe
that SageMaker refuses (an error answer) ends the stage at once: users' requests of that kind are
being refused on the shadow config too.

What AWS documents, relied on here:

- InvokeEndpoint's ``InferenceId``: "If you provide a value, it is added to the captured data
  when you enable data capture on the endpoint" (SageMaker Runtime API reference, InvokeEndpoint,
  https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_runtime_InvokeEndpoint.html); the
  captured record carries it as ``inferenceId`` ("If inferenceId is present in captured data
  records, Model Monitor uses it to merge captured data with Ground Truth records", developer
  guide, "Ingest Ground Truth labels and merge them with predictions",
  https://docs.aws.amazon.com/sagemaker/latest/dg/model-monitor-model-quality-merge.html).
  InvokeEndpointWithResponseStream takes an ``InferenceId`` too, documented only as "an
  identifier that you assign to your request" (its API reference): not said to reach capture.
  So each probe also carries its id in the request body (the prompt), which data capture records
  as ``captureData.endpointInput`` (developer guide, "Data capture"), and a probe is found by
  either (``capture.probe_id``).
- The shadow variant gets "the percentage of inference requests that Amazon SageMaker replicates
  from the production variant to the shadow variant" (API reference, ShadowModelVariantConfig,
  https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ShadowModelVariantConfig.html;
  the stage's config sets it as the shadow's weight against the primary's:
  ``stacks/constructs/shadow_stage.py``), and data capture records "the percentage of requests"
  ``InitialSamplingPercentage`` (API reference, DataCaptureConfig). Which requests are picked is
  not documented: the count below takes each pick as independent of the others (a sample).

How many (:func:`probe_count`). With ``s`` the shadow's sample and ``c`` capture's, a probe is
found on the shadow with probability ``s x c`` and on the primary with ``c``. The check fails
falsely when, for some kind, none of its ``n`` probes is found on a variant:

    P(false failure) <= 2 x ((1 - c)^n + (1 - s x c)^n) <= 4 x (1 - s x c)^n

(two kinds, two variants, a union bound), so ``n = ceil(ln(epsilon / 4) / ln(1 - s x c))`` keeps
it at most :data:`FALSE_FAILURE` (one release in a million). At prod's 10 % sample and 100 %
capture that is 145 of each kind, 290 requests of one output token each; at 100 % of both, 1.
Past :data:`MAX_PROBES_PER_KIND` (a sample times capture below about 7.4 %) the cap is sent and
the record states the chance it leaves (:func:`false_failure_chance`).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from .capture import PROBE_PREFIX

#: The false-failure chance the probe count is chosen for (module docstring).
FALSE_FAILURE: Final = 1e-6
#: The most probes of one kind one stage sends (module docstring): the requests a stage start may
#: add to the primary's load, and a bound on the tick's time.
MAX_PROBES_PER_KIND: Final = 200
#: Probes in flight at once: the tick's time stays well inside the Lambda's 60 s.
PARALLEL: Final = 16
#: How long after the first probe the last one may still be sent (the tick's own clock); those
#: not sent by then count as unanswered.
SEND_SECONDS: Final = 30
#: One probe's connect and read timeouts, without retries: a probe that gets no answer counts
#: as unanswered; its id may still be captured.
RUNTIME_CONFIG: Final = Config(
    connect_timeout=3, read_timeout=10, retries={"total_max_attempts": 1}
)
KINDS: Final = ("whole", "streamed")


def probe_count(sample_percent: float, capture_percent: float) -> int:
    """Probes of each kind for a false failure of at most :data:`FALSE_FAILURE` (module
    docstring): ``ceil(ln(epsilon / 4) / ln(1 - s x c))``, within [1, MAX_PROBES_PER_KIND]."""
    found = sample_percent / 100 * capture_percent / 100
    if found >= 1:
        return 1
    exact = math.log(FALSE_FAILURE / 4) / math.log1p(-found)
    return min(MAX_PROBES_PER_KIND, max(1, math.ceil(round(exact, 9))))


def false_failure_chance(sample_percent: float, capture_percent: float, n: int) -> float:
    """The bound ``2 x ((1 - c)^n + (1 - s x c)^n)`` for ``n`` probes of each kind."""
    c = capture_percent / 100
    return 2 * ((1 - c) ** n + (1 - sample_percent / 100 * c) ** n)


def probe_ids(endpoint: str, sent_at: int, n: int) -> dict[str, tuple[str, ...]]:
    """The ``InferenceId`` of every probe, by kind: ``<PROBE_PREFIX><8 hex>-<w|s><i>``, unique
    to the endpoint and the moment they were sent, within the 64 characters InferenceId takes
    (botocore's sagemaker-runtime model)."""
    tag = hashlib.sha256(f"{endpoint}/{sent_at}".encode()).hexdigest()[:8]
    return {
        kind: tuple(f"{PROBE_PREFIX}{tag}-{kind[0]}{i:03d}" for i in range(n)) for kind in KINDS
    }


def body(inference_id: str, stream: bool) -> bytes:
    """A chat request of one output token to the default adapter, its id in the prompt (what
    data capture records of a streamed request whatever becomes of its InferenceId)."""
    request: dict[str, Any] = {
        "messages": [{"role": "user", "content": f"Reply OK. ({inference_id})"}],
        "max_tokens": 1,
        "temperature": 0,
    }
    if stream:
        request["stream"] = True
    return json.dumps(request).encode()


@dataclass
class Sent:
    """What became of the probes: answered ids by kind, and the failures (``refused``: SageMaker
    or the model answered with an error; ``unanswered``: no answer, or not sent in time)."""

    answered: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})
    refused: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})
    unanswered: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})

    def summary(self, n: int) -> str:
        parts = []
        for kind in KINDS:
            line = f"{len(self.answered[kind])} of {n} {kind} probes answered"
            failed = self.refused[kind][:1] or self.unanswered[kind][:1]
            if failed:
                line += f" (first failure: {failed[0]})"
            parts.append(line)
        return "; ".join(parts)


def _stream_failure(events: Iterable[dict[str, Any]]) -> str | None:
    """Read a response stream to its end (the request completes, so it can be captured); the
    error event it carried, if any (InvokeEndpointWithResponseStream's ModelStreamError and
    InternalStreamFailure)."""
    for event in events:
        for key in ("ModelStreamError", "InternalStreamFailure"):
            if key in event:
                return f"{key}: {event[key].get('Message', event[key])}"
    return None


def _one(runtime: Any, endpoint: str, inference_id: str, stream: bool) -> str | None:
    """One probe; None once answered, else why not (raised: no answer)."""
    kwargs = {
        "EndpointName": endpoint,
        "ContentType": "application/json",
        "Accept": "text/event-stream" if stream else "application/json",
        "Body": body(inference_id, stream),
        "InferenceId": inference_id,
    }
    if stream:
        return _stream_failure(runtime.invoke_endpoint_with_response_stream(**kwargs)["Body"])
    runtime.invoke_endpoint(**kwargs)["Body"].read()
    return None


def _described(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        return f"{err.get('Code', 'ClientError')}: {err.get('Message', '')}"[:300]
    return f"{type(exc).__name__}: {exc}"[:300]


#: What a probe that was not sent in time answers (:func:`send`).
LATE: Final = "late"


def send(
    runtime: Any,
    endpoint: str,
    ids: dict[str, tuple[str, ...]],
    *,
    clock: Callable[[], float] = time.time,
) -> Sent:
    """Send every probe of ``ids`` (:data:`PARALLEL` at a time); none is started once
    :data:`SEND_SECONDS` have passed on ``clock`` since the first (those count as unanswered)."""
    sent, start = Sent(), clock()

    def job(inference_id: str, stream: bool) -> str | None:
        if clock() - start > SEND_SECONDS:
            return LATE
        return _one(runtime, endpoint, inference_id, stream)

    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        jobs = [
            (kind, inference_id, pool.submit(job, inference_id, kind == "streamed"))
            for kind, inference_id in _interleaved(ids)
        ]
    for kind, inference_id, done in jobs:
        try:
            failure = done.result()
        except ClientError as exc:
            sent.refused[kind].append(f"{inference_id}: {_described(exc)}")
            continue
        except BotoCoreError as exc:
            sent.unanswered[kind].append(f"{inference_id}: {_described(exc)}")
            continue
        if failure is None:
            sent.answered[kind].append(inference_id)
        elif failure == LATE:
            sent.unanswered[kind].append(f"{inference_id}: not sent within {SEND_SECONDS}s")
        else:
            sent.refused[kind].append(f"{inference_id}: {failure}")
    return sent


def _interleaved(ids: dict[str, tuple[str, ...]]) -> Iterator[tuple[str, str]]:
    """Both kinds in turn, so a send cut short by time leaves both kinds alike short."""
    for pair in zip(*(ids[k] for k in KINDS), strict=True):
        yield from zip(KINDS, pair, strict=True)
