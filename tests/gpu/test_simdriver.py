# SPDX-License-Identifier: Apache-2.0
"""The simulated CUDA driver, driven through the real cuda.bindings.driver."""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

MS = 1_000_000


@pytest.fixture
def drv(simdriver: Any) -> Any:
    from cuda.bindings import driver

    assert int(driver.cuInit(0)[0]) == 0
    return driver


def ok(result: tuple[Any, ...]) -> Any:
    """Assert CUDA_SUCCESS and unwrap a single value."""
    assert result[0].name == "CUDA_SUCCESS", result
    return result[1] if len(result) == 2 else None


def code(result: tuple[Any, ...] | Any) -> str:
    err = result[0] if isinstance(result, tuple) else result
    return err.name


@pytest.fixture
def ctx(drv: Any) -> Iterator[Any]:
    """Device 0's primary context, current on this thread."""
    context = ok(drv.cuDevicePrimaryCtxRetain(ok(drv.cuDeviceGet(0))))
    ok(drv.cuCtxSetCurrent(context))
    yield context
    drv.cuCtxSetCurrent(None)


def new_event(drv: Any, flags: int = 0) -> Any:
    return ok(drv.cuEventCreate(flags))


def new_stream(drv: Any, flags: int = 0) -> Any:
    return ok(drv.cuStreamCreate(flags))


class TestLoading:
    def test_bindings_resolve_the_simulator(self, drv: Any, simdriver: Any) -> None:
        """cuda.bindings reports the simulator's driver version, devices and names."""
        assert ok(drv.cuDriverGetVersion()) == 13000
        assert ok(drv.cuDeviceGetCount()) == 2
        name = ok(drv.cuDeviceGetName(64, ok(drv.cuDeviceGet(1))))
        assert name.split(b"\0")[0] == b"brickscope SimGPU 1"
        assert simdriver.calls("cuDeviceGetName") == 1

    def test_device_count_from_hook(self, drv: Any, simdriver: Any) -> None:
        """set_device_count changes what cuDeviceGetCount reports; 0 makes cuInit fail with NO_DEVICE."""
        simdriver.set_device_count(3)
        assert ok(drv.cuDeviceGetCount()) == 3
        simdriver.set_device_count(0)
        assert code(drv.cuInit(0)) == "CUDA_ERROR_NO_DEVICE"

    def test_unknown_entry_point_raises_only_when_called(self, drv: Any) -> None:
        """A function the simulator lacks resolves to nothing and raises a RuntimeError when called."""
        with pytest.raises(RuntimeError, match="cuModuleLoad"):
            drv.cuModuleLoad(b"kernel.cubin")

    def test_get_proc_address_picks_the_versioned_abi(self, simdriver: Any) -> None:
        """cuGetProcAddress_v2 returns the _v2 ABI from its CUDA version on, and NOT_FOUND for unknown names."""
        lib = ctypes.CDLL(str(simdriver.path))
        gpa = lib.cuGetProcAddress_v2
        gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64,
                        ctypes.POINTER(ctypes.c_int)]  # fmt: skip

        def resolve(name: bytes, version: int) -> tuple[int, int | None, int]:
            fn, status = ctypes.c_void_p(), ctypes.c_int(-1)
            rc = gpa(name, ctypes.byref(fn), version, 0, ctypes.byref(status))
            return rc, fn.value, status.value

        v1 = ctypes.cast(lib.cuEventDestroy, ctypes.c_void_p).value
        v2 = ctypes.cast(lib.cuEventDestroy_v2, ctypes.c_void_p).value
        assert resolve(b"cuEventDestroy", 3020) == (0, v1, 0)
        assert resolve(b"cuEventDestroy", 13000) == (0, v2, 0)
        assert resolve(b"cuEventElapsedTime", 1000) == (500, None, 2)
        assert resolve(b"cuNoSuchFunction", 13000) == (500, None, 1)

    def test_error_names_and_strings(self, drv: Any) -> None:
        """cuGetErrorName/String describe the codes the simulator returns."""
        err = drv.CUresult.CUDA_ERROR_NOT_READY
        assert ok(drv.cuGetErrorName(err)) == b"CUDA_ERROR_NOT_READY"
        assert ok(drv.cuGetErrorString(err)) == b"device not ready"


