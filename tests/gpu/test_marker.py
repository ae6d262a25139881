# SPDX-License-Identifier: Apache-2.0
"""CudaTimer.mark and its C twin (the accelerator's CudaMarker, which calls cuEventRecord
through the pointer cuGetProcAddress gives): the same events, pool, mark table and failure
accounting. Each test runs on every implementation built here (only mark() in a
pure-Python run)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from brickscope import _record, native
from brickscope._gpu import CudaError, CudaTimer

pytestmark = pytest.mark.gpu

MS = 1_000_000


def new_stream(flags: int = 0x1) -> Any:
    from cuda.bindings import driver as drv

    drv.cuCtxPushCurrent(drv.cuDevicePrimaryCtxRetain(0)[1])
    stream = drv.cuStreamCreate(flags)[1]
    drv.cuCtxPopCurrent()
    return stream


def implementations(timer: CudaTimer) -> dict[str, Callable[[Any], int]]:
    marks = {"python": timer.mark}
    if timer._marker is not None:
        marks["c"] = timer._marker.mark
    return marks


@pytest.fixture
def timer(simdriver: Any) -> Any:
    """A timer, with device 0's primary context current on this thread as a program (torch)
    has it: the C marker's common case (another context current goes to the Python methods)."""
    from cuda.bindings import driver as drv

    with CudaTimer() as timer:
        drv.cuCtxSetCurrent(drv.cuDevicePrimaryCtxRetain(0)[1])
        yield timer
        drv.cuCtxSetCurrent(None)


def test_the_c_marker_is_there_when_the_accelerator_is(timer: CudaTimer) -> None:
    """With the accelerator in use, the timer has its C marker (a silent fallback would hide a slow path)."""
    in_use = native.implementations()["brickscope._hotpath"].in_use
    assert (timer._marker is not None) == (in_use == "c")


def test_the_c_marker_asks_for_the_entry_points_its_signatures_were_written_for(timer: CudaTimer, simdriver: Any) -> None:
    """The C marker's entry points are requested at the CUDA version of its typedefs (CUDA_VERSION),
    not at the driver's (13000 here, where cuEventElapsedTime would be its _v2)."""
    if timer._marker is None:
        pytest.skip("no C marker (pure Python)")
    version = _record.hotpath.CUDA_VERSION
    assert version == 12000
    for name in ("cuEventRecord", "cuCtxGetCurrent", "cuEventQuery", "cuEventElapsedTime", "cuCtxPushCurrent", "cuCtxPopCurrent"):
        assert simdriver.requested_version(name) == version, name


def test_a_mark_records_one_event_and_keeps_it_until_released(timer: CudaTimer, simdriver: Any) -> None:
    for name, mark in implementations(timer).items():
        ref = timer.stream_ref(new_stream())
        simdriver.enqueue_kernel(ref.handle, 20 * MS)  # a busy stream: marks land on work boundaries
        records = simdriver.calls("cuEventRecord")
        first = mark(ref)
        simdriver.enqueue_kernel(ref.handle, 2 * MS)
        second = mark(ref)
        assert simdriver.calls("cuEventRecord") - records == 2, name
        assert second > first > 0, name
        timer.wait(second)
        assert timer.is_complete(first) and timer.is_complete(second), name
        assert abs(timer.elapsed_ns(first, second) - 2 * MS) <= 500, name  # the 0.5 us event resolution
        free = timer.stats()["events_free"]
        timer.release(first)
        timer.release(second)
        assert timer.stats()["events_free"] == free + 2, name
        assert timer.stats()["live_marks"] == 0, name


def test_a_failed_record_gives_minus_one_counts_and_returns_the_event(timer: CudaTimer, simdriver: Any) -> None:
    for name, mark in implementations(timer).items():
        ref = timer.stream_ref(new_stream())
        timer.release(mark(ref))  # an event in the pool: the failing mark takes it from there
        before = timer.stats()
        simdriver.inject_invalid_handle(1)
        assert mark(ref) == -1, name
        after = timer.stats()
        assert after["failures.CUDA_ERROR_INVALID_HANDLE"] == before.get("failures.CUDA_ERROR_INVALID_HANDLE", 0) + 1
        assert after["events_free"] == before["events_free"], name  # given back, not leaked
        assert after["live_marks"] == before["live_marks"] == 0, name


def test_the_legacy_stream_and_an_unknown_stream_take_the_python_path(timer: CudaTimer, simdriver: Any) -> None:
    """Handle 0 (whose meaning the per-thread default stream setting decides) and a stream
    not from this timer: mark() handles them; the result is the same either way."""
    for name, mark in implementations(timer).items():
        legacy = timer.stream_ref(None)
        good = mark(legacy)
        assert good > 0 and timer.is_complete(good), name
        timer.release(good)
        foreign = legacy._replace(handle=legacy.handle + 0x1234)
        failures = timer.stats()["failures"]
        assert mark(foreign) == -1, name
        assert timer.stats()["failures"] == failures + 1, name


