# SPDX-License-Identifier: Apache-2.0
"""Resolution: at a sync point, turn the recorder's ended records into spans, in order.

A record is resolved once its GPU end event has completed (or at once on the host
clock); a blocking sync waits for the GPU, a poll takes only the complete prefix.
Each resolved record is built into a span and handed downstream, pacing the SDK's
batch queues so one sync point cannot overflow them. Runs on whichever thread
reaches a sync point, under one lock. On an application thread a sync point that
resolved something becomes an ``overhead`` span of its own (``_overhead``), and the GC
pauses queued since the last sync point become ``gc`` spans.

Example::

    resolver.sync(block=True, timeout_millis=5000)   # what bs.sync() does
"""

from __future__ import annotations

import threading
import time
from time import thread_time_ns as _thread_time_ns
from typing import Any

from brickscope._clock import EPOCH_OFFSET_NS, perf_counter_ns
from brickscope._record import Record
from brickscope.sdk.trace._counters import Counters
from brickscope.sdk.trace._overhead import GcPauses, HostIntervals
from brickscope.sdk.trace._recorder import Recorder
from brickscope.sdk.trace._sdk import BATCH, SIMPLE, Downstream
from brickscope.sdk.trace._spans import SpanBuilder
from brickscope.sdk.trace._unsampled import UnsampledBricks
from brickscope.trace.attributes import (
    HOST_START_NS,
    SCOPE_KIND,
    SCOPE_KIND_STEP,
    STEP_NUMBER,
    STEP_THREAD_CPU_NS,
    THREAD_ID,
)

_get_ident = threading.get_ident
_PACE_EVERY = 128  # spans emitted between looks at the downstream queues
_PACE_BUDGET_S = 0.5  # most one sync point waits for downstream queues, in all
_PACE_HOLDOFF_S = 10.0  # after the budget ran out, no pacing for this long