class TestEvents:
    def test_query_of_never_recorded_event_succeeds(self, drv: Any, ctx: Any) -> None:
        """cuEventQuery on an event that was never recorded returns CUDA_SUCCESS, as the driver documents."""
        assert code(drv.cuEventQuery(new_event(drv))) == "CUDA_SUCCESS"

    def test_event_not_ready_until_stream_work_completes(self, drv: Any, ctx: Any, simdriver: Any) -> None:
        """An event recorded behind 20 ms of work reports NOT_READY until the work's end, then SUCCESS."""
        stream, event = new_stream(drv), new_event(drv)
        _, end = simdriver.enqueue_kernel(int(stream), 20 * MS)
        ok(drv.cuEventRecord(event, stream))
        assert code(drv.cuEventQuery(event)) == "CUDA_ERROR_NOT_READY"
        assert simdriver.event_time_ns(event) == end
        while time.perf_counter_ns() < end:
            time.sleep(0.001)
        assert code(drv.cuEventQuery(event)) == "CUDA_SUCCESS"

    def test_synchronize_waits_and_is_counted(self, drv: Any, ctx: Any, simdriver: Any) -> None:
        """cuEventSynchronize returns no earlier than the event's completion and counts one blocking call."""
        stream, event = new_stream(drv), new_event(drv)
        _, end = simdriver.enqueue_kernel(int(stream), 5 * MS)
        drv.cuEventRecord(event, stream)
        assert simdriver.counters()["blocking_calls"] == 0
        ok(drv.cuEventSynchronize(event))
        assert time.perf_counter_ns() >= end
        assert simdriver.counters()["blocking_calls"] == 1

    def test_elapsed_time_of_kernel_has_half_microsecond_resolution(
        self, drv: Any, ctx: Any, simdriver: Any
    ) -> None:
        """Events around a 2 ms kernel on a busy stream measure 2 ms, in multiples of 0.5 us."""
        stream, start, end = new_stream(drv), new_event(drv), new_event(drv)
        simdriver.enqueue_kernel(int(stream), 10 * MS)  # keep the stream busy: marks land on work boundaries
        drv.cuEventRecord(start, stream)
        simdriver.enqueue_kernel(int(stream), 2 * MS + 1234)
        drv.cuEventRecord(end, stream)
        drv.cuEventSynchronize(end)
        ms = ok(drv.cuEventElapsedTime(start, end))
        ns = round(ms * 1e6)
        assert ns % 500 == 0
        assert abs(ns - (2 * MS + 1234)) <= 500

    @pytest.mark.parametrize("which", ["start", "end"])
    def test_elapsed_time_of_unrecorded_event_is_invalid_handle(self, drv: Any, ctx: Any, which: str) -> None:
        """cuEventElapsedTime with a never-recorded event returns CUDA_ERROR_INVALID_HANDLE."""
        recorded, unrecorded = new_event(drv), new_event(drv)
        drv.cuEventRecord(recorded, 0)
        pair = (unrecorded, recorded) if which == "start" else (recorded, unrecorded)
        assert code(drv.cuEventElapsedTime(*pair)) == "CUDA_ERROR_INVALID_HANDLE"

    def test_elapsed_time_of_incomplete_event_is_not_ready(self, drv: Any, ctx: Any, simdriver: Any) -> None:
        """cuEventElapsedTime returns CUDA_ERROR_NOT_READY while either event is incomplete."""
        stream, start, end = new_stream(drv), new_event(drv), new_event(drv)
        drv.cuEventRecord(start, stream)
        simdriver.enqueue_kernel(int(stream), 50 * MS)
        drv.cuEventRecord(end, stream)
        assert code(drv.cuEventElapsedTime(start, end)) == "CUDA_ERROR_NOT_READY"

    def test_elapsed_time_of_destroyed_event_is_invalid_handle(self, drv: Any, ctx: Any) -> None:
        """A destroyed event's handle is rejected with CUDA_ERROR_INVALID_HANDLE, never reused silently."""
        start, end = new_event(drv), new_event(drv)
        drv.cuEventRecord(start, 0)
        drv.cuEventRecord(end, 0)
        ok(drv.cuEventDestroy(end))
        assert code(drv.cuEventElapsedTime(start, end)) == "CUDA_ERROR_INVALID_HANDLE"
        assert code(drv.cuEventQuery(end)) == "CUDA_ERROR_INVALID_HANDLE"
        new_event(drv)  # reuses the slot under a new generation
        assert code(drv.cuEventQuery(end)) == "CUDA_ERROR_INVALID_HANDLE"

    def test_elapsed_time_of_disable_timing_event_is_invalid_handle(self, drv: Any, ctx: Any) -> None:
        """An event created with CU_EVENT_DISABLE_TIMING can be recorded but not timed."""
        timed, untimed = new_event(drv), new_event(drv, 0x2)
        drv.cuEventRecord(timed, 0)
        ok(drv.cuEventRecord(untimed, 0))
        assert code(drv.cuEventQuery(untimed)) == "CUDA_SUCCESS"
        assert code(drv.cuEventElapsedTime(timed, untimed)) == "CUDA_ERROR_INVALID_HANDLE"

    def test_record_needs_a_current_context(self, drv: Any, ctx: Any) -> None:
        """cuEventRecord with no current context returns CUDA_ERROR_INVALID_CONTEXT."""
        event, stream = new_event(drv), new_stream(drv)
        drv.cuCtxSetCurrent(None)
        assert code(drv.cuEventRecord(event, stream)) == "CUDA_ERROR_INVALID_CONTEXT"

    def test_events_belong_to_their_context(self, drv: Any, ctx: Any) -> None:
        """Recording device 0's event on a device 1 stream, or on device 1's legacy stream, is INVALID_HANDLE."""
        event = new_event(drv)
        other = ok(drv.cuDevicePrimaryCtxRetain(ok(drv.cuDeviceGet(1))))
        drv.cuCtxSetCurrent(other)
        assert code(drv.cuEventRecord(event, new_stream(drv))) == "CUDA_ERROR_INVALID_HANDLE"
        assert code(drv.cuEventRecord(event, 0)) == "CUDA_ERROR_INVALID_HANDLE"

    def test_counters_track_live_and_created_events(self, drv: Any, ctx: Any, simdriver: Any) -> None:
        """live_events falls on destroy and on the primary context's final release; events_created only grows."""
        events = [new_event(drv) for _ in range(5)]
        drv.cuEventDestroy(events[0])
        assert simdriver.counters()["live_events"] == 4
        drv.cuDevicePrimaryCtxRelease(0)
        counters = simdriver.counters()
        assert (counters["live_events"], counters["events_created"], counters["active_contexts"]) == (0, 5, 0)
        assert code(drv.cuEventQuery(events[1])) == "CUDA_ERROR_INVALID_HANDLE"


