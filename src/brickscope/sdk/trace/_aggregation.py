# SPDX-License-Identifier: Apache-2.0
"""CategoryAggregator: the live session's analysis table, and per-brick OTel metrics.

A span processor like any other: add it to a TracerProvider and every span that
reaches it becomes a row of a :class:`brickscope.analysis.Table` (bounded: spans
beyond ``max_spans`` are counted, not kept), so ``report()`` is the same
analysis ``brickscope report`` makes of a trace file, and the per-brick and
per-category figures (:attr:`bricks`, :attr:`categories`) are views of it, not
a second aggregation. Times are **self time**: a brick's duration minus the
durations of bricks nested inside it, so nothing is counted twice. Bricks also
go to OTel metrics, labelled by brick and category only (kernel names would
explode metric cardinality): exact count, self time and elements of every brick,
sampled or not (``_totals``: the metrics' own aggregation, read once per
collection, not a second analysis), and a duration histogram of the bricks that
have a span (or of all, or none: ``duration_histogram``).

Example::

    aggregator = CategoryAggregator()
    provider.add_span_processor(aggregator)
    ...
    print(aggregator.report())
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry.metrics import NoOpHistogram
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from brickscope import environment_variables as env
from brickscope._record import hotpath
from brickscope.analysis._backend import PythonBackend, get_backend
from brickscope.analysis._table import Table, TableBuilder
from brickscope.sdk import _otel_internals
from brickscope.sdk.trace import _totals
from brickscope.trace import attributes as A
from brickscope.trace.attributes import (
    BRICK_CATEGORY,
    BRICK_ELEMENTS,
    BRICK_NAME,
    BRICK_SELF_DURATION_NS,
    SCOPE_KIND,
    SCOPE_KIND_BRICK,
)
from brickscope.version import __version__

logger = logging.getLogger(__name__)

_ZERO = (0, 0, 0)
#: Rows fold_batch keeps before handing them to the table in one call.
_ROW_BATCH = 2048
#: fold_batch's sums in C (brickscope._hotpath.fold_sums), or None; and the keys it reads.
_fold_sums = getattr(hotpath, "fold_sums", None)
_SUM_KEYS = (SCOPE_KIND, SCOPE_KIND_BRICK, BRICK_NAME, BRICK_CATEGORY, "other", BRICK_SELF_DURATION_NS, BRICK_ELEMENTS)


def _records_nothing(histogram: Any) -> bool:
    """Whether recording into ``histogram`` does nothing: the API's no-op instrument, or
    the proxy the global meter provider gives before an SDK is set (it forwards to a real
    instrument once one is, so this is asked per batch)."""
    if isinstance(histogram, NoOpHistogram):
        return True
    return _otel_internals.proxy_without_sdk(histogram)


#: Histogram boundaries, seconds: 1 us to 10 s in 1-2.5-5 steps. The SDK's defaults
#: (0 to 10000) assume milliseconds and would put every brick in the first bucket.
DURATION_BUCKETS_S = tuple(float(f"{m}e{e}") for e in range(-6, 1) for m in (1, 2.5, 5)) + (10.0,)


#: Spans a session keeps for its report by default: about 40 MB of columns
#: (19 values of 8 bytes a span, plus a batch of rows being built).
DEFAULT_MAX_SPANS = 262_144


def _max_spans() -> int:
    raw = os.environ.get(env.BRICKSCOPE_REPORT_MAX_SPANS, "").strip()
    if not raw:
        return DEFAULT_MAX_SPANS
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"brickscope: {env.BRICKSCOPE_REPORT_MAX_SPANS}={raw!r} is not an int") from None


@dataclass
class Stat:
    """Aggregated self time of one brick or one category (nanoseconds)."""

    count: int = 0
    total_ns: int = 0
    min_ns: int = 0
    max_ns: int = 0
    elements: int = 0

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.count if self.count else 0.0

    @property
    def elements_per_second(self) -> float:
        return self.elements / (self.total_ns / 1e9) if self.total_ns else 0.0


#: What the ``brickscope.brick.duration`` histogram records: the bricks that have a span
#: (default), every brick, or nothing. Exact totals are counted for every brick either way.
DURATION_HISTOGRAMS = ("sampled", "all", "off")


def duration_histogram_mode(value: str | None) -> str:
    """``value``, else ``BRICKSCOPE_DURATION_HISTOGRAM``, else ``"sampled"``; checked."""
    source = ""
    if value is None:
        value = os.environ.get(env.BRICKSCOPE_DURATION_HISTOGRAM, "").strip().lower() or "sampled"
        source = f" (from {env.BRICKSCOPE_DURATION_HISTOGRAM})" if env.BRICKSCOPE_DURATION_HISTOGRAM in os.environ else ""
    if value not in DURATION_HISTOGRAMS:
        raise ValueError(
            f"brickscope: unknown duration_histogram {value!r}{source}; expected one of {DURATION_HISTOGRAMS}"
        )
    return value


def _brick_figures(span: Any, attributes: Any) -> tuple[str, str, int, int] | None:
    """(name, category, self time ns, elements) of a brick span, None for any other span.
    A span brickscope did not resolve has no self time: its whole duration counts."""
    if not attributes or attributes.get(SCOPE_KIND) != SCOPE_KIND_BRICK:
        return None
    self_ns = attributes.get(BRICK_SELF_DURATION_NS)
    if self_ns is None:  # not resolved by brickscope: no nesting information
        self_ns = span.end_time - span.start_time
    return (
        attributes.get(BRICK_NAME, span.name),
        attributes.get(BRICK_CATEGORY, "other"),
        self_ns,
        attributes.get(BRICK_ELEMENTS, 0),
    )


class CategoryAggregator(SpanProcessor):
    """Aggregates brick spans per brick and per category, and records OTel metrics.

    ``on_end`` runs on whichever thread ended the span; it takes a lock for a few
    dictionary updates and never raises.

    Metrics, labelled by brick and category: exact totals of every brick, sampled or
    not, as observable counters read once per collection (``brickscope.brick.count``,
    ``brickscope.brick.self_time``, ``brickscope.brick.elements``; see ``_totals``), and
    the ``brickscope.brick.duration`` histogram (aggregated in ``_totals`` too, handed to
    the SDK once per collection).

    Args:
        meter_provider: where the metrics go; default: the global MeterProvider
            (a no-op until the application configures one).
        max_spans: spans kept for the report; later ones are counted in
            :attr:`dropped` (metrics still see them). Default
            ``BRICKSCOPE_REPORT_MAX_SPANS``, else :data:`DEFAULT_MAX_SPANS`.
        duration_histogram: which bricks the histogram records: ``"sampled"`` (those
            with a span, with exemplars: the default), ``"all"`` (every brick; the
            pipeline must hand over unsampled bricks' values, see ``configure()``) or
            ``"off"``. Default ``BRICKSCOPE_DURATION_HISTOGRAM``, else ``"sampled"``.

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        meter_provider: otel_metrics.MeterProvider | None = None,
        max_spans: int | None = None,
        duration_histogram: str | None = None,
    ) -> None:
        self.duration_histogram = duration_histogram_mode(duration_histogram)
        meter_provider = meter_provider or otel_metrics.get_meter_provider()
        # Exemplars cost a context per span; only an SDK MeterProvider can keep them.
        self._exemplars = isinstance(meter_provider, SdkMeterProvider)
        self._totals = _totals.for_meter_provider(meter_provider)
        self._duration = None  # aggregated by brickscope, handed to the SDK per collection (_totals)
        if self.duration_histogram != "off":
            instrument = meter_provider.get_meter("brickscope", __version__).create_histogram(
                A.METRIC_BRICK_DURATION,
                unit="s",
                description="Self time of a brick (nested bricks excluded).",
                explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S,
            )
            self._duration = self._totals.duration_histogram(instrument, DURATION_BUCKETS_S)
        self.max_spans = _max_spans() if max_spans is None else max_spans
        if self.max_spans < 0:
            raise ValueError(f"brickscope: max_spans must be >= 0, got {self.max_spans}")
        self._rows = TableBuilder(max_rows=self.max_spans)
        # fold_batch's rows, handed to the table _ROW_BATCH at a time (a call per batch of
        # 128 spans cost ~200 ns a row); anything that adds to or reads the table hands
        # them over first, under the same lock, so the table keeps the order spans came in.
        self._row_batch: list[tuple] = []
        self._row_lock = threading.Lock()
        self.errors = 0
        #: Bricks folded into the metrics without a span (unsampled), not in the report.
        self.unsampled_bricks = 0
        self._hand_over: Callable[[], None] | None = None

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        """Nothing to do at start."""

    def on_end(self, span: ReadableSpan) -> None:
        """Fold one ended span into the aggregates. Never raises."""
        self.fold(span, span.attributes)

    def fold(self, span: ReadableSpan, attributes: Any) -> None:
        """Fold a span whose attributes the caller already holds (on_end's work). Never raises."""
        try:
            if self._row_batch:
                self._hand_rows()
            self._rows.add(span, attributes)
            brick = _brick_figures(span, attributes)
            if brick is None:
                return
            name, category, self_ns, elements = brick
            self._totals.add(name, category, self_ns, elements)
            if self._duration is not None:  # with this span's context for an exemplar
                self._duration.add(name, category, self_ns, span.context if self._exemplars else None)
        except Exception:
            self._failed()

    def fold_batch(self, spans: list[ReadableSpan], attributes: list[Any], rows: list[tuple]) -> None:
        """:meth:`fold` for a batch of spans, in order (the resolver's path): the table
        takes their rows (``rows``: a :data:`brickscope.offline.SpanRecord`'s fields per
        span) under one lock, the exact totals one merge per (brick, category), the
        histogram one value per brick (none when it records nothing: a no-op or proxy
        instrument with no SDK behind it). Never raises."""
        try:
            with self._row_lock:
                self._row_batch += rows
                if len(self._row_batch) >= _ROW_BATCH:
                    self._hand_rows_locked()
        except Exception:
            self._failed()
        duration = self._duration
        if duration is not None and not duration.direct and _records_nothing(duration.instrument):
            duration = None  # each value would be one record() that does nothing
        sums: dict[tuple[str, str], tuple[int, int, int]] = {}
        values: list[tuple[int, str, str, ReadableSpan]] | None = [] if duration is not None else None
        try:
            if _fold_sums is None or not _fold_sums(spans, attributes, _SUM_KEYS, sums, values):
                self._fold_sums(spans, attributes, sums, values)
            if sums:
                self._totals.merge(sums)
            if values:
                exemplars, add = self._exemplars, duration.add
                for self_ns, name, category, span in values:  # with the span's context for an exemplar
                    add(name, category, self_ns, span.context if exemplars else None)
        except Exception:
            self._failed()

    def _hand_rows(self) -> None:
        """The rows fold_batch kept, into the table."""
        with self._row_lock:
            self._hand_rows_locked()

    def _hand_rows_locked(self) -> None:
        rows, self._row_batch = self._row_batch, []
        if rows:
            self._rows.add_records(rows)

    def _fold_sums(self, spans: list[Any], attributes: list[Any], sums: dict, values: list | None) -> None:
        """fold_batch's sums in Python (the reference of ``brickscope._hotpath.fold_sums``)."""
        for span, attrs in zip(spans, attributes):
            try:
                brick = _brick_figures(span, attrs)
                if brick is None:
                    continue
                name, category, self_ns, elements = brick
                key = (name, category)
                count, total, elems = sums.get(key, _ZERO)
                sums[key] = (count + 1, total + self_ns, elems + elements)
                if values is not None:
                    values.append((self_ns, name, category, span))
            except Exception:
                self._failed()

    def collect_unsampled_from(self, hand_over: Callable[[], None] | None) -> None:
        """Call ``hand_over`` (a pipeline's: it folds the unsampled bricks it holds into this
        aggregator, and never raises) at each metric collection, so the counters are exact
        when read; None stops it."""
        if self._hand_over is not None:
            self._totals.remove_collect_hook(self._hand_over)
        self._hand_over = hand_over
        if hand_over is not None:
            self._totals.add_collect_hook(hand_over)

    def fold_unsampled(
        self, sums: dict[tuple[str, str], tuple[int, int, int]], values: list[tuple[str, str, int]]
    ) -> None:
        """Fold bricks that produced no span (their trace or step was not sampled), in bulk:
        ``(name, category) -> (count, self ns, elements)``, exactly as sampled ones count;
        with ``duration_histogram="all"`` also each brick's ``(name, category, self ns)``
        into the histogram (no exemplar). The report does not keep them (no span). Never raises."""
        try:
            self.unsampled_bricks += sum(count for count, _, _ in sums.values())
            self._totals.merge(sums)
            if self.duration_histogram == "all":
                self._duration.add_many(values)
        except Exception:
            self._failed()

    def _failed(self) -> None:
        self.errors += 1
        if self.errors == 1:
            logger.exception("brickscope: CategoryAggregator could not fold a span")

    @property
    def dropped(self) -> int:
        """Spans not kept for the report because ``max_spans`` were already kept."""
        self._hand_rows()
        return self._rows.dropped

    def table(self, backend: str | None = None) -> Table:
        """The analysis table of the spans kept so far (a copy: folding goes on).

        Args:
            backend: ``"numpy"`` or ``"python"``; default numpy when installed.
        """
        self._hand_rows()
        return self._rows.build(backend=get_backend(backend))

    @property
    def bricks(self) -> dict[str, Stat]:
        """Per-brick-name self-time aggregates (every category the name was recorded with
        summed; per ``(name, category)`` figures are in :meth:`report` and the metrics)."""
        return self._stats("brick")

    @property
    def categories(self) -> dict[str, Stat]:
        """Per-category self-time aggregates: the engine's per-category figures."""
        return self._stats("category")

    @property
    def brick_category(self) -> dict[str, tuple[str, ...]]:
        """The categories each brick name was recorded with.

        One rule everywhere (report, metrics, :attr:`categories`): a span is credited to
        the category its scope was recorded with, so a name used under two categories is
        two operations, ``(name, category)``, and usually has one category here.
        """
        found: dict[str, tuple[str, ...]] = {}
        for op in self._operations("brick"):
            if op.kind == "brick" and op.category not in found.get(op.name, ()):
                found[op.name] = found.get(op.name, ()) + (op.category,)
        return found

    @property
    def clocks(self) -> set[str]:
        """The clocks of the spans seen (``host``, ``cuda``)."""
        from brickscope.analysis._table import CLOCKS

        self._hand_rows()
        table = self._rows.build(backend=PythonBackend())
        counts = table.backend.group_count(table["clock"], len(CLOCKS))
        return {name for name, count in zip(CLOCKS, counts) if count}

    def total_ns(self) -> int:
        """Sum of all brick self times: the denominator of every share."""
        return sum(stat.total_ns for stat in self.bricks.values())

    def report(self, format: str = "text", **options: Any) -> str:  # the natural name
        """The analysis of the spans kept (as ``brickscope report`` prints it), as ``"text"``,
        ``"markdown"`` or ``"json"``; ``options`` as :func:`brickscope.analysis.analyse`."""
        from brickscope.analysis import FORMATS, analyse, render

        if format not in FORMATS:  # before the work of analysing
            raise ValueError(f"brickscope: unknown report format {format!r}; expected one of {FORMATS}")
        return render(analyse(self.table(), **options), format)

    def reset(self) -> None:
        """Forget the spans kept so far (the metrics are cumulative counters: not reset)."""
        with self._row_lock:
            self._row_batch = []
            self._rows = TableBuilder(max_rows=self.max_spans)

    def _operations(self, kind: str) -> list[Any]:
        from brickscope.analysis import _operations

        table = self.table()
        return list(_operations.categories(table) if kind == "category" else _operations.operations(table))

    def _stats(self, kind: str) -> dict[str, Stat]:
        stats: dict[str, Stat] = {}
        for op in self._operations(kind):
            if op.kind != kind:
                continue
            stat = stats.setdefault(op.name, Stat())
            stat.min_ns = op.min_ns if not stat.count else min(stat.min_ns, op.min_ns)
            stat.max_ns = max(stat.max_ns, op.max_ns)
            stat.count += op.count
            stat.total_ns += op.self_ns
            stat.elements += op.elements
        return stats

    def shutdown(self) -> None:
        """Nothing buffered: totals are read at each collection."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """The span rows kept since the last hand-over (up to 2,048) go into the report's table
        now; the totals are never buffered. Never raises."""
        try:
            self._hand_rows()
        except Exception:
            self._failed()
        return True
