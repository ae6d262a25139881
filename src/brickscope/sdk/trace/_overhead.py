# SPDX-License-Identifier: Apache-2.0
"""Intervals that are not the user's work: brickscope's own, and the garbage collector's.

Two kinds of span, built here so that a trace shows where the application thread's time
went besides the scopes it marked (``docs/semantic-conventions.md``, "Overhead and GC"):

- ``overhead`` (:meth:`HostIntervals.record_overhead`): one span per sync point that
  resolved something on an application thread: from entering the sync (its lock wait
  included) to the last span handed to the processors (inline exports included). A child
  of the span it ran in; the nearest enclosing brick on the scope stack is credited with it
  like a nested brick, so brick self times and metrics leave it out. Queued, and built and
  emitted at the head of the next sync point's batch: it costs no batch of its own and is
  not itself measured.
- ``gc`` (:class:`GcPauses`): a Python collection that ran while the collecting thread
  had an open, sampled scope; queued by ``gc.callbacks`` (two list operations a
  collection) and built at the next sync point, a child of that scope.

Example::

    intervals = HostIntervals(provider, recorder)
    intervals.record_overhead(start_ns, end_ns, spans=128, step=3)   # at the end of a sync point
    built = [intervals.overhead_span(i) for i in intervals.take_overhead()]   # at the next one
"""

from __future__ import annotations

import gc
import threading
from collections import deque
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind

from brickscope import _otel_context, _record
from brickscope._clock import EPOCH_OFFSET_NS, perf_counter_ns
from brickscope._record import KIND_BRICK, KIND_STEP, Record
from brickscope.sdk.trace._spans import INSTRUMENTATION_SCOPE, SPAN_TYPE
from brickscope.trace.attributes import (
    CLOCK,
    CLOCK_HOST,
    GC_COLLECTED,
    GC_GENERATION,
    GC_SPAN_NAME,
    HOST_DURATION_NS,
    HOST_START_NS,
    OVERHEAD_SPAN_NAME,
    OVERHEAD_SPANS,
    SCOPE_KIND,
    SCOPE_KIND_GC,
    SCOPE_KIND_OVERHEAD,
    STEP_NUMBER,
    THREAD_ID,
    THREAD_NAME,
)

_get_ident = threading.get_ident
#: (thread id, thread name) of the thread an interval ran on, taken when it is queued: by the
#: time its span is built the thread may have ended and its id gone to another thread.
_Thread = tuple[int, str]


def _thread(recorder: Any) -> _Thread:
    """The current thread's id and the name the recorder knows it by."""
    tid = _get_ident()
    return tid, recorder.thread_names.get(tid, "")
#: GC pauses queued between two sync points at most; more are counted in ``gc_pauses_shed``.
GC_QUEUE = 4096