class TestStreams:
    def kernel_then_legacy_event(self, drv: Any, simdriver: Any, flags: int) -> tuple[int, int]:
        stream, event = new_stream(drv, flags), new_event(drv)
        _, end = simdriver.enqueue_kernel(int(stream), 30 * MS)
        drv.cuEventRecord(event, 0)
        return end, simdriver.event_time_ns(event)

    def test_legacy_stream_waits_for_blocking_streams(self, drv: Any, ctx: Any, simdriver: Any) -> None:
        """Work on the legacy default stream starts after prior work of a blocking stream."""
        kernel_end, legacy_event = self.kernel_then_legacy_event(drv, simdriver, 0x0)
        assert legacy_event == kernel_end

    def test_legacy_stream_ignores_non_blocking_streams(self, drv: Any, ctx: Any, simdriver: Any) -> None:
        """Work on the legacy default stream does not wait for a CU_STREAM_NON_BLOCKING stream."""
        kernel_end, legacy_event = self.kernel_then_legacy_event(drv, simdriver, 0x1)
        assert legacy_event < kernel_end - 20 * MS

    def test_blocking_streams_wait_for_legacy_stream(self, drv: Any, ctx: Any, simdriver: Any) -> None:
        """Work on a blocking stream starts after prior legacy-stream work; a non-blocking stream's does not."""
        blocking, non_blocking = new_stream(drv, 0x0), new_stream(drv, 0x1)
        _, legacy_end = simdriver.enqueue_kernel(0, 30 * MS)
        assert simdriver.enqueue_kernel(int(blocking), MS)[0] == legacy_end
        assert simdriver.enqueue_kernel(int(non_blocking), MS)[0] < legacy_end - 20 * MS

    def test_stream_synchronize_and_query(self, drv: Any, ctx: Any, simdriver: Any) -> None:
        """cuStreamQuery is NOT_READY while work is queued; cuStreamSynchronize waits for it and is counted."""
        stream = new_stream(drv)
        _, end = simdriver.enqueue_kernel(int(stream), 5 * MS)
        assert code(drv.cuStreamQuery(stream)) == "CUDA_ERROR_NOT_READY"
        ok(drv.cuStreamSynchronize(stream))
        assert time.perf_counter_ns() >= end
        assert code(drv.cuStreamQuery(stream)) == "CUDA_SUCCESS"
        assert simdriver.counters()["blocking_calls"] == 1

    def test_ctx_synchronize_waits_for_all_streams(self, drv: Any, ctx: Any, simdriver: Any) -> None:
        """cuCtxSynchronize waits for the latest work of any stream in the context."""
        _, end = simdriver.enqueue_kernel(int(new_stream(drv, 0x1)), 5 * MS)
        simdriver.enqueue_kernel(int(new_stream(drv)), MS)
        ok(drv.cuCtxSynchronize())
        assert time.perf_counter_ns() >= end

    def test_stream_context_and_device(self, drv: Any, ctx: Any) -> None:
        """cuStreamGetCtx and cuStreamGetDevice name the stream's context and device."""
        stream = new_stream(drv)
        assert ok(drv.cuStreamGetCtx(stream)) == ctx
        assert int(ok(drv.cuStreamGetDevice(stream))) == 0

    def test_destroyed_stream_is_invalid_handle(self, drv: Any, ctx: Any) -> None:
        """Using a destroyed stream returns CUDA_ERROR_INVALID_HANDLE."""
        stream = new_stream(drv)
        ok(drv.cuStreamDestroy(stream))
        assert code(drv.cuStreamQuery(stream)) == "CUDA_ERROR_INVALID_HANDLE"


