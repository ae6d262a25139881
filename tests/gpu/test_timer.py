# SPDX-License-Identifier: Apache-2.0
"""CudaTimer against the simulated driver, through the real cuda-bindings."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from brickscope._gpu import CudaError, CudaTimer, CudaUnavailable, _driver, _timer

pytestmark = pytest.mark.gpu

MS = 1_000_000
#: Event timestamps are floored to 0.5 us, so a mark's time relative to the
#: anchor is off by less than 0.5 us; float32 milliseconds add a few ns.
QUANTUM_NS = 500
FLOAT_SLACK_NS = 100


def driver() -> Any:
    from cuda.bindings import driver as drv

    return drv


def new_stream(device: int = 0, flags: int = 0x1) -> Any:
    """A stream the 'program' creates on a device (non-blocking by default)."""
    drv = driver()
    drv.cuCtxPushCurrent(drv.cuDevicePrimaryCtxRetain(device)[1])
    stream = drv.cuStreamCreate(flags)[1]
    drv.cuCtxPopCurrent()
    return stream


def true_epoch_ns(simdriver: Any, timer: CudaTimer, mark: int) -> int:
    """When the simulator says the mark's event completed, as epoch ns on the timer's host clock."""
    return simdriver.event_time_ns(timer._marks[mark][0]) + _timer._EPOCH_OFFSET_NS


def tolerance_ns(timer: CudaTimer, ref: Any) -> int:
    """The alignment bound the timer claims: half the anchor window plus the event quantum."""
    anchor = timer._contexts[ref.ctx].anchor
    return anchor.window_ns // 2 + QUANTUM_NS + FLOAT_SLACK_NS


class TestMarkPair:
    def run_pair(self, timer: CudaTimer, simdriver: Any) -> tuple[Any, int, int, int, int, int]:
        ref = timer.stream_ref(new_stream())
        simdriver.enqueue_kernel(ref.handle, 20 * MS)  # a busy stream: marks land on work boundaries
        blocking = simdriver.counters()["blocking_calls"]
        start = timer.mark(ref)
        k_start, k_end = simdriver.enqueue_kernel(ref.handle, 2 * MS)
        end = timer.mark(ref)
        blocked = simdriver.counters()["blocking_calls"] - blocking
        timer.wait(end)
        return ref, start, end, blocked, k_start, k_end

    def test_elapsed_is_the_kernel_time(self, cuda_timer: CudaTimer, simdriver: Any) -> None:
        """A mark pair around a 2 ms simulated kernel measures 2 ms within the 0.5 us resolution."""
        _, start, end, blocked, _, _ = self.run_pair(cuda_timer, simdriver)
        assert abs(cuda_timer.elapsed_ns(start, end) - 2 * MS) <= QUANTUM_NS
        assert blocked == 0  # marking never waited for the GPU (counted by the driver, not timed)

    def test_host_times_land_where_the_work_ran(self, cuda_timer: CudaTimer, simdriver: Any) -> None:
        """host_time_ns of both marks matches the simulator's timeline of the kernel within the anchor bound."""
        ref, start, end, _, k_start, k_end = self.run_pair(cuda_timer, simdriver)
        tol = tolerance_ns(cuda_timer, ref)
        assert abs(cuda_timer.host_time_ns(start) - (k_start + _timer._EPOCH_OFFSET_NS)) <= tol
        assert abs(cuda_timer.host_time_ns(end) - (k_end + _timer._EPOCH_OFFSET_NS)) <= tol

    def test_alignment_holds_for_many_marks(self, cuda_timer: CudaTimer, simdriver: Any) -> None:
        """Across 200 marks on an idle stream, every host time is within the anchor bound of the truth."""
        ref = cuda_timer.stream_ref(new_stream())
        marks = []
        for _ in range(200):
            marks.append(cuda_timer.mark(ref))
            simdriver.enqueue_kernel(ref.handle, 3_000)
        cuda_timer.wait(marks[-1])
        errors = [cuda_timer.host_time_ns(m) - true_epoch_ns(simdriver, cuda_timer, m) for m in marks]
        assert max(abs(e) for e in errors) <= tolerance_ns(cuda_timer, ref)