class Resolver:
    """Resolves a recorder's pending records into spans for the downstream processors."""

    def __init__(
        self,
        recorder: Recorder,
        builder: SpanBuilder,
        downstream: Downstream,
        counters: Counters,
        unsampled: UnsampledBricks,
        handover_interval_s: float = 0.0,
        intervals: HostIntervals | None = None,
        gc_pauses: GcPauses | None = None,
    ) -> None:
        self._recorder = recorder
        #: Builds the overhead and gc spans (None: neither is made).
        self._intervals = intervals
        self._gc_pauses = gc_pauses
        #: The step number on the last span emitted (an overhead span's step).
        self._last_step: int | None = None
        #: Spans emitted from records (not counting overhead and gc spans), in all.
        self._resolved = 0
        self._unsampled = unsampled
        #: A non-blocking sync with nothing pending hands unsampled sums over at most this
        #: often (a step end need not: the metrics are read once per collection).
        self._handover_interval_s = handover_interval_s
        self._next_handover = 0.0
        self._builder = builder
        self._downstream = downstream
        self._counters = counters
        self._counts = counters.values
        self.lock = threading.RLock()
        #: The resolver thread's ident (its CPU time is counted apart), or None.
        self.worker_ident: int | None = None
        self._pace_holdoff = 0.0

    def sync(
        self, block: bool = True, timeout_millis: float | None = None, streams: tuple = (), overhead: bool = True
    ) -> bool:
        """Resolve pending records into spans and emit them.

        With ``block`` the GPU is waited for (up to ``timeout_millis``); without it
        only the already-complete prefix is resolved. Returns True when nothing is
        left pending. Never raises. On an application thread, a sync that resolved
        something is an ``overhead`` span of its own unless ``overhead`` is False (the
        brick and layer ends of ``immediate``/``per_layer``, whose waits are the mode's).
        """
        if not block and not self._recorder.pending and time.monotonic() < self._next_handover:
            return True  # nothing to resolve, and the sums were handed over a moment ago
        start = perf_counter_ns()
        try:
            with self.lock:
                cpu_start = _thread_time_ns()
                resolved = self._resolved
                try:
                    return self._sync(block, timeout_millis, streams)
                finally:  # self-telemetry: what resolving cost, on which thread
                    on_worker = _get_ident() == self.worker_ident
                    key = "resolution_cpu_ns_worker" if on_worker else "resolution_cpu_ns_app"
                    self._counts[key] += _thread_time_ns() - cpu_start
                    resolved = self._resolved - resolved
                    if resolved and overhead and not on_worker and self._intervals is not None:
                        self._record_overhead(self._intervals, start, resolved)
        except Exception:  # never into user code
            self._counters.log_once("sync", "brickscope: resolving pending scopes failed")
            return False

    def _record_overhead(self, intervals: HostIntervals, start: int, spans: int) -> None:
        """This sync point on the application thread, queued as an overhead interval; its span
        goes out with the next sync point's batch (so it costs no batch of its own, and is
        not itself measured)."""
        end = perf_counter_ns()
        self._counts["overhead_ns_app"] += end - start
        if intervals.record_overhead(start, end, spans, self._last_step):
            self._counts["overhead_spans"] += 1

    def _host_spans(self, intervals: HostIntervals, spans: list, attributes: list, rows: list, processors: tuple) -> int:
        """The overhead intervals and GC pauses queued since the last sync point, as spans at
        the head of this batch. Returns how many."""
        pauses = self._gc_pauses.take() if self._gc_pauses is not None else []
        added = 0
        for build, queued in ((intervals.overhead_span, intervals.take_overhead()), (intervals.gc_pause, pauses)):
            for item in queued:
                try:
                    span, attrs, row = build(item)
                except Exception:
                    self._build_failed(processors)
                    continue
                spans.append(span)
                attributes.append(attrs)
                rows.append(row)
                added += 1
        return added

    def _sync(self, block: bool, timeout_millis: float | None, streams: tuple) -> bool:
        self._counts["syncs"] += 1
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1e3
        if block and deadline is None and self._recorder.timer is not None:
            # Unbounded waits only when asked for (bs.sync() without a timeout); with a
            # deadline, _gpu_ready polls the records' end events instead.
            for stream in streams:
                if stream is not None:
                    self._synchronize(stream)
        return self._resolve(block, deadline)

    def emit_unresolved(self) -> None:
        """Emit whatever is still pending with host timing (shutdown, after a timed-out sync)."""
        with self.lock:
            pending = self._recorder.pending
            while pending:
                rec = pending.popleft()
                if rec.end_mark >= 0:
                    rec.gpu_error = "unresolved_at_shutdown"
                if not rec.sampled:
                    self._unsampled.fold(*self._builder.measure(rec))
                    continue
                try:
                    span, attributes, row = self._builder.build(rec)
                except Exception:
                    self._build_failed(self._downstream.processors())
                    continue
                self._downstream.emit_batch([span], [attributes], [row], self._downstream.processors())
                self._counts["spans_emitted"] += 1
            self._flush_unsampled(self._downstream.processors())

    def hand_over(self) -> None:
        """The unsampled bricks folded since the last batch go to the aggregators now (a
        metric collection asks). Skipped while a batch is in progress: it hands them over
        as it ends. Never raises."""
        if not self.lock.acquire(blocking=False):
            return
        try:
            self._flush_unsampled(self._downstream.processors())
        except Exception:  # never into the metric reader
            self._counters.log_once("hand_over", "brickscope: handing unsampled bricks to the metrics failed")
        finally:
            self.lock.release()

    def _flush_unsampled(self, processors: tuple) -> None:
        """End of a batch: the unsampled bricks folded since the last one go to the aggregators."""
        self._next_handover = time.monotonic() + self._handover_interval_s
        sums, values = self._unsampled.take()
        self._downstream.fold_unsampled(sums, values, processors)

    def _build_failed(self, processors: tuple) -> None:
        """A record that could not become a span: produced and dropped once per export
        pipeline it was meant for (once if there is none), counted, logged once."""
        pipelines = max(1, sum(1 for _, kind, _ in processors if kind in (SIMPLE, BATCH)))
        self._counts["span_build_errors"] += 1
        self._counts["spans_produced"] += pipelines
        self._counts["spans_dropped"] += pipelines
        self._counters.log_once("build", "brickscope: building a span failed; it is dropped")

    def _synchronize(self, stream: Any) -> None:
        """Wait for a stream (immediate/per_layer); a failure is left to the records to report."""
        try:
            self._recorder.timer.synchronize(stream)
        except Exception:
            self._counts["gpu_sync_errors"] += 1

    def _resolve(self, block: bool, deadline: float | None) -> bool:
        pending = self._recorder.pending
        timer = self._recorder.timer
        downstream = self._downstream
        emit_batch, build, processors = downstream.emit_batch, self._builder.build, downstream.processors()
        fold_unsampled, measure = self._unsampled.fold, self._builder.measure
        if block and timer is not None:
            try:
                timer.reanchor()  # a sync point: refresh the GPU-host time correlation
            except Exception:  # the records will meet the same fault and say so
                self._counts["reanchor_errors"] += 1
        queues = downstream.batch_queues() if time.monotonic() >= self._pace_holdoff else []
        pace_deadline = time.monotonic() + _PACE_BUDGET_S
        emitted = 0
        # Spans go downstream a batch of _PACE_EVERY at a time (each processor sees them in
        # order; the aggregator and the SDK's batch queue take a batch at once), and the
        # queues are looked at after each batch.
        spans: list[Any] = []
        attributes: list[Any] = []
        rows: list[Any] = []
        drain = self._builder.drain
        host = 0 if self._intervals is None else self._host_spans(self._intervals, spans, attributes, rows, processors)
        try:
            while pending:
                if drain is not None:  # the common records, in C, up to a batch
                    try:
                        drain(pending, spans, attributes, rows, _PACE_EVERY)
                    except Exception:  # the record it was building is out of pending: dropped, counted
                        self._build_failed(processors)
                        continue
                if pending and len(spans) < _PACE_EVERY:  # a record the C loop left (or each, without it)
                    rec = pending[0]
                    if rec.end_mark >= 0 and not self._gpu_ready(timer, rec, block, deadline):
                        return False
                    pending.popleft()
                    if not rec.sampled:  # an unsampled GPU-timed brick: metrics only
                        fold_unsampled(*measure(rec))
                        continue
                    try:
                        span, attrs, row = build(rec)
                    except Exception:  # a record that cannot become a span is dropped, counted
                        self._build_failed(processors)
                        continue
                    spans.append(span)
                    attributes.append(attrs)
                    rows.append(row)
                if len(spans) >= _PACE_EVERY:
                    if self._recorder.step_cpu_done:
                        self._add_step_cpu(attributes)
                    self._last_step = attributes[-1].get(STEP_NUMBER)
                    emit_batch(spans, attributes, rows, processors)
                    emitted += len(spans)
                    spans, attributes, rows = [], [], []
                    if queues and not downstream.pace(queues, pace_deadline):
                        queues = []  # the exporter is not keeping up: stop waiting for it
                        self._pace_holdoff = time.monotonic() + _PACE_HOLDOFF_S
            return True
        finally:
            if spans:  # the last batch, also when the GPU is not done with what follows
                if self._recorder.step_cpu_done:
                    self._add_step_cpu(attributes)
                self._last_step = attributes[-1].get(STEP_NUMBER)
                emit_batch(spans, attributes, rows, processors)
                emitted += len(spans)
            self._counts["spans_emitted"] += emitted
            self._resolved += emitted - host
            self._flush_unsampled(processors)

    def _add_step_cpu(self, attributes: list[dict[str, Any]]) -> None:
        """Put each ended step's thread CPU time on its span in this batch, before any
        processor sees it (a step is last among its scopes: looked for from the end)."""
        done = self._recorder.step_cpu_done
        for attrs in reversed(attributes):
            if attrs.get(SCOPE_KIND) == SCOPE_KIND_STEP:
                cpu = done.pop((attrs.get(THREAD_ID), attrs.get(HOST_START_NS, 0) - EPOCH_OFFSET_NS), None)
                if cpu is not None:
                    attrs[STEP_THREAD_CPU_NS] = cpu
                    if not done:
                        return

    def _gpu_ready(self, timer: Any, rec: Record, block: bool, deadline: float | None) -> bool:
        """Whether rec's end event has completed; waits when blocking. GPU faults mark the record."""
        try:
            marker = getattr(timer, "_marker", None)  # is_complete in C (brickscope._hotpath), or None
            complete = None if marker is None else marker.complete(rec.end_mark)
            if complete is None:
                complete = timer.is_complete(rec.end_mark)
            if complete:
                return True
            if not block:
                return False
            if deadline is None:
                timer.wait(rec.end_mark)
                return True
            pause = 0.00002
            while not timer.is_complete(rec.end_mark):
                if time.monotonic() >= deadline:
                    self._counts["sync_timeouts"] += 1
                    self._counters.warn_once(
                        "sync_timeout", "brickscope: a sync point stopped waiting for the GPU at its deadline; "
                        "the scopes not complete stay pending (stats()['sync_timeouts'])"
                    )
                    return False
                time.sleep(pause)
                pause = min(pause * 2, 0.0002)
            return True
        except Exception as exc:  # CudaError: the record falls back to host timing
            rec.gpu_error = getattr(exc, "code_name", type(exc).__name__)
            return True

    def forget_after_fork(self) -> None:
        """In a forked child: a fresh lock (the parent's may have been held at fork)."""
        self.lock = threading.RLock()
        self.worker_ident = None