class TestFaults:
    def test_sticky_launch_failure(self, drv: Any, ctx: Any, simdriver: Any) -> None:
        """After a launch failure every call in that context fails with CUDA_ERROR_LAUNCH_FAILED; others work."""
        event = new_event(drv)
        simdriver.inject_launch_failure(0)
        for result in (drv.cuEventRecord(event, 0), drv.cuEventQuery(event), drv.cuEventCreate(0),
                       drv.cuCtxSynchronize(), drv.cuStreamCreate(0)):  # fmt: skip
            assert code(result) == "CUDA_ERROR_LAUNCH_FAILED"
        drv.cuCtxSetCurrent(ok(drv.cuDevicePrimaryCtxRetain(ok(drv.cuDeviceGet(1)))))
        assert code(drv.cuEventCreate(0)) == "CUDA_SUCCESS"

    def test_invalid_handle_on_next_event_calls(self, drv: Any, ctx: Any, simdriver: Any) -> None:
        """inject_invalid_handle(2) fails exactly the next two event calls."""
        event = new_event(drv)
        simdriver.inject_invalid_handle(2)
        assert code(drv.cuEventRecord(event, 0)) == "CUDA_ERROR_INVALID_HANDLE"
        assert code(drv.cuEventQuery(event)) == "CUDA_ERROR_INVALID_HANDLE"
        assert code(drv.cuEventQuery(event)) == "CUDA_SUCCESS"

    def test_out_of_memory_after_n_events(self, drv: Any, ctx: Any, simdriver: Any) -> None:
        """inject_event_oom(3) lets three creations succeed, then each fails with OUT_OF_MEMORY."""
        simdriver.inject_event_oom(3)
        results = [code(drv.cuEventCreate(0)) for _ in range(5)]
        assert results == ["CUDA_SUCCESS"] * 3 + ["CUDA_ERROR_OUT_OF_MEMORY"] * 2
        assert simdriver.counters()["live_events"] == 3

    def test_reset_clears_faults_and_invalidates_handles(self, drv: Any, ctx: Any, simdriver: Any) -> None:
        """reset() clears sticky errors and counters; handles from before are invalid afterwards."""
        event = new_event(drv)
        simdriver.inject_launch_failure(0)
        simdriver.reset()
        assert simdriver.counters()["live_events"] == 0
        assert code(drv.cuEventQuery(event)) == "CUDA_ERROR_INVALID_HANDLE"
        drv.cuCtxSetCurrent(ok(drv.cuDevicePrimaryCtxRetain(ok(drv.cuDeviceGet(0)))))
        assert code(drv.cuEventCreate(0)) == "CUDA_SUCCESS"


