# SPDX-License-Identifier: Apache-2.0
"""The recorder: the hot path. Scope enter pushes a compact record; scope exit pops it
and queues it for resolution. Nothing here builds a span or waits, except the sync
points the sync policy asks for (and a forced sync when too much is pending).

The stack of open scopes is a linked list of records per thread or asyncio task
(``_record.TOP``). Exits are matched by record, so a scope may end while scopes
opened inside it are still open: the stack is repaired around it (see
:func:`_repair_stack`) and the repair counted.

Example::

    rec = recorder.open(scope)      # what ``with bs.brick(...)`` does on enter
    recorder.close(rec, None)       # ... and on exit
"""

from __future__ import annotations

import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import SpanKind

from brickscope import _otel_context, _record
from brickscope._clock import perf_counter_ns
from brickscope._record import KIND_BRICK, KIND_STEP, Record
from brickscope.sdk._otel_internals import static_root_decision
from brickscope.sdk.trace._counters import Counters
from brickscope.trace.attributes import CLOCK_CUDA, CLOCK_HOST

_SCOPE_SPAN = _otel_context.ScopeSpan(_record.TOP.get)
# Bound once: each saves an attribute lookup or two per scope on the hot path.
_top, _set_top = _record.TOP.get, _record.TOP.set
_current_context, _with_span, _attach = _otel_context.current, _otel_context.with_span, _otel_context.attach
_get_ident = threading.get_ident
_thread_time_ns = time.thread_time_ns
_new_record = object.__new__
_hotpath = _record.hotpath
_NEVER = 1 << 62  # a perf_counter_ns no poll is due before
BLOCK = 1  # close triggers a sync, waiting for the GPU
POLL = 2  # close triggers a sync of what is already complete
LATE = 3  # closed after shutdown: sync it at once
WAKE = 4  # close wakes the resolver thread if records are pending (resolver="thread"); nothing else
#: What closing a scope of each kind (step, layer, brick, kernel) triggers, per sync mode.
CLOSE_ACTIONS = {
    "immediate": (BLOCK, BLOCK, BLOCK, 0),
    "per_layer": (BLOCK, BLOCK, 0, 0),
    "deferred": (POLL, 0, 0, 0),
    "none": (POLL, 0, 0, 0),
}


#: Per thread: a _ThreadEnd for each recorder that named the thread. The thread's locals are
#: dropped when it ends, before the OS can give its id to another thread.
_thread_ends = threading.local()


class _ThreadEnd:
    """Tells a recorder that a thread it named has ended (when the thread's locals are dropped),
    so that a new thread given the same id by the OS is not reported under the old name."""

    __slots__ = ("recorder", "tid")

    def __init__(self, recorder: Recorder, tid: int) -> None:
        self.recorder = weakref.ref(recorder)  # a thread-local must not keep a recorder alive
        self.tid = tid

    def __del__(self) -> None:
        recorder = self.recorder()
        if recorder is not None:
            recorder.forget_thread(self.tid)