class TestCompletion:
    def test_is_complete_never_blocks(self, cuda_timer: CudaTimer, simdriver: Any) -> None:
        """is_complete is False while work is queued and True after it ends, with no blocking call."""
        ref = cuda_timer.stream_ref(new_stream())
        _, end = simdriver.enqueue_kernel(ref.handle, 20 * MS)
        mark = cuda_timer.mark(ref)
        before = simdriver.counters()["blocking_calls"]
        assert cuda_timer.is_complete(mark) is False
        while time.perf_counter_ns() < end:
            time.sleep(0.002)
        assert cuda_timer.is_complete(mark) is True
        assert simdriver.counters()["blocking_calls"] == before

    def test_wait_blocks_until_completion_and_is_counted(self, cuda_timer: CudaTimer, simdriver: Any) -> None:
        """wait returns only once the mark is complete and counts one blocking driver call."""
        ref = cuda_timer.stream_ref(new_stream())
        _, end = simdriver.enqueue_kernel(ref.handle, 10 * MS)
        mark = cuda_timer.mark(ref)
        before = simdriver.counters()["blocking_calls"]
        cuda_timer.wait(mark)
        assert time.perf_counter_ns() >= end
        assert simdriver.counters()["blocking_calls"] == before + 1
        assert cuda_timer.stats()["waits"] == 1

    def test_incomplete_marks_cannot_be_timed(self, cuda_timer: CudaTimer, simdriver: Any) -> None:
        """elapsed_ns and host_time_ns of an incomplete mark raise CudaError NOT_READY."""
        ref = cuda_timer.stream_ref(new_stream())
        start = cuda_timer.mark(ref)
        simdriver.enqueue_kernel(ref.handle, 50 * MS)
        end = cuda_timer.mark(ref)
        with pytest.raises(CudaError) as elapsed:
            cuda_timer.elapsed_ns(start, end)
        with pytest.raises(CudaError) as host:
            cuda_timer.host_time_ns(end)
        assert elapsed.value.code_name == host.value.code_name == "CUDA_ERROR_NOT_READY"

    def test_unknown_mark_raises_value_error(self, cuda_timer: CudaTimer) -> None:
        """Resolving a released or failed mark raises ValueError; releasing it again is a no-op."""
        mark = cuda_timer.mark(cuda_timer.stream_ref(None))
        cuda_timer.release(mark)
        cuda_timer.release(mark)
        cuda_timer.release(-1)
        with pytest.raises(ValueError, match="unknown"):
            cuda_timer.is_complete(mark)

    def test_synchronize_waits_for_the_stream(self, cuda_timer: CudaTimer, simdriver: Any) -> None:
        """synchronize blocks until the stream's queued work is done, with one blocking call."""
        ref = cuda_timer.stream_ref(new_stream())
        _, end = simdriver.enqueue_kernel(ref.handle, 5 * MS)
        before = simdriver.counters()["blocking_calls"]
        cuda_timer.synchronize(ref)
        assert time.perf_counter_ns() >= end
        assert simdriver.counters()["blocking_calls"] == before + 1