class TestFork:
    def test_forked_child_cannot_use_cuda(self, drv: Any, ctx: Any) -> None:
        """In a child forked after cuInit every call, cuInit included, returns CUDA_ERROR_NOT_INITIALIZED."""
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            os.close(read_fd)
            codes = ",".join(code(r) for r in (drv.cuInit(0), drv.cuDeviceGetCount(), drv.cuEventCreate(0)))
            os.write(write_fd, codes.encode())
            os._exit(0)
        os.close(write_fd)
        with os.fdopen(read_fd) as pipe:
            child = pipe.read()
        os.waitpid(pid, 0)
        assert child == ",".join(["CUDA_ERROR_NOT_INITIALIZED"] * 3)
        assert code(drv.cuEventCreate(0)) == "CUDA_SUCCESS"


class TestMemory:
    """cuMemAlloc / cuMemFree / cuMemcpyHtoD / cuMemcpyDtoH, per the Memory Management chapter."""

    def test_round_trip_through_device_memory(self, drv: Any, ctx: Any) -> None:
        dptr = ok(drv.cuMemAlloc(16))
        ok(drv.cuMemcpyHtoD(dptr, b"0123456789abcdef", 16))
        out = bytearray(8)
        ok(drv.cuMemcpyDtoH(out, int(dptr) + 4, 8))
        assert bytes(out) == b"456789ab"
        ok(drv.cuMemFree(dptr))

    def test_allocations_are_not_cleared(self, drv: Any, ctx: Any) -> None:
        dptr = ok(drv.cuMemAlloc(4))
        out = bytearray(4)
        ok(drv.cuMemcpyDtoH(out, dptr, 4))
        assert bytes(out) == b"\xa5" * 4  # the simulator's fill: a read before any write shows
        ok(drv.cuMemFree(dptr))

    def test_invalid_arguments(self, drv: Any, ctx: Any) -> None:
        assert code(drv.cuMemAlloc(0)) == "CUDA_ERROR_INVALID_VALUE"
        dptr = ok(drv.cuMemAlloc(8))
        out = bytearray(16)
        assert code(drv.cuMemcpyDtoH(out, dptr, 16)) == "CUDA_ERROR_INVALID_VALUE"  # past the allocation
        assert code(drv.cuMemcpyDtoH(out, int(dptr) + (1 << 30), 1)) == "CUDA_ERROR_INVALID_VALUE"
        ok(drv.cuMemFree(dptr))
        assert code(drv.cuMemFree(dptr)) == "CUDA_ERROR_INVALID_VALUE"  # freed twice
        assert code(drv.cuMemcpyDtoH(out, dptr, 1)) == "CUDA_ERROR_INVALID_VALUE"  # use after free

    def test_needs_a_current_context(self, drv: Any, ctx: Any) -> None:
        dptr = ok(drv.cuMemAlloc(8))
        ok(drv.cuCtxPopCurrent())
        assert code(drv.cuMemAlloc(8)) == "CUDA_ERROR_INVALID_CONTEXT"
        assert code(drv.cuMemcpyDtoH(bytearray(8), dptr, 8)) == "CUDA_ERROR_INVALID_CONTEXT"
        ok(drv.cuCtxPushCurrent(ctx))
        ok(drv.cuMemFree(dptr))

    def test_device_to_host_copy_waits_for_blocking_streams(self, drv: Any, ctx: Any, simdriver: Any) -> None:
        """DtoH is ordered after the work of blocking streams: when it returns, that work has completed."""
        stream = ok(drv.cuStreamCreate(0))  # a blocking stream
        event = ok(drv.cuEventCreate(0))
        simdriver.enqueue_kernel(int(stream), 20 * MS)
        ok(drv.cuEventRecord(event, stream))
        assert code(drv.cuEventQuery(event)) == "CUDA_ERROR_NOT_READY"
        dptr = ok(drv.cuMemAlloc(8))
        blocking = simdriver.counters()["blocking_calls"]
        ok(drv.cuMemcpyDtoH(bytearray(8), dptr, 8))
        assert code(drv.cuEventQuery(event)) == "CUDA_SUCCESS"
        assert simdriver.counters()["blocking_calls"] == blocking + 1
        assert simdriver.calls("cuMemcpyDtoH") == 1
        for result in (drv.cuMemFree(dptr), drv.cuEventDestroy(event), drv.cuStreamDestroy(stream)):
            ok(result)
