# SPDX-License-Identifier: Apache-2.0
"""GpuSyncSpanProcessor: records scopes cheaply, resolves their timing at sync points,
and emits them as ordinary ended spans through the TracerProvider's processors.

The OTel SDK freezes a span before any processor can add to it
(opentelemetry-python#5614), and an SDK span costs 7-11 us to create. So scopes
leave a compact :class:`~brickscope._record.Record` on the hot path; at a sync
point this processor resolves the timing (GPU events or the host clock) and
builds ``ReadableSpan`` objects directly (about 0.5 us each), with their real
parent ids and the provider's resource, then hands each one to every processor
of the provider, exactly as the SDK does when a span ends.

Example::

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    session = brickscope.configure(provider)       # installs GpuSyncSpanProcessor first
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections import deque
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, StaticSampler
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode

from brickscope import _otel_context, _record
from brickscope._clock import EPOCH_OFFSET_NS, perf_counter_ns
from brickscope._record import KIND_BRICK, KIND_KERNEL, KIND_LAYER, KIND_NAMES, KIND_STEP, Record
from brickscope.trace._aggregation import CategoryAggregator
from brickscope.trace.attributes import (
    BRICK_CATEGORY,
    BRICK_ELEMENTS,
    BRICK_NAME,
    BRICK_SELF_DURATION_NS,
    CLOCK,
    CLOCK_CUDA,
    CLOCK_HOST,
    GPU_DEVICE_ID,
    GPU_DURATION_NS,
    GPU_STREAM_ID,
    GPU_TIMING_ERROR,
    HOST_DURATION_NS,
    HOST_START_NS,
    KERNEL_NAME,
    LAYER_INDEX,
    SCOPE_KIND,
    STEP_NUMBER,
    THREAD_ID,
    THREAD_NAME,
)
from brickscope.version import __version__

logger = logging.getLogger(__name__)

#: Sync policies: when pending records are resolved into spans.
SYNC_MODES = ("immediate", "per_layer", "deferred", "none")

_SAMPLED = _otel_context.SAMPLED
_SCOPE_SPAN = _otel_context.ScopeSpan(_record.TOP.get)
_UNSET = Status(StatusCode.UNSET)
_PACE_EVERY = 128  # spans emitted between looks at the downstream queues
_PACE_BUDGET_S = 0.5  # most one sync point waits for downstream queues, in all
_PACE_HOLDOFF_S = 10.0  # after the budget ran out, no pacing for this long
_BLOCK = 1  # sync, waiting for the GPU
_POLL = 2  # sync what is already complete
_LATE = 3  # closed after shutdown: sync it at once
_INSTRUMENTATION_SCOPE = InstrumentationScope("brickscope", __version__)


class GpuSyncSpanProcessor(SpanProcessor):
    """Turns brickscope scopes into spans at sync points, with GPU or host timing.

    Install it first on the provider (``brickscope.configure`` does), so that the
    provider's ``force_flush`` and ``shutdown`` reach it before the exporters'.
    Its own ``on_start``/``on_end`` ignore other spans. Scope enter/exit run on
    the instrumented thread and never block (except ``immediate``/``per_layer``,
    whose whole point is to); resolution runs on whichever thread reaches a sync
    point, under a lock.

    Args:
        tracer_provider: the SDK provider whose resource, id generator, sampler
            and processors the emitted spans go through.
        sync_mode: ``"deferred"`` (resolve at ``sync()``, step end, flush: the
            default), ``"per_layer"``, ``"immediate"`` or ``"none"`` (host timing only).
        timer: a GPU timer (``brickscope._gpu.CudaTimer``) or None for the host clock.
        max_pending: ended records kept before a forced sync (overflow policy:
            force a blocking sync and count it; nothing is dropped).
        max_delay_millis: in deferred mode, resolve already-complete records
            without blocking once the oldest pending one is this old.
        propagate_context: make each open step, layer and brick the current OTel
            span, so spans user code starts inside it get it as their parent.
        time_kernels: GPU-time kernel scopes too (two more events per kernel).

    Raises:
        ValueError: unknown ``sync_mode`` or a non-positive bound.
        TypeError: ``tracer_provider`` is not an SDK ``TracerProvider``.

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        tracer_provider: TracerProvider,
        *,
        sync_mode: str = "deferred",
        timer: Any = None,
        max_pending: int = 16384,
        max_delay_millis: float = 1000.0,
        propagate_context: bool = True,
        time_kernels: bool = False,
    ) -> None:
        if not isinstance(tracer_provider, TracerProvider):
            raise TypeError(
                "brickscope: tracer_provider must be an opentelemetry.sdk.trace.TracerProvider, "
                f"got {type(tracer_provider).__name__}"
            )
        if sync_mode not in SYNC_MODES:
            raise ValueError(f"brickscope: unknown sync_mode {sync_mode!r}; expected one of {SYNC_MODES}")
        if not isinstance(max_pending, int) or max_pending < 1:
            raise ValueError(f"brickscope: max_pending must be a positive int, got {max_pending!r}")
        if not max_delay_millis > 0:
            raise ValueError(f"brickscope: max_delay_millis must be > 0, got {max_delay_millis!r}")
        self.sync_mode = sync_mode
        self.timer = None if sync_mode == "none" else timer
        self.clock = CLOCK_CUDA if self.timer is not None else CLOCK_HOST
        self.max_pending = max_pending
        self.propagate_context = propagate_context
        self.time_kernels = time_kernels
        # Which kinds get their own CUDA events (step, layer, brick, kernel). Steps and
        # layers have no stream of their own: their GPU interval is the extent of the
        # GPU-timed scopes inside them (see _build).
        self._gpu_timed = (False, False, True, time_kernels)
        self._provider = tracer_provider
        self._resource = tracer_provider.resource
        self._id_generator = tracer_provider.id_generator
        self._root_sampled = _static_root_decision(tracer_provider.sampler)
        self._max_delay_ns = int(max_delay_millis * 1e6)
        self._next_poll_ns = perf_counter_ns() + self._max_delay_ns
        self._pace_holdoff = 0.0
        self._pending: deque[Record] = deque()
        self._lock = threading.RLock()
        self._thread_names: dict[int, str] = {}
        self._stream_refs: dict[Any, Any] = {}
        self._shutdown = False
        self._warned: set[str] = set()
        self._counts = dict.fromkeys(
            (
                "scopes_unsampled",
                "spans_emitted",
                "syncs",
                "forced_syncs",
                "polls",
                "gpu_timing_errors",
                "processor_errors",
                "scope_errors",
                "misuse",
                "self_time_clamped",
                "reanchor_errors",
                "pacing_waits",
                "pacing_timeouts",
                "gpu_sync_errors",
                "closed_after_shutdown",
                "scope_repairs",
            ),
            0,
        )
        # What closing a scope of each kind (step, layer, brick, kernel) triggers.
        self._close_actions = {
            "immediate": (_BLOCK, _BLOCK, _BLOCK, 0),
            "per_layer": (_BLOCK, _BLOCK, 0, 0),
            "deferred": (_POLL, 0, 0, 0),
            "none": (_POLL, 0, 0, 0),
        }[sync_mode]

    # ---- hot path (scope enter / exit) ------------------------------------------

    def open(self, owner: Any, opener: Any = None) -> Record:
        """Push a new record for a scope entering on this thread/task. Never blocks.

        ``opener``: the object a ``with`` exit will look the record up by (None for
        token and decorator scopes, which keep the record themselves).
        """
        rec = Record()
        top = _record.TOP.get()
        current = _otel_context.current()
        if top is None or top.otel_context is not current:
            # Outermost scope, or user code started its own span since the scope below
            # opened: the parent is whatever OTel span is current.
            span = _otel_context.current_span(current)
            span_context = span.get_span_context() if span is not None else None
            if span_context is not None and span_context.is_valid:
                rec.trace_id = span_context.trace_id
                rec.sampled = span_context.trace_flags.sampled
            else:
                span_context = None
                rec.trace_id = trace_id = self._id_generator.generate_trace_id()
                rec.sampled = self._sample_root(trace_id, owner._name)
            rec.otel_parent = span_context
            rec.parent = None
            if self.propagate_context and owner._propagates:
                current = _otel_context.with_span(current, _SCOPE_SPAN)
                rec.context_token = _otel_context.attach(current)
            else:
                rec.context_token = None
        else:
            rec.trace_id = top.trace_id
            rec.sampled = top.sampled
            rec.otel_parent = None
            rec.parent = top
            rec.context_token = None
        rec.otel_context = current
        rec.owner = owner
        rec.opener = opener
        rec.recorder = self
        rec.link = top
        rec.span_id = 0
        rec.span_context = None
        rec.thread_id = tid = threading.get_ident()
        if tid not in self._thread_names:
            self._thread_names[tid] = threading.current_thread().name
        rec.ended = False
        rec.error = None
        rec.gpu_error = None
        rec.nested_ns = 0
        rec.enclosing = None
        rec.gpu_first = rec.gpu_last = 0
        _record.TOP.set(rec)
        timer = self.timer
        if timer is not None and rec.sampled and self._gpu_timed[owner._kind] and not owner._host_only:
            try:
                rec.stream = stream = self._stream_of(owner, top)
            except Exception as exc:  # e.g. the driver failing to set up the stream's context
                rec.stream = None
                rec.start_mark = -1
                rec.gpu_error = getattr(exc, "code_name", type(exc).__name__)
            else:
                rec.start_mark = mark = timer.mark(stream)
                if mark < 0:
                    rec.gpu_error = "mark_failed"
        else:
            rec.stream = None
            rec.start_mark = -1
        rec.end_mark = -1
        rec.host_start = perf_counter_ns()
        return rec

    def _stream_of(self, owner: Any, top: Record | None) -> Any:
        """The timer's StreamRef for a scope: its own stream, else the enclosing scope's."""
        stream = owner._stream
        if stream is None and top is not None and top.stream is not None:
            return top.stream
        try:
            return self._stream_refs[stream]
        except KeyError:
            ref = self._stream_refs[stream] = self.timer.stream_ref(stream)
        except TypeError:  # an unhashable stream object
            ref = self.timer.stream_ref(stream)
        return ref

    def close(self, rec: Record, error: BaseException | None) -> None:
        """Pop ``rec`` and queue it for resolution; a sync point if the policy says so."""
        end = perf_counter_ns()
        if rec.start_mark >= 0:
            rec.end_mark = self.timer.mark(rec.stream)
        rec.host_end = end
        rec.ended = True
        if _record.TOP.get() is rec:  # the innermost open scope: the usual, LIFO case
            if rec.context_token is not None:
                _release_context(rec)
            below = rec.link
            while below is not None and below.ended:  # scopes ended out of order surface now
                if below.context_token is not None:
                    _release_context(below)
                below = below.link
            _record.TOP.set(below)
        else:
            self._counts["scope_repairs"] += 1
            _repair_stack(rec)
        if error is not None:
            rec.error = _describe(error)
        if not rec.sampled:
            self._counts["scopes_unsampled"] += 1
            return
        pending = self._pending
        pending.append(rec)
        action = self._close_actions[rec.owner._kind]
        if action:
            if action == _LATE:
                self._counts["closed_after_shutdown"] += 1
            self.sync(block=action != _POLL, streams=(rec.stream,))
        elif len(pending) >= self.max_pending:
            self._counts["forced_syncs"] += 1
            self.sync(block=True)
        elif end >= self._next_poll_ns:
            self._counts["polls"] += 1
            self._next_poll_ns = end + self._max_delay_ns
            self.sync(block=False)

    def _sample_root(self, trace_id: int, name: str) -> bool:
        if self._root_sampled is not None:
            return self._root_sampled
        result = self._provider.sampler.should_sample(None, trace_id, name, SpanKind.INTERNAL)
        return result.decision == Decision.RECORD_AND_SAMPLE

    # ---- resolution ------------------------------------------------------------

    def sync(self, block: bool = True, timeout_millis: float | None = None, streams: tuple = ()) -> bool:
        """Resolve pending records into spans and emit them.

        With ``block`` the GPU is waited for (up to ``timeout_millis``); without it
        only the already-complete prefix is resolved. Returns True when nothing is
        left pending. Never raises.
        """
        try:
            with self._lock:
                self._counts["syncs"] += 1
                deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1e3
                if block and self.timer is not None:
                    for stream in streams:
                        if stream is not None:
                            self._synchronize(stream)
                return self._resolve(block, deadline)
        except Exception:  # never into user code
            self._log_once("sync", "brickscope: resolving pending scopes failed")
            return False

    def _synchronize(self, stream: Any) -> None:
        """Wait for a stream (immediate/per_layer); a failure is left to the records to report."""
        try:
            self.timer.synchronize(stream)
        except Exception:
            self._counts["gpu_sync_errors"] += 1

    def _resolve(self, block: bool, deadline: float | None) -> bool:
        pending = self._pending
        timer = self.timer
        emit, build, processors = self._emit, self._build, self._downstream()
        if block and timer is not None:
            try:
                timer.reanchor()  # a sync point: refresh the GPU-host time correlation
            except Exception:  # the records will meet the same fault and say so
                self._counts["reanchor_errors"] += 1
        queues = _batch_queues(self._provider) if time.monotonic() >= self._pace_holdoff else []
        pace_deadline = time.monotonic() + _PACE_BUDGET_S
        emitted = 0
        try:
            while pending:
                rec = pending[0]
                if rec.end_mark >= 0 and not self._gpu_ready(rec, block, deadline):
                    return False
                pending.popleft()
                emit(build(rec), processors)
                emitted += 1
                if queues and emitted % _PACE_EVERY == 0 and not self._pace(queues, pace_deadline):
                    queues = []  # the exporter is not keeping up: stop waiting for it
                    self._pace_holdoff = time.monotonic() + _PACE_HOLDOFF_S
            return True
        finally:
            self._counts["spans_emitted"] += emitted

    def _pace(self, queues: list[Any], deadline: float) -> bool:
        """Let BatchSpanProcessors drain before their queues overflow (they drop when full).

        A sync point can release thousands of spans at once; the SDK's default queue
        holds 2048. When a queue is three-quarters full, wake its worker and wait
        until it is half empty, but never past ``deadline`` (``_PACE_BUDGET_S`` per
        sync point). Returns False when that budget ran out: the exporter is stuck
        (a receiver gone), and the caller stops pacing for ``_PACE_HOLDOFF_S``, so
        the application is never held up for long; the BatchSpanProcessor's own
        drop counter says what it shed. Waits are counted in ``pacing_waits``.
        """
        for batch in queues:
            queue, capacity = batch._queue, batch._max_queue_size  # noqa: SLF001
            if len(queue) * 4 < capacity * 3:
                continue
            self._counts["pacing_waits"] += 1
            batch._worker_awaken.set()  # noqa: SLF001
            while len(queue) * 2 > capacity:
                if time.monotonic() >= deadline:
                    self._counts["pacing_timeouts"] += 1
                    return False
                time.sleep(0.0005)
        return True

    def _gpu_ready(self, rec: Record, block: bool, deadline: float | None) -> bool:
        """Whether rec's end event has completed; waits when blocking. GPU faults mark the record."""
        timer = self.timer
        try:
            if timer.is_complete(rec.end_mark):
                return True
            if not block:
                return False
            if deadline is None:
                timer.wait(rec.end_mark)
                return True
            while not timer.is_complete(rec.end_mark):
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.0001)
            return True
        except Exception as exc:  # CudaError: the record falls back to host timing
            rec.gpu_error = getattr(exc, "code_name", type(exc).__name__)
            return True

    def _gpu_interval(self, rec: Record) -> tuple[int, int] | None:
        """(start, end) epoch ns of rec's GPU work, or None with rec.gpu_error set.
        Releases rec's events either way."""
        timer = self.timer
        try:
            if rec.end_mark < 0:
                rec.gpu_error = rec.gpu_error or "mark_failed"
            elif rec.gpu_error is None:
                start = timer.host_time_ns(rec.start_mark)
                return start, start + timer.elapsed_ns(rec.start_mark, rec.end_mark)
        except Exception as exc:
            rec.gpu_error = getattr(exc, "code_name", type(exc).__name__)
        finally:
            timer.release(rec.start_mark)
            timer.release(rec.end_mark)
        return None

    def _build(self, rec: Record) -> tuple[ReadableSpan, dict[str, Any]]:
        """The ended span for a resolved record, and its attributes (a plain dict)."""
        owner = rec.owner
        kind = owner._kind
        host_start = rec.host_start + EPOCH_OFFSET_NS
        host_duration = rec.host_end - rec.host_start
        attributes: dict[str, Any] = {
            SCOPE_KIND: KIND_NAMES[kind],
            HOST_START_NS: host_start,
            HOST_DURATION_NS: host_duration,
            THREAD_ID: rec.thread_id,
            THREAD_NAME: self._thread_names.get(rec.thread_id, ""),
        }
        start, end = host_start, host_start + host_duration
        clock = CLOCK_HOST
        if rec.start_mark >= 0:
            interval = self._gpu_interval(rec)
            if interval is not None:
                start, end = interval
                clock = CLOCK_CUDA
                attributes[GPU_DURATION_NS] = end - start
                attributes[GPU_DEVICE_ID] = rec.stream.device
                attributes[GPU_STREAM_ID] = rec.stream.handle
        elif rec.gpu_first:
            # A step or layer: the extent of the GPU work timed inside it.
            start, end = rec.gpu_first, rec.gpu_last
            clock = CLOCK_CUDA
            attributes[GPU_DURATION_NS] = end - start
        if clock == CLOCK_CUDA and rec.link is not None:
            _widen_extent(rec.link, start, end)
        if rec.gpu_error is not None:
            attributes[GPU_TIMING_ERROR] = rec.gpu_error
            self._counts["gpu_timing_errors"] += 1
        attributes[CLOCK] = clock
        brick, layer_index, step_number = _enclosing(rec)
        if brick is not None:
            attributes[BRICK_NAME] = brick.name
            attributes[BRICK_CATEGORY] = brick.category
        if layer_index is not None:
            attributes[LAYER_INDEX] = layer_index
        if step_number is not None:
            attributes[STEP_NUMBER] = step_number
        if kind == KIND_BRICK:
            attributes[BRICK_SELF_DURATION_NS] = self._self_time(rec, end - start)
            if owner._elements:
                attributes[BRICK_ELEMENTS] = owner._elements
        elif kind == KIND_KERNEL:
            attributes[KERNEL_NAME] = owner._name
        if owner._attributes:
            attributes.update(owner._attributes)

        parent = rec.parent
        parent_context = self._span_context(parent) if parent is not None else rec.otel_parent
        events: tuple[Event, ...] = ()
        status = _UNSET
        if rec.error is not None:
            type_name, message, stacktrace = rec.error
            events = (
                Event(
                    "exception",
                    {
                        "exception.type": type_name,
                        "exception.message": message,
                        "exception.stacktrace": stacktrace,
                        "exception.escaped": True,
                    },
                    timestamp=rec.host_end + EPOCH_OFFSET_NS,
                ),
            )
            status = Status(StatusCode.ERROR, f"{type_name}: {message}")
        span = ReadableSpan(
            name=owner._name,
            context=self._span_context(rec),
            parent=parent_context,
            resource=self._resource,
            attributes=attributes,
            events=events,
            kind=SpanKind.INTERNAL,
            status=status,
            start_time=start,
            end_time=end,
            instrumentation_scope=_INSTRUMENTATION_SCOPE,
        )
        return span, attributes

    def _span_context(self, rec: Record) -> SpanContext:
        """rec's SpanContext, made once: siblings share their parent's."""
        context = rec.span_context
        if context is None:
            span_id = _otel_context.assign_span_id(rec, self._id_generator)
            context = rec.span_context = _otel_context.sampled_context(rec.trace_id, span_id)
        return context

    def _self_time(self, rec: Record, duration: int) -> int:
        """rec's duration minus its nested bricks'; credits rec to its enclosing brick.

        The scope stack, not the OTel parent, decides nesting, so a brick nested
        through a user span is still subtracted. Children resolve before parents.
        """
        enclosing = rec.link
        while enclosing is not None and enclosing.owner._kind != KIND_BRICK:
            enclosing = enclosing.link
        if enclosing is not None:
            enclosing.nested_ns += duration
        self_ns = duration - rec.nested_ns
        if self_ns < 0:  # nested bricks overlapped on several streams
            self._counts["self_time_clamped"] += 1
            self_ns = 0
        return self_ns

    def _emit(self, built: tuple[ReadableSpan, dict[str, Any]], processors: tuple | None = None) -> None:
        """Hand an ended span to every processor of the provider (but this one), isolating
        their faults. ``processors``: from :meth:`_downstream`, looked up once per batch.

        A CategoryAggregator gets the attributes dict we just built along with the span,
        sparing it a read-only view and six lookups through it per span.
        """
        span, attributes = built
        if processors is None:
            processors = self._downstream()
        for processor, aggregator in processors:
            try:
                if aggregator:
                    processor.fold(span, attributes)
                else:
                    processor.on_end(span)
            except Exception:  # opentelemetry-python#5624: never let one reach the app
                self._counts["processor_errors"] += 1
                self._log_once(f"on_end:{type(processor).__name__}", "brickscope: a span processor failed")

    def _downstream(self) -> tuple[tuple[SpanProcessor, bool], ...]:
        """The provider's processors other than this one, in order, each with whether
        it is a CategoryAggregator (fed through its ``fold`` fast path)."""
        return tuple(
            (p, isinstance(p, CategoryAggregator)) for p in _provider_processors(self._provider) if p is not self
        )

    # ---- SpanProcessor ---------------------------------------------------------

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        """Other instrumentation's spans: nothing to do."""

    def on_end(self, span: ReadableSpan) -> None:
        """Other instrumentation's spans: nothing to do."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Resolve and emit everything pending, waiting for the GPU up to the timeout."""
        return self.sync(block=True, timeout_millis=timeout_millis)

    def shutdown(self, timeout_millis: int = 30000) -> None:
        """Flush, then emit anything still unresolved with host timing; idempotent."""
        if self._shutdown:
            return
        self._shutdown = True
        # Scopes still open now (brickscope reconfigured or shut down mid-scope) are
        # resolved one by one as they close, into the provider, instead of waiting
        # for a sync point that will not come.
        self._close_actions = (_LATE,) * 4
        if not self.sync(block=True, timeout_millis=timeout_millis):
            with self._lock:
                while self._pending:
                    rec = self._pending.popleft()
                    if rec.end_mark >= 0:
                        rec.gpu_error = "unresolved_at_shutdown"
                    self._emit(self._build(rec))
                    self._counts["spans_emitted"] += 1
        if self.timer is not None:
            try:
                self.timer.close()
            except Exception:
                self._log_once("timer_close", "brickscope: closing the GPU timer failed")

    # ---- introspection -----------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counters of everything this processor did: recorded, emitted, forced syncs, errors..."""
        counts = dict(self._counts)
        counts["pending"] = len(self._pending)
        return counts

    def count(self, what: str) -> None:
        """Count one event of ``what`` (scopes use it for misuse and internal errors)."""
        self._counts[what] = self._counts.get(what, 0) + 1

    def _forget_after_fork(self) -> None:
        """In a forked child: drop the parent's pending scopes and its CUDA state (CUDA
        does not survive fork); the child times on the host clock."""
        self._pending = deque()
        self._lock = threading.RLock()
        if self.timer is not None:
            self.timer = None
            self.clock = CLOCK_HOST

    def _log_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.exception(message)