class HostIntervals:
    """Builds overhead and gc spans for one recorder's provider."""

    def __init__(self, tracer_provider: Any, recorder: Any) -> None:
        self._provider = tracer_provider
        self._recorder = recorder
        self._id_generator = tracer_provider.id_generator
        self._overhead: list[tuple[int, int, int, int | None, SpanContext | None, _Thread]] = []

    def record_overhead(self, start: int, end: int, spans: int, step: int | None) -> bool:
        """Queue a sync point of this thread (``start``/``end`` on ``perf_counter_ns``; ``spans``
        it resolved, ``step`` the step number of the last of them) for :meth:`take_overhead`,
        with the span it ran in as parent. False when that span is not sampled (nothing queued).

        Credits the nearest enclosing brick on the scope stack with the interval, so that
        brick's self time leaves it out (as for a nested brick)."""
        duration = end - start
        enclosing = _record.TOP.get()
        while enclosing is not None and enclosing.owner._kind != KIND_BRICK:
            enclosing = enclosing.link
        if enclosing is not None:
            enclosing.nested_ns += duration
        current = trace.get_current_span().get_span_context()
        if current.is_valid and not current.trace_flags.sampled:
            return False
        self._overhead.append((start, end, spans, step, current if current.is_valid else None, _thread(self._recorder)))
        return True

    def take_overhead(self) -> list[tuple[int, int, int, int | None, SpanContext | None, _Thread]]:
        """The overhead intervals queued since the last call, oldest first."""
        queued, self._overhead = self._overhead, []
        return queued

    def overhead_span(
        self, interval: tuple[int, int, int, int | None, SpanContext | None, _Thread]
    ) -> tuple[ReadableSpan, dict, tuple]:
        """The span of a queued overhead interval (a root span when it ran outside any)."""
        start, end, spans, step, parent, thread = interval
        trace_id = parent.trace_id if parent is not None else self._id_generator.generate_trace_id()
        extra: dict[str, Any] = {OVERHEAD_SPANS: spans}
        if step is not None:
            extra[STEP_NUMBER] = step
        return self._build(OVERHEAD_SPAN_NAME, SCOPE_KIND_OVERHEAD, start, end - start, trace_id, parent, thread, extra)

    def gc_pause(self, pause: tuple[int, int, Record, int, int, _Thread]) -> tuple[ReadableSpan, dict, tuple]:
        """The span of a queued GC pause (see :class:`GcPauses`), a child of its scope."""
        start, end, scope, generation, collected, thread = pause
        span_id = _otel_context.assign_span_id(scope, self._id_generator)
        parent = _otel_context.sampled_context(scope.trace_id, span_id)
        extra: dict[str, Any] = {GC_GENERATION: generation, GC_COLLECTED: collected}
        step: Record | None = scope
        while step is not None and step.owner._kind != KIND_STEP:
            step = step.link
        if step is not None:
            extra[STEP_NUMBER] = step.owner._index
        return self._build(GC_SPAN_NAME, SCOPE_KIND_GC, start, end - start, scope.trace_id, parent, thread, extra)

    def _build(
        self, name: str, kind: str, start: int, duration: int, trace_id: int, parent: SpanContext | None,
        thread: _Thread, extra: dict[str, Any],
    ) -> tuple[ReadableSpan, dict, tuple]:  # fmt: skip
        start += EPOCH_OFFSET_NS
        attributes: dict[str, Any] = {
            SCOPE_KIND: kind,
            HOST_START_NS: start,
            HOST_DURATION_NS: duration,
            THREAD_ID: thread[0],
            THREAD_NAME: thread[1],
            CLOCK: CLOCK_HOST,
            **extra,
        }
        context = _otel_context.sampled_context(trace_id, self._id_generator.generate_span_id())
        resource = self._provider.resource
        span = SPAN_TYPE(
            name=name,
            context=context,
            parent=parent,
            resource=resource,
            attributes=attributes,
            kind=SpanKind.INTERNAL,
            start_time=start,
            end_time=start + duration,
            instrumentation_scope=INSTRUMENTATION_SCOPE,
        )
        parent_id = parent.span_id if parent is not None else 0
        return span, attributes, (name, start, start + duration, context.span_id, parent_id, resource, attributes)


class GcPauses:
    """Python GC pauses inside open, sampled scopes, through ``gc.callbacks``.

    Every collection is counted (``gc_pauses``, ``gc_pause_ns`` in ``stats()``); one that
    starts while the collecting thread's innermost open scope is sampled (and this
    recorder's) is queued as
    ``(start, end, scope, generation, collected, thread id)`` for :meth:`take`. Installed
    with :meth:`install`, removed with :meth:`remove` (shutdown).
    """

    def __init__(self, counts: dict[str, int], recorder: Any) -> None:
        self._counts = counts
        self._recorder = recorder  # pauses in scopes of another recorder are not ours
        self._queue: deque[tuple[int, int, Record, int, int, _Thread]] = deque()
        self._start = 0
        self._scope: Record | None = None

    def install(self) -> None:
        """Start watching: the callback joins ``gc.callbacks`` (once)."""
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def remove(self) -> None:
        """Stop watching (shutdown); what is queued stays for the last sync point."""
        try:
            gc.callbacks.remove(self._callback)
        except ValueError:
            pass

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        """``gc.callbacks``: runs on the collecting thread, with the GIL, around the pause."""
        if phase == "start":
            self._scope = _record.TOP.get()
            self._start = perf_counter_ns()
            return
        end = perf_counter_ns()
        scope, self._scope = self._scope, None
        counts = self._counts
        counts["gc_pauses"] += 1
        counts["gc_pause_ns"] += end - self._start
        if scope is None or not scope.sampled or scope.recorder is not self._recorder:
            return
        if len(self._queue) >= GC_QUEUE:
            counts["gc_pauses_shed"] += 1
            return
        self._queue.append(
            (self._start, end, scope, info.get("generation", 0), info.get("collected", 0), _thread(self._recorder))
        )

    def take(self) -> list[tuple[int, int, Record, int, int, _Thread]]:
        """The pauses queued since the last call, oldest first."""
        queue = self._queue
        out = []
        while queue:
            out.append(queue.popleft())
        return out
