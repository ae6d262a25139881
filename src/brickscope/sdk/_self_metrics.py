# SPDX-License-Identifier: Apache-2.0
"""brickscope's own counters (``Session.stats()``) as OpenTelemetry metrics.

Observable counters on the session's meter provider, read from the stats when the
provider collects: what brickscope produced, exported and dropped (by reason), and
its repairs, timeouts and fallbacks. Cumulative over the process: a reconfigured
session adds to what the ones before it counted, so the counters never go back.

Example::

    session = bs.configure(meter_provider=meter_provider)   # registers them once
    # brickscope.spans.dropped{brickscope.reason="queue_full"} ... on the next collection
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from brickscope.version import __version__

REASON = "brickscope.reason"
THREAD = "brickscope.thread"
#: Units of the instruments that count neither spans nor events.
_UNITS = {
    "brickscope.resolution.cpu_time": "ns",
    "brickscope.record.cpu_time": "ns",
    "brickscope.export.bytes": "By",
}

#: (instrument, {stats key: attributes}, description). Every key is a ``stats()`` counter.
INSTRUMENTS: tuple[tuple[str, dict[str, dict[str, str]], str], ...] = (
    ("brickscope.spans.produced", {"spans_produced": {}}, "Spans brickscope handed to export pipelines"),
    ("brickscope.spans.exported", {"spans_exported": {}}, "Spans of brickscope's an exporter accepted"),
    (
        "brickscope.spans.dropped",
        {
            "dropped_export_failed": {REASON: "export_failed"},
            "dropped_queue_full": {REASON: "queue_full"},
            "dropped_at_shutdown": {REASON: "shutdown_deadline"},
            "span_build_errors": {REASON: "build_error"},
        },
        "Spans of brickscope's lost, by reason",
    ),
    ("brickscope.scope.repairs", {"scope_repairs": {}}, "Scopes exited out of order (the stack repaired)"),
    (
        "brickscope.timeouts",
        {"sync_timeouts": {REASON: "gpu_sync"}, "export_timeouts": {REASON: "export"}},
        "Waits cut at their deadline",
    ),
    (
        "brickscope.gpu.fallbacks",
        {"gpu_fallbacks": {REASON: "stream_setup"}, "gpu_timing_errors": {REASON: "timing_error"}},
        "Scopes or streams timed on the host clock because GPU timing failed",
    ),
    (
        "brickscope.resolution.cpu_time",
        {"resolution_cpu_ns_app": {THREAD: "application"}, "resolution_cpu_ns_worker": {THREAD: "resolver"}},
        "CPU time brickscope spent resolving scopes into spans and metrics, by thread",
    ),
    (
        "brickscope.record.cpu_time",
        {"record_cpu_ns_estimated": {THREAD: "application"}},
        "Estimated CPU time of scope records on the application threads: records made x the "
        "CPU time of one, calibrated once per process (not timed per scope)",
    ),
    (
        "brickscope.export.bytes",
        {"export_bytes": {}},
        "Bytes written or sent by the export pipelines carrying brickscope's spans, where the "
        "exporter makes them knowable (Perfetto, flamegraph, OTLP/HTTP request bodies)",
    ),
    (
        "brickscope.scopes.unsampled",
        {"scopes_unsampled": {}},
        "Scopes that produced no span (not sampled); their bricks still reach the metrics",
    ),
    (
        "brickscope.errors",
        {"misuse": {REASON: "misuse"}, "scope_errors": {REASON: "scope"}, "processor_errors": {REASON: "processor"}},
        "Misuse and internal faults, counted and never raised",
    ),
)

_lock = threading.Lock()
_registry: list[tuple[Any, SelfMetrics]] = []


class SelfMetrics:
    """The counters registered on one meter provider, and the totals of its ended sessions."""

    def __init__(self, meter_provider: MeterProvider, current_stats: Callable[[SelfMetrics], dict[str, int] | None]) -> None:
        self._retired: dict[str, int] = {}
        self._current_stats = current_stats
        meter = meter_provider.get_meter("brickscope", __version__)
        for name, keys, description in INSTRUMENTS:
            meter.create_observable_counter(
                name,
                callbacks=[self._observer(keys)],
                unit=_UNITS.get(name, "{span}" if ".spans." in name else "1"),
                description=description,
            )

    def retire(self, stats: dict[str, int]) -> None:
        """A session ended: keep its counts in the totals."""
        with _lock:
            for _, keys, _ in INSTRUMENTS:
                for key in keys:
                    self._retired[key] = self._retired.get(key, 0) + stats.get(key, 0)

    def _observer(self, keys: dict[str, dict[str, str]]) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            stats = self._current_stats(self) or {}
            with _lock:
                totals = {key: self._retired.get(key, 0) + stats.get(key, 0) for key in keys}
            return [Observation(totals[key], attributes) for key, attributes in keys.items()]

        return observe


def register(
    meter_provider: MeterProvider, current_stats: Callable[[SelfMetrics], dict[str, int] | None]
) -> SelfMetrics:
    """The counters on ``meter_provider``, created on first use. ``current_stats(metrics)``:
    the stats of the open session if it reports to ``metrics``, else None."""
    with _lock:
        for known, metrics in _registry:
            if known is meter_provider:
                return metrics
    metrics = SelfMetrics(meter_provider, current_stats)
    with _lock:
        _registry.append((meter_provider, metrics))
    return metrics