def _provider_processors(provider: TracerProvider) -> tuple:
    """The provider's processors in order (the SDK keeps them in a private tuple)."""
    return provider._active_span_processor._span_processors  # noqa: SLF001


def _batch_queues(provider: TracerProvider) -> list[Any]:
    """The SDK batch processors (their private BatchProcessor) among the provider's processors."""
    return [
        processor._batch_processor  # noqa: SLF001 - the queue has no public view
        for processor in _provider_processors(provider)
        if isinstance(processor, BatchSpanProcessor) and hasattr(processor, "_batch_processor")
    ]


def _static_root_decision(sampler: Any) -> bool | None:
    """The decision for a root span when the sampler's answer cannot depend on the span."""
    if isinstance(sampler, ParentBased):
        sampler = sampler._root  # noqa: SLF001
    if isinstance(sampler, StaticSampler):
        return sampler._decision == Decision.RECORD_AND_SAMPLE  # noqa: SLF001
    return None


def _release_context(rec: Record) -> None:
    """Detach the OTel context ``rec`` attached on open.

    Called when rec leaves the top of its stack, so every context attached after
    it has been detached (LIFO) unless user code leaked one. From another
    ``contextvars.Context`` (a task or thread other than the opener) the token
    cannot be reset: it stays on the record, for the opening context to reset
    when the record surfaces there.
    """
    try:
        _otel_context.detach(rec.context_token)
    except ValueError:  # another Context: left for the one that attached it
        return
    except RuntimeError:  # already reset
        pass
    rec.context_token = None