class _PyRecording:
    """Recorder.open/close in pure Python: the reference implementation.

    ``brickscope._hotpath.RecorderCore`` is the same in C (the common path of a nested
    scope; everything else calls the helpers of :class:`Recorder` below, which both share).
    """

    __slots__ = ()

    def open(self: Recorder, owner: Any, opener: Any = None) -> Record:  # type: ignore[misc]
        """Push a new record for a scope entering on this thread/task. Never blocks.

        ``opener``: the object a ``with`` exit will look the record up by (None for
        token and decorator scopes, which keep the record themselves).
        """
        rec = _new_record(Record)
        top = _top()
        current = _current_context()
        if top is None or top.otel_context is not current:
            # Outermost scope, or user code started its own span since the scope below
            # opened: the parent is whatever OTel span is current.
            current = self._open_root(rec, owner, current)
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
        rec.thread_id = tid = _get_ident()
        try:
            rec.thread_name = self.thread_names[tid]
        except KeyError:
            rec.thread_name = self._name_thread(tid)
        rec.ended = False
        rec.error = None
        rec.gpu_error = None
        rec.nested_ns = 0
        rec.enclosing = rec.notes = None
        rec.gpu_first = rec.gpu_last = 0
        _set_top(rec)
        if self.timer is not None:
            self._open_gpu(rec, owner, top)
        else:
            rec.stream = None
            rec.start_mark = -1
        rec.end_mark = -1
        rec.host_start = perf_counter_ns()
        return rec

    def forget_thread(self, tid: int) -> None:
        """The thread with this id ended: the OS may give the id to a new thread, which must
        not inherit the name (its first scope names it afresh)."""
        self.thread_names.pop(tid, None)

    def flush_counts(self) -> None:
        """Counts kept aside are added to the counters' dict (the C recorder keeps
        ``scopes_unsampled`` in C until then; here every count goes to the dict at once)."""

    def close(self: Recorder, rec: Record, error: BaseException | None) -> None:  # type: ignore[misc]
        """Pop ``rec`` and queue it for resolution; a sync point if the policy says so."""
        end = perf_counter_ns()
        if rec.start_mark >= 0:
            self._mark_end(rec)
        rec.host_end = end
        rec.ended = True
        rec.opener = None  # only open records are looked up; and no entry <-> record cycle
        if _top() is rec:  # the innermost open scope: the usual, LIFO case
            if rec.context_token is not None:
                _release_context(rec)
            below = rec.link
            while below is not None and below.ended:  # scopes ended out of order surface now
                if below.context_token is not None:
                    _release_context(below)
                below = below.link
            _set_top(below)
        else:
            self._counts["scope_repairs"] += 1
            _repair_stack(rec)
        if error is not None:
            rec.error = _describe(error)
        pending = self.pending
        if rec.sampled:
            pending.append(rec)
        else:  # no span; an unsampled brick still goes to the metrics (folded, not built)
            self._counts["scopes_unsampled"] += 1
            if not self.aggregate_unsampled:
                return
            if rec.owner._kind == KIND_BRICK:
                if self.fold_closed is not None:  # host clock: folded now, never pending
                    self.fold_closed(rec)
                else:
                    pending.append(rec)
        action = self.close_actions[rec.owner._kind]
        if action:
            self._act(rec, action)
        elif len(pending) >= self._pending_limit:
            self._overflow(len(pending))
        elif end >= self._next_poll_ns and (pending or self.poll_without_pending):
            self._poll(end)


#: Where open/close come from: C when the accelerator is built, else the Python above.
_RecordingBase: Any = _PyRecording if _hotpath is None else _hotpath.RecorderCore


