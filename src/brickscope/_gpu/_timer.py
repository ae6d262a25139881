# SPDX-License-Identifier: Apache-2.0
"""CudaTimer: GPU timestamps from CUDA driver events, mapped onto the host clock.

Example::

    timer = CudaTimer()                                  # CudaUnavailable without CUDA
    ref = timer.stream_ref(torch.cuda.current_stream())  # set-up time: resolve ctx/device
    start = timer.mark(ref)                              # hot path: cuEventRecord only
    launch_kernels()
    end = timer.mark(ref)
    ...                                                  # later, at a sync point:
    if timer.is_complete(end):                           # cuEventQuery, never blocks
        gpu_start_ns = timer.host_time_ns(start)         # epoch ns on the host timeline
        gpu_ns = timer.elapsed_ns(start, end)
    timer.release(start); timer.release(end)             # events back to the pool

GPU event timestamps are relative: ``cuEventElapsedTime`` between two events is
all the driver gives. Each context therefore keeps an *anchor*: an event recorded
on an idle private stream whose host time is known to within half the interval
between "before cuEventRecord" and "completion observed" (see ``_anchor``).
A mark's host time is the anchor's host time plus the elapsed time from the
anchor. ``docs/cuda.md`` has the measured alignment error.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

from brickscope import _clock, _record
from brickscope._gpu import _driver
from brickscope._gpu._driver import CudaError, CudaUnavailable, check, error_name, in_context
from brickscope._gpu._events import EventBudget, EventPool, PoolExhausted
from brickscope._gpu._streams import LEGACY_HANDLES, StreamRef, stream_handle

__all__ = ["CudaTimer", "host_epoch_ns"]

logger = logging.getLogger(__name__)

# The core's host clock: perf_counter_ns (CLOCK_MONOTONIC on Linux) mapped to Unix
# epoch ns once at import, so host times never jump with NTP adjustments.
_EPOCH_OFFSET_NS = time.time_ns() - time.perf_counter_ns()


def host_epoch_ns() -> int:
    """Host time in Unix epoch ns: ``time.perf_counter_ns()`` plus an offset fixed at import."""
    return _EPOCH_OFFSET_NS + time.perf_counter_ns()


#: An anchor older than this is re-established before use. cuEventElapsedTime
#: returns a float32 of milliseconds: its step is 61 ns at 1 s but 1 us at 10 s,
#: and GPU and host clocks drift apart by some ppm. One second keeps both small.
ANCHOR_MAX_AGE_NS = 1_000_000_000
#: Anchor attempts per re-anchor; the one with the narrowest window wins.
ANCHOR_TRIES = 3
#: How long to poll an anchor event with cuEventQuery before blocking on it.
ANCHOR_POLL_LIMIT_NS = 2_000_000

_CU_STREAM_NON_BLOCKING = 0x1
_CU_EVENT_DEFAULT = 0x0
_CU_EVENT_BLOCKING_SYNC = 0x1


class _Anchor(NamedTuple):
    event: Any  # CUevent, completed
    host_ns: int  # its estimated host time, epoch ns
    window_ns: int  # uncertainty: the true time is within host_ns +- window_ns / 2


class _Context:
    """What the timer keeps per CUDA context: event pool, anchor stream, anchor."""

    __slots__ = ("anchor", "anchor_stream", "ctx", "device", "lock", "pool")

    def __init__(self, ctx: Any, device: int, pool: EventPool, anchor_stream: Any) -> None:
        self.ctx = ctx
        self.device = device
        self.pool = pool
        self.anchor_stream = anchor_stream
        self.anchor: _Anchor | None = None
        self.lock = threading.Lock()


_live_timers: weakref.WeakSet[CudaTimer] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # CUDA does not survive fork: every handle the parent held is meaningless here.
    for timer in list(_live_timers):
        timer._forget("the process forked; CUDA state does not survive fork (create a new CudaTimer)")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class CudaTimer:
    """GPU timing with CUDA driver events; one per process.

    Thread safety: ``mark``, ``release``, ``is_complete``, ``wait``,
    ``host_time_ns``, ``elapsed_ns``, ``reanchor``, ``synchronize``, ``stream_ref``
    and ``stats`` may be called from any thread (each makes the stream's context
    current for its driver calls and restores the caller's). ``close`` must not
    race with the others.

    Blocking: only ``wait`` and ``synchronize`` block on the GPU; ``stream_ref``
    and ``reanchor`` poll an event on an idle private stream (microseconds).

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        max_events: int = 65536,
        *,
        host_ns: Callable[[], int] = host_epoch_ns,
        blocking_sync: bool = True,
    ) -> None:
        """Initialise the driver and count devices; contexts are touched lazily.

        Args:
            max_events: Most events all pools may hold; a mark beyond it returns -1.
            host_ns: The host clock, epoch ns (the core passes its own).
            blocking_sync: Create events with CU_EVENT_BLOCKING_SYNC, so ``wait``
                sleeps instead of spinning a core (a few us more wake-up latency).

        Raises:
            ValueError: ``max_events`` < 2.
            CudaUnavailable: no cuda-python, no driver library, no device, or a
                CUDA error during set-up.
        """
        if max_events < 2:
            raise ValueError(f"max_events must be >= 2 (a mark pair), got {max_events}")
        drv = _driver.init()
        try:
            count = check(drv.cuDeviceGetCount())
            names = [self._device_name(drv, i) for i in range(count)]
        except CudaError as exc:
            raise CudaUnavailable(f"CUDA device query failed: {exc}") from exc
        if count == 0:
            raise CudaUnavailable("no CUDA device")
        self._drv: ModuleType = drv
        self._names = names
        self._host_ns = host_ns
        self._event_flags = _CU_EVENT_BLOCKING_SYNC if blocking_sync else _CU_EVENT_DEFAULT
        self._budget = EventBudget(max_events)
        self._lock = threading.RLock()  # set-up paths: contexts, streams, close
        self._primary: dict[int, Any] = {}  # device -> primary CUcontext we retained
        self._contexts: dict[int, _Context] = {}  # int(CUcontext) -> _Context
        self._streams: dict[StreamRef, tuple[Any, _Context]] = {}  # -> (CUstream, _Context)
        self._marks: dict[int, tuple[Any, _Context]] = {}  # mark id -> (CUevent, _Context)
        self._ids = itertools.count(1)
        self._ids_burned = 0  # ids stats() drew to count marks
        self._failures: Counter[str] = Counter()
        self._fail_lock = threading.Lock()
        self._reanchors = 0
        self._waits = 0
        self._closed: str | None = None
        # Hot-path bindings, looked up once.
        self._record = drv.cuEventRecord
        self._get_current = drv.cuCtxGetCurrent
        self._success = drv.CUresult.CUDA_SUCCESS
        self._not_ready = drv.CUresult.CUDA_ERROR_NOT_READY
        #: mark() in C (brickscope._hotpath.CudaMarker), calling cuEventRecord through the
        #: function pointer the driver's cuGetProcAddress gives: what the recorder uses
        #: when the accelerator is built. None: mark() below is the only implementation.
        self._marker = _make_marker(drv, self)
        _live_timers.add(self)

    @staticmethod
    def _device_name(drv: ModuleType, ordinal: int) -> str:
        device = check(drv.cuDeviceGet(ordinal))
        raw = check(drv.cuDeviceGetName(256, device))
        return bytes(raw).split(b"\0", 1)[0].decode(errors="replace").strip()

    # --- set-up: streams, contexts, anchors ------------------------------------------

    def stream_ref(self, stream: object | None) -> StreamRef:
        """Resolve a stream argument once, at set-up time.

        Args:
            stream: ``None`` (legacy default stream of the current context, or of
                device 0 if none is current), an int handle, a cuda-bindings
                ``CUstream``, or an object with ``__cuda_stream__``,
                ``.cuda_stream`` (PyTorch) or ``.ptr`` (CuPy).

        Returns:
            The cached reference to pass to ``mark``.

        Raises:
            TypeError: ``stream`` is not stream-like.
            ValueError: the handle is not a valid stream.
            CudaUnavailable: the timer is closed or the process forked.
            CudaError: another CUDA failure while resolving it.
        """
        handle = stream_handle(stream)
        drv = self._drv
        with self._lock:
            self._check_open()
            try:
                if handle in LEGACY_HANDLES:
                    ctx = check(drv.cuCtxGetCurrent())
                    if int(ctx) == 0:
                        ctx = self._retain_primary(0)
                else:
                    ctx = check(drv.cuStreamGetCtx(drv.CUstream(handle)))
            except CudaError as exc:
                if exc.code_name in ("CUDA_ERROR_INVALID_HANDLE", "CUDA_ERROR_INVALID_VALUE"):
                    raise ValueError(f"{handle:#x} is not a valid CUDA stream handle ({exc})") from exc
                raise
            c = self._context(ctx)
            ref = StreamRef(handle, c.device, int(ctx))
            if ref not in self._streams:
                self._streams[ref] = (drv.CUstream(handle), c)
            return ref

    def _check_open(self) -> None:
        if self._closed is not None:
            raise CudaUnavailable(self._closed)

    def _retain_primary(self, device: int) -> Any:
        ctx = self._primary.get(device)
        if ctx is None:
            drv = self._drv
            ctx = check(drv.cuDevicePrimaryCtxRetain(check(drv.cuDeviceGet(device))))
            self._primary[device] = ctx
        return ctx

    def _context(self, ctx: Any) -> _Context:
        """The timer's state for a context, created with its first anchor (lock held)."""
        c = self._contexts.get(int(ctx))
        if c is not None:
            return c
        drv = self._drv
        device = int(in_context(drv, ctx, lambda: check(drv.cuCtxGetDevice())))
        _flags, active = check(drv.cuDevicePrimaryCtxGetState(device))
        if active and device not in self._primary:
            # Hold the primary context while we hold events in it (as PyTorch does);
            # never create one on a device the program does not use.
            self._retain_primary(device)
        stream = in_context(drv, ctx, lambda: check(drv.cuStreamCreate(_CU_STREAM_NON_BLOCKING)))
        c = _Context(ctx, device, EventPool(drv, ctx, device, self._event_flags, self._budget), stream)
        with c.lock:
            self._anchor(c)
        self._contexts[int(ctx)] = c
        return c

    def _anchor(self, c: _Context) -> _Anchor:
        """Re-establish a context's anchor (``c.lock`` held).

        Records an event on the context's private idle non-blocking stream, so it
        waits for no other work, and polls it with cuEventQuery: its GPU timestamp
        lies between the host time before cuEventRecord (t0) and the time its
        completion was observed (t1). The anchor's host time is the midpoint, off
        by at most (t1 - t0) / 2; the narrowest of ``ANCHOR_TRIES`` attempts wins.
        """
        drv, host_ns, pool = self._drv, self._host_ns, c.pool

        def attempt() -> _Anchor:
            event = pool.take()
            try:
                t0 = host_ns()
                check(drv.cuEventRecord(event, c.anchor_stream))
                while True:
                    err = drv.cuEventQuery(event)[0]
                    if err is self._success:
                        break
                    if err is not self._not_ready:
                        check((err,))
                    if host_ns() - t0 > ANCHOR_POLL_LIMIT_NS:
                        check(drv.cuEventSynchronize(event))
                        break
                t1 = host_ns()
            except BaseException:
                pool.give(event)
                raise
            return _Anchor(event, (t0 + t1) // 2, t1 - t0)

        def best() -> _Anchor:
            tries = [attempt() for _ in range(ANCHOR_TRIES)]
            tries.sort(key=lambda a: a.window_ns)
            for loser in tries[1:]:
                pool.give(loser.event)
            return tries[0]

        anchor = in_context(drv, c.ctx, best)
        if c.anchor is not None:
            pool.give(c.anchor.event)
        c.anchor = anchor
        self._reanchors += 1
        return anchor

    def reanchor(self, device: int | None = None) -> None:
        """Re-establish the anchors of one device (or all): call at sync points.

        Raises:
            CudaError: a driver call failed.
        """
        with self._lock:
            self._check_open()
            contexts = [c for c in self._contexts.values() if device is None or c.device == device]
        for c in contexts:
            with c.lock:
                self._anchor(c)

    # --- hot path ----------------------------------------------------------------------

    def mark(self, stream: StreamRef) -> int:
        """Record a timing event on the stream now; never raises.

        Returns:
            A mark id (> 0) for the other methods, or -1 if CUDA timing failed
            (counted in ``stats()``, logged once per kind of failure).
        """
        try:
            cu, c = self._streams[stream]
        except (KeyError, TypeError):
            return self._fail("unknown_stream", "stream not from this timer's stream_ref (closed or forked?)")
        pool = c.pool
        try:
            try:
                event = pool.free.pop()
            except IndexError:
                event = pool.grow()
        except PoolExhausted as exc:
            return self._fail("pool_exhausted", str(exc))
        except CudaError as exc:
            return self._fail(exc.code_name, str(exc))
        except Exception as exc:  # the hot path never raises
            return self._fail(type(exc).__name__, str(exc))
        try:
            if self._get_current()[1] == c.ctx:
                err = self._record(event, cu)[0]
            else:
                err = in_context(self._drv, c.ctx, self._record, event, cu)[0]
        except Exception as exc:  # the hot path never raises
            pool.free.append(event)
            return self._fail(exc.code_name if isinstance(exc, CudaError) else type(exc).__name__, str(exc))
        if err is not self._success:
            pool.free.append(event)
            return self._fail(error_name(err), "cuEventRecord failed")
        mark = next(self._ids)
        self._marks[mark] = (event, c)
        return mark

    def _marker_entry(self, stream: StreamRef) -> tuple[list[Any], _Context, int, int] | None:
        """What the C marker needs to mark on ``stream`` (its context's free events, the
        context, the raw stream and context handles), or None: mark() handles this stream
        (not from this timer, or a legacy default-stream handle, whose meaning depends on
        the per-thread-default-stream setting the bindings were loaded with)."""
        entry = self._streams.get(stream)
        if entry is None or stream.handle in LEGACY_HANDLES:
            return None
        c = entry[1]
        return c.pool.free, c, stream.handle, stream.ctx

    def _cuda_error(self, err: int) -> None:
        """Raise the CudaError of a driver result the C marker's queries got, as check() does."""
        check((self._drv.CUresult(err),))

    def _record_failed(self, err: int) -> int:
        """The C marker's cuEventRecord returned ``err``: counted and logged as mark() does."""
        return self._fail(error_name(self._drv.CUresult(err)), "cuEventRecord failed")

    def _fail(self, kind: str, detail: str) -> int:
        with self._fail_lock:
            self._failures[kind] += 1
            first = self._failures[kind] == 1
        if first:
            logger.warning(
                "brickscope: CUDA timing failed (%s: %s); affected scopes use host timing. "
                "Further %s failures are counted in stats(), not logged.",
                kind,
                detail,
                kind,
            )
        return -1

    def release(self, mark: int) -> None:
        """Give a mark's event back to the pool; unknown ids (and -1) are ignored."""
        entry = self._marks.pop(mark, None)
        if entry is not None:
            entry[1].pool.free.append(entry[0])

    # --- resolution ----------------------------------------------------------------------

    def _entry(self, mark: int) -> tuple[Any, _Context]:
        try:
            return self._marks[mark]
        except KeyError:
            self._check_open()
            raise ValueError(f"unknown or released mark {mark}") from None

    def is_complete(self, mark: int) -> bool:
        """Whether the GPU has reached the mark (cuEventQuery; never blocks).

        Raises:
            ValueError: unknown mark.
            CudaError: the query failed (e.g. a sticky CUDA_ERROR_LAUNCH_FAILED).
        """
        event, c = self._entry(mark)
        err = in_context(self._drv, c.ctx, self._drv.cuEventQuery, event)[0]
        if err is self._success:
            return True
        if err is self._not_ready:
            return False
        check((err,))
        raise AssertionError("unreachable")  # pragma: no cover

    def wait(self, mark: int) -> None:
        """Block until the GPU reaches the mark (cuEventSynchronize).

        Raises:
            ValueError: unknown mark.
            CudaError: the wait failed.
        """
        event, c = self._entry(mark)
        self._waits += 1
        check(in_context(self._drv, c.ctx, self._drv.cuEventSynchronize, event))

    def elapsed_ns(self, start: int, end: int) -> int:
        """GPU time from mark ``start`` to mark ``end``, ns (0.5 us resolution).

        Raises:
            ValueError: unknown mark.
            CudaError: CUDA_ERROR_NOT_READY if either is incomplete, others on failure.
        """
        e0, c = self._entry(start)
        e1, _ = self._entry(end)
        ms = check(in_context(self._drv, c.ctx, self._drv.cuEventElapsedTime, e0, e1))
        return round(ms * 1e6)

    def host_time_ns(self, mark: int) -> int:
        """Epoch ns on the host timeline at which the GPU reached a completed mark.

        The anchor is re-established first if older than ``ANCHOR_MAX_AGE_NS``
        (non-blocking: it polls an event on an idle stream).

        Raises:
            ValueError: unknown mark.
            CudaError: CUDA_ERROR_NOT_READY if the mark is incomplete, others on failure.
        """
        event, c = self._entry(mark)
        drv = self._drv
        with c.lock:
            anchor = c.anchor
            if anchor is None or self._host_ns() - anchor.host_ns > ANCHOR_MAX_AGE_NS:
                anchor = self._anchor(c)
            ms = check(in_context(drv, c.ctx, drv.cuEventElapsedTime, anchor.event, event))
            return anchor.host_ns + round(ms * 1e6)

    def synchronize(self, stream: StreamRef) -> None:
        """Block until all work queued on the stream is done (cuStreamSynchronize).

        Raises:
            ValueError: ``stream`` is not from this timer's ``stream_ref``.
            CudaError: the synchronize failed.
        """
        try:
            cu, c = self._streams[stream]
        except KeyError:
            self._check_open()
            raise ValueError(f"{stream!r} is not from this timer's stream_ref") from None
        self._waits += 1
        check(in_context(self._drv, c.ctx, self._drv.cuStreamSynchronize, cu))

    # --- information and teardown ------------------------------------------------------

    def device_names(self) -> list[str]:
        """Names of all CUDA devices, by ordinal."""
        return list(self._names)

    def stats(self) -> dict[str, int]:
        """Counters: marks issued, failures (total and ``failures.<kind>``), events, anchors."""
        with self._fail_lock:
            # Count issued marks without a second counter on the hot path: draw an
            # id (ids need not be contiguous) and subtract the ones drawn here.
            self._ids_burned += 1
            marks = next(self._ids) - self._ids_burned
            failures = dict(self._failures)
        pools = [c.pool for c in list(self._contexts.values())]
        anchors = [c.anchor for c in list(self._contexts.values()) if c.anchor is not None]
        out = {
            "marks": marks,
            "failures": sum(failures.values()),
            "live_marks": len(self._marks),
            "events_created": self._budget.created,
            "events_free": sum(len(p.free) for p in pools),
            "max_events": self._budget.max_events,
            "contexts": len(pools),
            "streams": len(self._streams),
            "reanchors": self._reanchors,
            "waits": self._waits,
            "anchor_window_ns": max((a.window_ns for a in anchors), default=0),
        }
        out.update({f"failures.{kind}": n for kind, n in sorted(failures.items())})
        return out

    def close(self) -> None:
        """Destroy all events and private streams, release primary contexts; idempotent.

        Failures are logged, not raised: this runs at shutdown.
        """
        with self._lock:
            if self._closed is not None:
                return
            self._closed = "the CudaTimer is closed"
            if self._marker is not None:
                self._marker.disable()
            contexts, primary = list(self._contexts.values()), dict(self._primary)
            self._streams, self._marks, self._contexts, self._primary = {}, {}, {}, {}
        drv = self._drv
        for c in contexts:
            try:
                failed = c.pool.destroy()
                check(in_context(drv, c.ctx, drv.cuStreamDestroy, c.anchor_stream))
                if failed:
                    logger.warning("brickscope: %d CUDA events could not be destroyed on device %d", failed, c.device)
            except Exception:  # teardown must finish
                logger.warning("brickscope: releasing CUDA timing state of device %d failed", c.device, exc_info=True)
        for device in primary:
            try:
                check(drv.cuDevicePrimaryCtxRelease(device))
            except Exception:
                logger.warning("brickscope: releasing the primary context of device %d failed", device, exc_info=True)
        _live_timers.discard(self)

    def _forget(self, reason: str) -> None:
        """Drop every handle without calling the driver (after fork)."""
        self._closed = reason
        if self._marker is not None:
            self._marker.disable()
        self._streams, self._marks, self._contexts, self._primary = {}, {}, {}, {}
        self._lock = threading.RLock()  # may have been held by another thread at fork
        self._fail_lock = threading.Lock()

    def __enter__(self) -> CudaTimer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _make_marker(drv: ModuleType, timer: CudaTimer) -> Any:
    """The C marker for ``timer`` (see ``CudaTimer._marker``), or None: no accelerator, or
    the driver does not give the entry points. Besides ``mark``, it answers the resolver's
    ``is_complete`` (``complete``) and ``host_time_ns`` + ``elapsed_ns`` (``interval``) in C,
    raising the same CudaError on a driver error, or says None where these methods must
    decide."""
    hotpath = _record.hotpath
    if hotpath is None:
        return None
    try:
        names = (
            "cuEventRecord", "cuCtxGetCurrent", "cuEventQuery", "cuEventElapsedTime", "cuCtxPushCurrent",
            "cuCtxPopCurrent",
        )  # fmt: skip
        # At the CUDA version the C side's signatures were written for, not the driver's: a
        # later driver may give a newer variant of an entry point, with another ABI.
        pointers = {
            name: int(check(drv.cuGetProcAddress(name.encode(), hotpath.CUDA_VERSION, 0))[0]) for name in names
        }
        if not all(pointers.values()):
            return None
        return hotpath.CudaMarker(
            timer=timer, marks=timer._marks, ids=timer._ids, timer_globals=globals(),
            host_ns=_clock.host_ns, clock_globals=vars(_clock), **pointers,
        )  # fmt: skip
    except Exception:  # the Python mark() works without it
        logger.debug("brickscope: no C marker for CUDA events", exc_info=True)
        return None
