"""The metrics task: vLLM's /metrics (engine + the hooks' counters) to CloudWatch EMF lines.

Every METRICS_INTERVAL_SECONDS the entrypoint scrapes /metrics once, turns counters and
histograms into per-interval deltas, and prints one embedded-metric-format JSON line for the
variant and one per adapter. SageMaker ships the container's stdout to CloudWatch Logs, which
extracts the metrics: no agent, no PutMetricData permission. Names, units, dimensions, the
namespace and the series each metric is derived from come from :mod:`metrics_contract`, the
module the stacks' alarms read too: :func:`derive` interprets a metric's ``Source``.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from . import metrics_contract as mc
from .settings import Settings

log = logging.getLogger("serving.metrics")

Labels = tuple[tuple[str, str], ...]


@dataclass
class Snapshot:
    """One scrape: plain values by (name, labels) and histogram buckets by (name, labels)."""

    values: dict[tuple[str, Labels], float] = field(default_factory=dict)
    buckets: dict[tuple[str, Labels], list[tuple[float, float]]] = field(default_factory=dict)

    def total(self, name: str) -> float:
        """Sum of a series over every label set (e.g. over the `engine` label)."""
        return sum(v for (n, _), v in self.values.items() if n == name)

    def by_label(self, name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for (n, labels), v in self.values.items():
            if n == name:
                out[dict(labels).get(label, "")] += v
        return dict(out)

    def histogram(
        self, name: str, label: str | None = None
    ) -> dict[str, list[tuple[float, float]]]:
        """Cumulative buckets (upper bound, count) summed over label sets, grouped by ``label``."""
        grouped: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))
        for (n, labels), buckets in self.buckets.items():
            if n == name:
                key = dict(labels).get(label, "") if label else ""
                for le, count in buckets:
                    grouped[key][le] += count
        return {k: sorted(v.items()) for k, v in grouped.items()}


def parse(text: str) -> Snapshot:
    from prometheus_client.parser import text_string_to_metric_families

    snap = Snapshot()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
            if sample.name.endswith("_bucket"):
                base = sample.name[: -len("_bucket")]
                snap.buckets.setdefault((base, labels), []).append(
                    (float(sample.labels["le"]), float(sample.value))
                )
            else:
                snap.values[(sample.name, labels)] = float(sample.value)
    return snap


def delta_buckets(
    now: list[tuple[float, float]], before: list[tuple[float, float]] | None
) -> list[tuple[float, float]]:
    prev = dict(before or [])
    return [(le, max(count - prev.get(le, 0.0), 0.0)) for le, count in now]


def percentile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """The q-quantile of cumulative buckets, interpolated linearly inside the bucket (as
    Prometheus' histogram_quantile does). None when the interval saw no observation."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    lower_le, lower_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return lower_le
            width = count - lower_count
            frac = (rank - lower_count) / width if width > 0 else 1.0
            return lower_le + (le - lower_le) * frac
        lower_le, lower_count = le, count
    return lower_le


def derive(
    metric: mc.Metric, now: Snapshot, before: Snapshot | None, label: str | None = None
) -> dict[str, float]:
    """``metric``'s value for the interval, by ``label`` value ("" when ``label`` is None), as
    its contract :class:`~metrics_contract.Source` says. A group with no value is left out."""
    src = metric.source

    def values(snap: Snapshot | None, series: str) -> dict[str, float]:
        if snap is None:
            return {}
        return snap.by_label(series, label) if label else {"": snap.total(series)}

    def increase(series: str) -> dict[str, float]:
        prev = values(before, series)
        return {g: max(v - prev.get(g, 0.0), 0.0) for g, v in values(now, series).items()}

    if src.kind == "gauge":
        return {g: v * src.scale for g, v in values(now, src.series).items()}
    if src.kind == "delta":
        return {g: v * src.scale for g, v in increase(src.series).items()}
    if src.kind == "ratio":
        per = increase(src.per)
        return {
            g: src.scale * v / per[g]
            for g, v in increase(src.series).items()
            if per.get(g, 0.0) > 0
        }
    if src.kind == "quantile":
        prev_hist = before.histogram(src.series, label) if before else {}
        out: dict[str, float] = {}
        for g, buckets in now.histogram(src.series, label).items():
            q = percentile(delta_buckets(buckets, prev_hist.get(g)), src.quantile)
            if q is not None:
                out[g] = q * src.scale
        return out
    return {}  # "entrypoint": counted by the entrypoint, not scraped


def compute(
    now: Snapshot, before: Snapshot | None
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Variant-level values and per-adapter values, by contract metric name."""
    variant: dict[str, float] = {}
    adapters: dict[str, dict[str, float]] = defaultdict(dict)
    for metric in mc.ALL_METRICS:
        if mc.DIM_ADAPTER in metric.dimensions:
            for adapter, value in derive(metric, now, before, mc.ADAPTER_LABEL).items():
                adapters[adapter][metric.name] = value
        elif "" in (value_by_group := derive(metric, now, before)):
            variant[metric.name] = value_by_group[""]
    return variant, dict(adapters)


def emf_line(
    values: dict[str, float],
    dimensions: dict[str, str],
    timestamp_ms: int,
    dimension_sets: list[list[str]] | None = None,
) -> dict[str, Any]:
    """One CloudWatch embedded-metric-format document; ``dimension_sets`` (default: all of
    ``dimensions`` as one set) publishes the same values under each set."""
    metrics = [
        {"Name": name, "Unit": mc.BY_NAME[name].unit} for name in values if name in mc.BY_NAME
    ]
    return {
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [
                {
                    "Namespace": mc.NAMESPACE,
                    "Dimensions": dimension_sets or [list(dimensions)],
                    "Metrics": metrics,
                }
            ],
        },
        **dimensions,
        **{k: round(v, 3) for k, v in values.items()},
    }


def emf_documents(
    now: Snapshot,
    before: Snapshot | None,
    endpoint: str,
    variant_name: str,
    timestamp_ms: int,
    extra: dict[str, float] | None = None,
    versions: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """``extra``: variant-level values the entrypoint counts itself (EngineRestarts).
    ``versions``: adapter -> version; an adapter with one is also published with AdapterVersion."""
    variant, adapters = compute(now, before)
    variant.update(extra or {})
    dims = {mc.DIM_ENDPOINT: endpoint, mc.DIM_VARIANT: variant_name}
    docs = [emf_line(variant, dims, timestamp_ms)]
    for adapter, values in sorted(adapters.items()):
        version = (versions or {}).get(adapter)
        if version:
            docs.append(
                emf_line(
                    values,
                    {**dims, mc.DIM_ADAPTER: adapter, mc.DIM_ADAPTER_VERSION: version},
                    timestamp_ms,
                    [list(mc.ADAPTER_DIMENSIONS), list(mc.ADAPTER_VERSION_DIMENSIONS)],
                )
            )
        else:
            docs.append(emf_line(values, {**dims, mc.DIM_ADAPTER: adapter}, timestamp_ms))
    return docs


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return str(resp.read().decode())


class MetricsTask:
    """A daemon thread: scrape, compute, print EMF, sleep. A failed scrape is logged, skipped."""

    def __init__(
        self,
        settings: Settings,
        url: str,
        out: TextIO | None = None,
        fetch: Callable[[str], str] = scrape,
        supervisor_counts: Callable[[], int] = lambda: 0,
        draining: Callable[[], bool] = lambda: False,
    ) -> None:
        self.interval = settings.metrics_interval_seconds
        self.endpoint = settings.endpoint_name
        self.variant = settings.variant_name
        self.versions = settings.adapter_version_map()
        #: True once the entrypoint drains: vLLM's /metrics going away is then expected.
        self.draining = draining
        self.url = url
        self.out = out or sys.stdout
        self.fetch = fetch
        self.before: Snapshot | None = None
        #: The entrypoint's own engine-restart counter (it survives the engine it restarts).
        self.restarts = supervisor_counts
        self.restarts_before = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def tick(self) -> list[dict[str, Any]]:
        restarts = self.restarts()
        now = parse(self.fetch(self.url))
        extra = {mc.ENGINE_RESTARTS.name: float(restarts - self.restarts_before)}
        docs = emf_documents(
            now, self.before, self.endpoint, self.variant, int(time.time() * 1000), extra,
            self.versions,
        )  # fmt: skip
        self.before = now
        self.restarts_before = restarts
        for doc in docs:
            self.out.write(json.dumps(doc, separators=(",", ":")) + "\n")
        self.out.flush()
        return docs

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.run_once()

    def run_once(self) -> None:
        """One tick; a failure is logged and skipped. vLLM's /metrics not answering is one line
        without a traceback (during a drain it is expected: an INFO line saying so)."""
        try:
            self.tick()
        except OSError as exc:
            if self.draining():
                log.info("metrics: vLLM's /metrics is gone (draining); skipped")
            else:
                log.warning("metrics tick failed: /metrics did not answer (%s)", exc)
        except Exception:
            log.exception("metrics tick failed")