class Recorder(_RecordingBase):
    """Opens and closes records for scopes; ended ones wait in :attr:`pending`.

    Args:
        tracer_provider: whose id generator and sampler scopes use.
        sync_mode: one of ``CLOSE_ACTIONS``' keys (checked by the processor).
        timer: a GPU timer, or None for the host clock.
        max_pending: ended records kept before a forced sync.
        max_delay_millis: deferred mode polls complete records this often.
        propagate_context: the outermost open scope becomes the current OTel span.
        time_kernels: kernel scopes get CUDA events too.
        counters: where events are counted.
        sync: the resolution entry point, ``sync(block, timeout_millis=None, streams=())``.
        sync_timeout_millis: the most a sync point reached on the hot path (a scope end
            in ``immediate``/``per_layer``, a forced sync) waits for the GPU; what is not
            complete by then stays pending for the next sync point.
        step_sampling: which steps produce spans (a ``StepSampling``), or None for all.
        aggregate_unsampled: unsampled bricks are still timed and resolved, for the
            metrics (no span is built); False drops unsampled scopes at close.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider,
        *,
        sync_mode: str,
        timer: Any,
        max_pending: int,
        max_delay_millis: float,
        propagate_context: bool,
        time_kernels: bool,
        counters: Counters,
        sync: Callable[..., bool],
        sync_timeout_millis: float = 1000.0,
        step_sampling: Any = None,
        aggregate_unsampled: bool = True,
    ) -> None:
        self.timer = timer
        self.clock = CLOCK_CUDA if timer is not None else CLOCK_HOST
        self.max_pending = max_pending
        self._pending_limit = max_pending  # a resolver thread is woken at half of max_pending
        self.propagate_context = propagate_context
        self.sync = sync
        self.sync_timeout_millis = sync_timeout_millis
        # Which kinds get their own CUDA events (step, layer, brick, kernel). Steps and
        # layers have no stream of their own: their GPU interval is the extent of the
        # GPU-timed scopes inside them (see SpanBuilder.build).
        self._gpu_timed = (False, False, True, time_kernels)
        self._provider = tracer_provider
        self.id_generator = tracer_provider.id_generator
        self._root_sampled = static_root_decision(tracer_provider.sampler)
        self._max_delay_ns = min(int(max_delay_millis * 1e6), _NEVER)
        self._next_poll_ns = perf_counter_ns() + self._max_delay_ns
        #: The time-based poll runs with nothing pending too: unsampled values kept for the
        #: "all" duration histogram are handed over that often (bounded memory). Otherwise
        #: a poll with nothing to resolve is skipped; the metrics take the unsampled sums
        #: themselves at each collection.
        self.poll_without_pending = False
        self.pending: deque[Record] = deque()
        self.thread_names: dict[int, str] = {}
        self._stream_refs: dict[Any, Any] = {}
        self.counters = counters
        self._counts = counters.values
        self.close_actions = CLOSE_ACTIONS[sync_mode]
        self.wake: Callable[[], None] | None = None  # the resolver thread's, once handed off
        self._step_sampling = step_sampling
        self.aggregate_unsampled = aggregate_unsampled
        #: Folds an unsampled brick into the metrics where it ends (``_unsampled``); set on
        #: the host clock, where nothing is left to resolve. None: it waits to be resolved.
        self.fold_closed: Callable[[Record], None] | None = None
        #: Thread CPU time at the open of each sampled outermost step still open; None: not
        #: measured (host intervals off). At its end, the CPU time it took goes to
        #: :attr:`step_cpu_done` by (thread id, host start), for its span's
        #: ``brickscope.step.thread_cpu_ns`` (the resolver puts it there).
        self.step_cpu: dict[Record, int] | None = None
        self.step_cpu_done: dict[tuple[int, int], int] = {}

    # --- the parts of open/close both implementations share (rare or policy-laden) -------

    def _open_root(self, rec: Record, owner: Any, current: Any) -> Any:
        """An outermost scope (or one under a user span started inside a scope): the
        trace, sampling decision and OTel parent from the current context; attaches the
        shared ``ScopeSpan`` if this scope propagates. Returns the context inside it."""
        span = _otel_context.current_span(current)
        span_context = span.get_span_context() if span is not None else None
        if span_context is not None and span_context.is_valid:
            rec.trace_id = span_context.trace_id
            rec.sampled = span_context.trace_flags.sampled
        else:
            span_context = None
            rec.trace_id = trace_id = self.id_generator.generate_trace_id()
            rec.sampled = self._sample_root(trace_id, owner._name)
        if owner._kind == KIND_STEP and self._step_sampling is not None and rec.sampled:
            rec.sampled = self._step_sampling.samples(owner._index)
        if owner._kind == KIND_STEP and rec.sampled and self.step_cpu is not None:
            self.step_cpu[rec] = _thread_time_ns()
        rec.otel_parent = span_context
        rec.parent = None
        if self.propagate_context and owner._propagates:
            current = _with_span(current, _SCOPE_SPAN)
            rec.context_token = _attach(current)
        else:
            rec.context_token = None
        return current

    def _name_thread(self, tid: int) -> str:
        """The current thread's name, remembered under its id until the thread ends (the
        first scope of a thread on this recorder: every other one reads :attr:`thread_names`)."""
        name = self.thread_names[tid] = threading.current_thread().name
        watch = getattr(_thread_ends, "watch", None)
        if watch is None:
            watch = _thread_ends.watch = []
        else:  # a long-lived thread outlives recorders (reconfigure): drop theirs
            watch[:] = [end for end in watch if end.recorder() is not None]
        watch.append(_ThreadEnd(self, tid))
        return name

    def _open_gpu(self, rec: Record, owner: Any, top: Record | None) -> None:
        """Record the start event of a GPU-timed scope (sets stream, start_mark, gpu_error)."""
        if (
            (rec.sampled or (self.aggregate_unsampled and owner._kind == KIND_BRICK))
            and self._gpu_timed[owner._kind]
            and not owner._host_only
        ):
            try:
                rec.stream = stream = self._stream_of(owner, top)
            except Exception as exc:  # e.g. the driver failing to set up the stream's context
                rec.stream = None
                rec.start_mark = -1
                rec.gpu_error = getattr(exc, "code_name", type(exc).__name__)
            else:
                rec.start_mark = mark = self.timer.mark(stream)
                if mark < 0:
                    rec.gpu_error = "mark_failed"
        else:
            rec.stream = None
            rec.start_mark = -1

    def _mark_end(self, rec: Record) -> None:
        """Record the end event of a GPU-timed scope."""
        try:
            rec.end_mark = self.timer.mark(rec.stream)
        except Exception as exc:  # a timer closed by a reconfigure, a driver fault: host timing
            rec.gpu_error = getattr(exc, "code_name", type(exc).__name__)

    def _act(self, rec: Record, action: int) -> None:
        """What closing ``rec`` triggers by the sync policy (``CLOSE_ACTIONS``). A step's
        thread CPU time goes on its span first (every step end acts)."""
        if self.step_cpu is not None and rec.owner._kind == KIND_STEP:
            start = self.step_cpu.pop(rec, None)
            if start is not None and rec.thread_id == _get_ident():
                self.step_cpu_done[(rec.thread_id, rec.host_start)] = _thread_time_ns() - start
        if action == WAKE:
            # Nothing pending (an unsampled step on the host clock, folded as it ended): no
            # wake-up. A metric collection takes the folded sums itself.
            if self.pending:
                self.wake()
            return
        if action == LATE:
            self._counts["closed_after_shutdown"] += 1
        if action == POLL:
            self.sync(block=False)
        else:  # a brick or layer end of immediate/per_layer waits by design: not counted as overhead
            self.sync(
                block=True, timeout_millis=self.sync_timeout_millis, streams=(rec.stream,),
                overhead=rec.owner._kind == KIND_STEP,
            )  # fmt: skip

    def _poll(self, end: int) -> None:
        """``max_delay_millis`` passed since the last poll: resolve what is complete; with a
        resolver thread (only while it sleeps, see :meth:`arm_wake`), wake it instead."""
        self._counts["polls"] += 1
        if self.wake is not None:
            self._next_poll_ns = _NEVER  # awake now: the thread polls on its own timer
            self.wake()
            return
        self._next_poll_ns = end + self._max_delay_ns
        self.sync(block=False)

    def _stream_of(self, owner: Any, top: Record | None) -> Any:
        """The timer's StreamRef for a scope: its own stream, else the enclosing scope's.

        A stream whose set-up fails (the driver cannot make its context ready) falls
        back to the host clock for good: counted once in ``gpu_fallbacks``, logged once,
        never retried on every scope.
        """
        stream = owner._stream
        if stream is None and top is not None and top.stream is not None:
            return top.stream
        try:
            ref = self._stream_refs[stream]
        except KeyError:
            try:
                ref = self._stream_refs[stream] = self.timer.stream_ref(stream)
            except Exception as exc:
                self._stream_refs[stream] = _Unusable(getattr(exc, "code_name", type(exc).__name__))
                self._counts["gpu_fallbacks"] += 1
                self.counters.warn_once(
                    "stream_setup",
                    f"brickscope: GPU timing could not be set up on a stream ({exc}); its scopes are timed "
                    "on the host clock (stats()['gpu_fallbacks'])",
                )
                raise
        except TypeError:  # an unhashable stream object
            return self.timer.stream_ref(stream)
        if type(ref) is _Unusable:
            raise ref
        return ref

    def _overflow(self, size: int) -> None:
        """Many records pending: wake the resolver thread at half of ``max_pending``;
        at ``max_pending`` (or without a thread) resolve here, blocking (counted)."""
        if self.wake is not None and size < self.max_pending:
            self.wake()
            return
        self._counts["forced_syncs"] += 1
        self.sync(block=True, timeout_millis=self.sync_timeout_millis)

    def hand_off(self, wake: Callable[[], None]) -> None:
        """Resolution moves to a resolver thread: the closes that polled now call ``wake``
        instead, the time-based poll is the thread's own (a close polls only to wake it
        from an idle sleep, :meth:`arm_wake`), and the thread is woken when half of
        ``max_pending`` records wait. Blocking sync points (``immediate``/``per_layer``)
        and the forced sync at ``max_pending`` stay."""
        self.wake = wake
        self.close_actions = tuple(WAKE if action == POLL else action for action in self.close_actions)
        self._next_poll_ns = _NEVER
        self._pending_limit = max(1, self.max_pending // 2)

    def arm_wake(self) -> bool:
        """The resolver thread found nothing to do: True if it may sleep until woken, the
        next close that leaves a record pending waking it (a poll due at once). False when
        records are pending or unsampled values are handed over by time: it keeps its timer.

        The poll is made due before ``pending`` is read, so a record queued meanwhile is
        either seen here or wakes the thread at its close."""
        if self.poll_without_pending:
            return False
        self._next_poll_ns = 0
        if self.pending:
            self._next_poll_ns = _NEVER
            return False
        return True

    def resolve_inline(self, sync_mode: str) -> None:
        """Back to resolving on the recording thread (a forked child: the thread is gone)."""
        self.wake = None
        self.close_actions = CLOSE_ACTIONS[sync_mode]
        self._pending_limit = self.max_pending
        self._next_poll_ns = perf_counter_ns() + self._max_delay_ns

    def count(self, what: str) -> None:
        """Count one event of ``what`` (scopes use it for misuse and internal errors)."""
        self.counters.add(what)

    def _sample_root(self, trace_id: int, name: str) -> bool:
        if self._root_sampled is not None:
            return self._root_sampled
        result = self._provider.sampler.should_sample(None, trace_id, name, SpanKind.INTERNAL)
        return result.decision == Decision.RECORD_AND_SAMPLE

    def forget_after_fork(self) -> None:
        """In a forked child: drop the parent's pending scopes and its CUDA state (CUDA
        does not survive fork); the child times on the host clock."""
        self.pending = deque()
        if self.step_cpu is not None:
            self.step_cpu, self.step_cpu_done = {}, {}
        if self.timer is not None:
            self.timer = None
            self.clock = CLOCK_HOST


class _Unusable(Exception):
    """A stream whose GPU timing could not be set up; its name is the reason."""

    @property
    def code_name(self) -> str:
        return str(self.args[0])


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


def _describe(error: BaseException) -> tuple[str, str, str]:
    """exception.type / .message / .stacktrace for the exception event."""
    stacktrace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return type(error).__qualname__, str(error), stacktrace


if _hotpath is not None:
    _hotpath.init_recorder(
        otel_var=_otel_context.runtime_var,
        otel_current=_current_context,
        clock_globals=globals(),  # the C side reads perf_counter_ns here on each use, as the Python does
        perf_counter_ns=time.perf_counter_ns,
        clock_is_monotonic=time.get_clock_info("perf_counter").implementation == "clock_gettime(CLOCK_MONOTONIC)",
        release_context=_release_context,
        repair_stack=_repair_stack,
        describe=_describe,
    )