def _repair_stack(rec: Record) -> None:
    """``rec`` ended but is not the innermost open scope of this context.

    Records at the top that were ended from another context surface first (and
    release their OTel context). If rec is then innermost it leaves as usual;
    otherwise it stays linked below the scopes still open, marked ended: they
    keep it as their parent, new scopes never get it, and its OTel context is
    released when it surfaces (when the scopes above it have ended).
    """
    top = _record.TOP.get()
    while top is not None and top.ended and top is not rec:
        if top.context_token is not None:
            _release_context(top)
        top = top.link
    if top is rec:
        if rec.context_token is not None:
            _release_context(rec)
        top = rec.link
        while top is not None and top.ended:
            if top.context_token is not None:
                _release_context(top)
            top = top.link
    _record.TOP.set(top)


def _widen_extent(rec: Record, start: int, end: int) -> None:
    """Grow the GPU extent of ``rec`` (a scope around GPU-timed work) to cover [start, end]."""
    if not rec.gpu_first or start < rec.gpu_first:
        rec.gpu_first = start
    if end > rec.gpu_last:
        rec.gpu_last = end


def _enclosing(rec: Record) -> tuple[Any, int | None, int | None]:
    """(brick info, layer index, step number) of rec or the nearest scopes around it.

    Memoised on each record, so siblings share their ancestors' answer.
    """
    found = rec.enclosing
    if found is None:
        brick, layer_index, step_number = _enclosing(rec.link) if rec.link is not None else (None, None, None)
        owner = rec.owner
        kind = owner._kind
        if kind == KIND_BRICK:
            brick = owner.brick_info()
        elif kind == KIND_LAYER:
            layer_index = owner._index
        elif kind == KIND_STEP:
            step_number = owner._index
        found = rec.enclosing = (brick, layer_index, step_number)
    return found


def _describe(error: BaseException) -> tuple[str, str, str]:
    """exception.type / .message / .stacktrace for the exception event."""
    stacktrace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return type(error).__qualname__, str(error), stacktrace