class TestStreamsAndDevices:
    def interval(self, timer: CudaTimer, ref: Any, simdriver: Any, kernel_ns: int) -> tuple[int, int]:
        simdriver.enqueue_kernel(ref.handle, 10 * MS)  # busy: the marks bracket exactly the kernel
        start = timer.mark(ref)
        simdriver.enqueue_kernel(ref.handle, kernel_ns)
        end = timer.mark(ref)
        timer.wait(end)
        return timer.host_time_ns(start), timer.host_time_ns(end)

    def test_two_streams_overlap_in_order(self, cuda_timer: CudaTimer, simdriver: Any) -> None:
        """Work on two non-blocking streams gives overlapping intervals, ordered as launched."""
        a, b = cuda_timer.stream_ref(new_stream()), cuda_timer.stream_ref(new_stream())
        a0 = cuda_timer.mark(a)
        simdriver.enqueue_kernel(a.handle, 10 * MS)
        a1 = cuda_timer.mark(a)
        b0 = cuda_timer.mark(b)
        simdriver.enqueue_kernel(b.handle, 10 * MS)
        b1 = cuda_timer.mark(b)
        cuda_timer.wait(a1)
        cuda_timer.wait(b1)
        (sa, ea), (sb, eb) = [(cuda_timer.host_time_ns(x), cuda_timer.host_time_ns(y)) for x, y in ((a0, a1), (b0, b1))]
        assert sa < sb < ea < eb
        # They overlap by what the simulator's own timeline says (however late b was launched).
        overlap = true_epoch_ns(simdriver, cuda_timer, a1) - true_epoch_ns(simdriver, cuda_timer, b0)
        assert abs((ea - sb) - overlap) <= tolerance_ns(cuda_timer, a) + tolerance_ns(cuda_timer, b)

    def test_legacy_stream_serialises_with_blocking_streams_only(
        self, cuda_timer: CudaTimer, simdriver: Any
    ) -> None:
        """A legacy-stream mark waits for a blocking stream's kernel but not a non-blocking one's."""
        legacy = cuda_timer.stream_ref(None)
        blocking = cuda_timer.stream_ref(new_stream(flags=0x0))
        non_blocking = cuda_timer.stream_ref(new_stream(flags=0x1))
        _, nb_end = simdriver.enqueue_kernel(non_blocking.handle, 300 * MS)  # far longer than any scheduling delay
        first = cuda_timer.mark(legacy)
        _, b_end = simdriver.enqueue_kernel(blocking.handle, 10 * MS)
        second = cuda_timer.mark(legacy)
        cuda_timer.wait(second)
        t_first, t_second = cuda_timer.host_time_ns(first), cuda_timer.host_time_ns(second)
        tol = tolerance_ns(cuda_timer, legacy)
        assert t_first < nb_end + _timer._EPOCH_OFFSET_NS - 200 * MS
        assert abs(t_second - (b_end + _timer._EPOCH_OFFSET_NS)) <= tol

    def test_marks_on_another_device_keep_the_callers_context(self, cuda_timer: CudaTimer, simdriver: Any) -> None:
        """Marking a device 1 stream while device 0 is current records in device 1 and leaves device 0 current."""
        drv = driver()
        ctx0 = drv.cuDevicePrimaryCtxRetain(0)[1]
        drv.cuCtxSetCurrent(ctx0)
        ref = cuda_timer.stream_ref(new_stream(device=1))
        start, end = self.interval(cuda_timer, ref, simdriver, 2 * MS)
        assert ref.device == 1
        assert abs((end - start) - 2 * MS) <= 2 * tolerance_ns(cuda_timer, ref)
        assert drv.cuCtxGetCurrent()[1] == ctx0

    def test_mark_from_a_thread_without_context(self, cuda_timer: CudaTimer, simdriver: Any) -> None:
        """A thread with no current context can mark; it still has none afterwards."""
        ref = cuda_timer.stream_ref(new_stream())
        result: dict[str, Any] = {}

        def work() -> None:
            result["mark"] = cuda_timer.mark(ref)
            result["ctx"] = int(driver().cuCtxGetCurrent()[1])

        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        assert result["mark"] > 0 and result["ctx"] == 0
        cuda_timer.wait(result["mark"])

    def test_concurrent_marks_from_threads(self, cuda_timer: CudaTimer, simdriver: Any) -> None:
        """Four threads marking and releasing concurrently get unique ids and no failures."""
        ref = cuda_timer.stream_ref(new_stream())
        ids: list[list[int]] = [[] for _ in range(4)]

        def work(out: list[int]) -> None:
            for _ in range(2000):
                mark = cuda_timer.mark(ref)
                out.append(mark)
                cuda_timer.release(mark)

        threads = [threading.Thread(target=work, args=(out,)) for out in ids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        flat = [m for out in ids for m in out]
        assert len(set(flat)) == 8000 and min(flat) > 0
        stats = cuda_timer.stats()
        assert (stats["failures"], stats["marks"], stats["live_marks"]) == (0, 8000, 0)


class TestFaults:
    def test_sticky_launch_failure(
        self, cuda_timer: CudaTimer, simdriver: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        """After a sticky launch failure mark returns -1 (counted, logged once) and queries raise CudaError."""
        ref = cuda_timer.stream_ref(new_stream())
        earlier = cuda_timer.mark(ref)
        simdriver.inject_launch_failure(0)
        with caplog.at_level(logging.WARNING, logger="brickscope._gpu._timer"):
            assert [cuda_timer.mark(ref) for _ in range(3)] == [-1, -1, -1]
        assert cuda_timer.stats()["failures.CUDA_ERROR_LAUNCH_FAILED"] == 3
        assert len([r for r in caplog.records if "CUDA_ERROR_LAUNCH_FAILED" in r.getMessage()]) == 1
        with pytest.raises(CudaError) as exc:
            cuda_timer.is_complete(earlier)
        assert exc.value.code_name == "CUDA_ERROR_LAUNCH_FAILED"

    def test_out_of_memory_when_the_pool_grows(
        self, cuda_timer: CudaTimer, simdriver: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        """When event creation runs out of memory, marks that need a new event return -1 and are counted."""
        ref = cuda_timer.stream_ref(new_stream())
        free = cuda_timer.stats()["events_free"]
        simdriver.inject_event_oom(3)
        with caplog.at_level(logging.WARNING, logger="brickscope._gpu._timer"):
            marks = [cuda_timer.mark(ref) for _ in range(free + 5)]
        assert all(m > 0 for m in marks[: free + 3]) and marks[free + 3 :] == [-1, -1]
        assert cuda_timer.stats()["failures.CUDA_ERROR_OUT_OF_MEMORY"] == 2
        assert "CUDA_ERROR_OUT_OF_MEMORY" in caplog.text
        cuda_timer.release(marks[0])
        assert cuda_timer.mark(ref) > 0  # a released event is reused without creating one

    def test_invalid_handle(self, cuda_timer: CudaTimer, simdriver: Any, caplog: pytest.LogCaptureFixture) -> None:
        """An invalid handle fails one mark (-1, event kept) and one query (CudaError); the next calls work."""
        ref = cuda_timer.stream_ref(new_stream())
        mark = cuda_timer.mark(ref)
        simdriver.inject_invalid_handle(2)
        with caplog.at_level(logging.WARNING, logger="brickscope._gpu._timer"):
            assert cuda_timer.mark(ref) == -1
        with pytest.raises(CudaError) as exc:
            cuda_timer.is_complete(mark)
        assert exc.value.code_name == "CUDA_ERROR_INVALID_HANDLE"
        cuda_timer.wait(mark)
        assert cuda_timer.is_complete(mark) is True
        assert cuda_timer.stats()["failures.CUDA_ERROR_INVALID_HANDLE"] == 1

    def test_pool_budget_is_a_hard_limit(
        self, simdriver: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        """With max_events reached, mark returns -1 (pool_exhausted) until a mark is released."""
        with CudaTimer(max_events=8) as timer:
            ref = timer.stream_ref(new_stream())
            with caplog.at_level(logging.WARNING, logger="brickscope._gpu._timer"):
                marks = [timer.mark(ref) for _ in range(8)]
            held = [m for m in marks if m > 0]
            assert len(held) == 7 and marks[-1] == -1  # one event is the anchor
            assert timer.stats()["failures.pool_exhausted"] == 1
            timer.release(held[0])
            assert timer.mark(ref) > 0
            assert simdriver.counters()["live_events"] == 8


class TestNoLeak:
    def test_100k_mark_release_cycles_stay_bounded(self, cuda_timer: CudaTimer, simdriver: Any) -> None:
        """100,000 mark/release cycles never hold more than a handful of driver events."""
        ref = cuda_timer.stream_ref(new_stream())
        pair_ref = cuda_timer.stream_ref(None)
        for _ in range(50_000):
            start, end = cuda_timer.mark(ref), cuda_timer.mark(pair_ref)
            cuda_timer.release(start)
            cuda_timer.release(end)
        counters, stats = simdriver.counters(), cuda_timer.stats()
        assert stats["marks"] == 100_000 and stats["failures"] == 0
        assert counters["live_events"] <= 8
        assert counters["events_created"] == counters["live_events"]


class TestDegradation:
    def test_missing_cuda_python(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without cuda-python, CudaTimer raises CudaUnavailable saying so."""
        monkeypatch.setattr(_driver, "_drv", None)
        monkeypatch.setitem(sys.modules, "cuda.bindings", None)
        monkeypatch.setitem(sys.modules, "cuda.bindings.driver", None)
        with pytest.raises(CudaUnavailable) as exc:
            CudaTimer()
        assert "cuda-python is not installed" in exc.value.reason

    def test_missing_driver_library(self) -> None:
        """Without libcuda.so.1, CudaTimer raises CudaUnavailable naming the driver library."""
        code = (
            "import ctypes\n"
            "try:\n"
            "    ctypes.CDLL('libcuda.so.1')\n"
            "    print('SKIP real driver present')\n"
            "except OSError:\n"
            "    from brickscope._gpu import CudaTimer, CudaUnavailable\n"
            "    try:\n"
            "        CudaTimer()\n"
            "    except CudaUnavailable as exc:\n"
            "        print('UNAVAILABLE', exc.reason)\n"
        )
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
        if out.stdout.startswith("SKIP"):
            pytest.skip("a real CUDA driver is installed")
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("UNAVAILABLE CUDA driver library not usable"), out.stdout

    def test_no_device(self, simdriver: Any) -> None:
        """A driver with no device makes CudaTimer raise CudaUnavailable('no CUDA device ...')."""
        simdriver.set_device_count(0)
        with pytest.raises(CudaUnavailable, match="no CUDA device"):
            CudaTimer()

    def test_simulator_through_ld_library_path(self, simdriver_env: dict[str, str]) -> None:
        """A subprocess with LD_LIBRARY_PATH at the simulator times a kernel through CudaTimer."""
        code = (
            "import ctypes\n"
            "from cuda.bindings import driver\n"
            "from brickscope._gpu import CudaTimer\n"
            "sim = ctypes.CDLL('libcuda.so.1')\n"
            "t = CudaTimer()\n"
            "driver.cuCtxSetCurrent(driver.cuDevicePrimaryCtxRetain(0)[1])\n"
            "ref = t.stream_ref(None)\n"
            "a = t.mark(ref)\n"
            "rc = sim.simcuda_enqueue_kernel(None, ctypes.c_uint64(1000000), ctypes.c_uint64(0), None, None)\n"
            "assert rc == 0, rc\n"
            "b = t.mark(ref)\n"
            "t.wait(b)\n"
            "print(t.device_names()[0], t.elapsed_ns(a, b))\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=simdriver_env, timeout=60)
        assert out.returncode == 0, out.stderr
        name, elapsed = out.stdout.rsplit(" ", 1)
        assert name == "brickscope SimGPU 0"
        assert 1 * MS <= int(elapsed) < 2 * MS

    def test_forked_child_drops_cuda_state(self, cuda_timer: CudaTimer, simdriver: Any) -> None:
        """In a forked child, mark returns -1 without calling the driver and set-up raises CudaUnavailable."""
        ref = cuda_timer.stream_ref(new_stream())
        assert cuda_timer.mark(ref) > 0
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            os.close(read_fd)
            logging.disable(logging.CRITICAL)
            records = simdriver.calls("cuEventRecord")
            results = [str(cuda_timer.mark(ref)), str(simdriver.calls("cuEventRecord") - records)]
            for setup in (lambda: cuda_timer.stream_ref(None), CudaTimer):
                try:
                    setup()
                    results.append("no error")
                except CudaUnavailable as exc:
                    results.append(type(exc).__name__)
            os.write(write_fd, ",".join(results).encode())
            os._exit(0)
        os.close(write_fd)
        with os.fdopen(read_fd) as pipe:
            child = pipe.read()
        os.waitpid(pid, 0)
        assert child == "-1,0,CudaUnavailable,CudaUnavailable"
        assert cuda_timer.mark(ref) > 0  # the parent is unaffected

    def test_bad_max_events(self, simdriver: Any) -> None:
        """max_events below a pair raises ValueError at set-up."""
        with pytest.raises(ValueError, match="max_events"):
            CudaTimer(max_events=1)


class TestAnchorsAndClose:
    def test_reanchor_keeps_alignment(self, cuda_timer: CudaTimer, simdriver: Any) -> None:
        """reanchor re-establishes every anchor; host times stay within the new anchor's bound."""
        ref = cuda_timer.stream_ref(new_stream())
        before = cuda_timer.stats()["reanchors"]
        mark = cuda_timer.mark(ref)
        cuda_timer.reanchor()
        cuda_timer.reanchor(device=0)
        assert cuda_timer.stats()["reanchors"] == before + 2
        cuda_timer.wait(mark)
        error = cuda_timer.host_time_ns(mark) - true_epoch_ns(simdriver, cuda_timer, mark)
        assert abs(error) <= tolerance_ns(cuda_timer, ref)

    def test_stale_anchor_is_renewed_without_blocking(
        self, cuda_timer: CudaTimer, simdriver: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An anchor older than ANCHOR_MAX_AGE_NS is renewed by host_time_ns with no blocking driver call."""
        ref = cuda_timer.stream_ref(new_stream())
        mark = cuda_timer.mark(ref)
        monkeypatch.setattr(_timer, "ANCHOR_MAX_AGE_NS", 0)
        before, blocking = cuda_timer.stats()["reanchors"], simdriver.counters()["blocking_calls"]
        time.sleep(0.001)
        cuda_timer.host_time_ns(mark)
        assert cuda_timer.stats()["reanchors"] == before + 1
        assert simdriver.counters()["blocking_calls"] == blocking

    def test_close_destroys_everything_once(self, simdriver: Any) -> None:
        """close destroys all events and streams and releases the contexts; it is idempotent."""
        timer = CudaTimer()
        refs = [timer.stream_ref(None), timer.stream_ref(new_stream(device=1))]
        driver().cuDevicePrimaryCtxRelease(1)  # new_stream's own retain
        marks = [timer.mark(r) for r in refs for _ in range(3)]
        assert all(m > 0 for m in marks) and simdriver.counters()["live_events"] > 0
        timer.close()
        timer.close()
        counters = simdriver.counters()
        assert (counters["live_events"], counters["active_contexts"]) == (0, 0)
        assert timer.mark(refs[0]) == -1
        with pytest.raises(CudaUnavailable, match="closed"):
            timer.stream_ref(None)

    def test_device_names(self, cuda_timer: CudaTimer) -> None:
        """device_names lists every device by ordinal."""
        assert cuda_timer.device_names() == ["brickscope SimGPU 0", "brickscope SimGPU 1"]