def test_after_close_every_mark_fails_cleanly(simdriver: Any) -> None:
    timer = CudaTimer()
    ref = timer.stream_ref(new_stream())
    marks = implementations(timer)
    timer.close()
    for name, mark in marks.items():
        assert mark(ref) == -1, name


def test_the_c_resolution_queries_answer_as_the_timer_does(timer: CudaTimer, simdriver: Any) -> None:
    """complete() is is_complete() (False while the GPU works, True after), and interval()
    is (host_time_ns(start), that + elapsed_ns(start, end)) to the nanosecond; None would
    mean "ask the timer", which the resolver then does."""
    marker = timer._marker
    if marker is None:
        assert native.implementations()["brickscope._hotpath"].in_use != "c"
        return  # pure Python: the resolver asks the timer; test_timer.py covers it
    from cuda.bindings import driver as drv

    ref = timer.stream_ref(new_stream())
    drv.cuCtxSetCurrent(None)  # a thread with no context current (the resolver thread):
    assert marker.complete(marker.mark(ref)) is True  # the mark's context pushed for the query...
    assert int(drv.cuCtxGetCurrent()[1]) == 0  # ... and popped, as _driver.in_context does
    drv.cuCtxSetCurrent(drv.cuDevicePrimaryCtxRetain(0)[1])
    simdriver.enqueue_kernel(ref.handle, 20 * MS)
    start = marker.mark(ref)
    simdriver.enqueue_kernel(ref.handle, 3 * MS)
    end = marker.mark(ref)
    assert marker.complete(end) is False and timer.is_complete(end) is False
    timer.wait(end)
    assert marker.complete(end) is True and timer.is_complete(end) is True
    begin = timer.host_time_ns(start)
    assert marker.interval(start, end) == (begin, begin + timer.elapsed_ns(start, end))
    assert abs(marker.interval(start, end)[1] - marker.interval(start, end)[0] - 3 * MS) <= 500
    timer.release(start)
    assert marker.interval(start, end) is None  # a released mark: the timer says what is wrong
    assert marker.complete(start) is None


def test_a_driver_error_in_the_c_queries_is_the_timers_cuda_error(timer: CudaTimer, simdriver: Any) -> None:
    """One failing query, one CudaError naming it, as is_complete / host_time_ns raise it
    (the resolver marks the span with it); no second try behind the caller's back."""
    marker = timer._marker
    if marker is None:
        assert native.implementations()["brickscope._hotpath"].in_use != "c"
        return  # pure Python: the timer's own methods (test_timer.py, test_gpu_spans.py)
    ref = timer.stream_ref(new_stream())
    start, end = marker.mark(ref), marker.mark(ref)
    timer.wait(end)
    simdriver.inject_invalid_handle(1)
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_HANDLE"):
        marker.complete(end)
    assert marker.complete(end) is True  # the injected fault was used once, by that one query
    simdriver.inject_invalid_handle(1)
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_HANDLE"):
        marker.interval(start, end)
    begin = timer.host_time_ns(start)
    assert marker.interval(start, end) == (begin, begin + timer.elapsed_ns(start, end))


def test_the_c_interval_reads_the_core_host_clock_as_python_would(simdriver: Any, monkeypatch: Any) -> None:
    """With the core's clock (brickscope._clock.host_ns, what configure() gives the timer) the
    C marker reads it without calling it, so it must see what a call would: a moved
    EPOCH_OFFSET_NS makes the anchor stale (None: the timer re-anchors), and a replaced
    perf_counter_ns is called."""
    from cuda.bindings import driver as drv

    from brickscope import _clock

    with CudaTimer(host_ns=_clock.host_ns) as timer:
        drv.cuCtxSetCurrent(drv.cuDevicePrimaryCtxRetain(0)[1])
        try:
            marker = timer._marker
            if marker is None:
                assert native.implementations()["brickscope._hotpath"].in_use != "c"
                return
            ref = timer.stream_ref(new_stream())
            start, end = marker.mark(ref), marker.mark(ref)
            timer.wait(end)
            begin = timer.host_time_ns(start)  # the anchor, on the real clock
            assert marker.interval(start, end) == (begin, begin + timer.elapsed_ns(start, end))
            monkeypatch.setattr(_clock, "EPOCH_OFFSET_NS", _clock.EPOCH_OFFSET_NS + 10**12)
            assert marker.interval(start, end) is None  # the anchor looks 1,000 s old
            monkeypatch.undo()
            assert marker.interval(start, end) == (begin, begin + timer.elapsed_ns(start, end))
            calls = []
            real = _clock.perf_counter_ns

            def counted() -> int:
                calls.append(1)
                return real()

            monkeypatch.setattr(_clock, "perf_counter_ns", counted)
            assert marker.interval(start, end) == (begin, begin + timer.elapsed_ns(start, end))
            assert calls  # the replaced clock was asked
        finally:
            drv.cuCtxSetCurrent(None)
