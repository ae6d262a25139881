# SPDX-License-Identifier: Apache-2.0
"""Scopes timed with CUDA events end to end: real cuda-bindings, simulated driver, OTel spans."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import brickscope as bs
from brickscope.trace import attributes as A

pytestmark = pytest.mark.gpu

MS = 1_000_000
QUANTUM_NS = 500  # cuEventElapsedTime resolution


def assert_bricks_measure_their_kernels(bricks, ends):
    """Each brick's GPU time is its kernel's: from the stream's tail when its start event was
    recorded (the previous kernel's end) to its kernel's end, as the simulator laid them out.

    100 us each while the host stayed ahead of the stream (the lead kernel's purpose); a brick
    enqueued after the stream ran dry also holds the idle time before its kernel, and the
    simulator's timeline says how much, so the check does not depend on the machine's load.
    """
    bricks = sorted(bricks, key=lambda b: b.start_time)
    expected = [end - previous for previous, end in zip(ends, ends[1:])]
    assert len(bricks) == len(expected)
    assert all(abs(b.attributes[A.GPU_DURATION_NS] - want) <= QUANTUM_NS for b, want in zip(bricks, expected))
    assert all(want >= 100_000 for want in expected)


ROOT = Path(__file__).resolve().parents[2]


def new_stream(device: int = 0, flags: int = 0x1) -> Any:
    """A stream the program creates (non-blocking by default), as an int handle."""
    from cuda.bindings import driver as drv

    drv.cuCtxPushCurrent(drv.cuDevicePrimaryCtxRetain(device)[1])
    stream = drv.cuStreamCreate(flags)[1]
    drv.cuCtxPopCurrent()
    return int(stream)


@pytest.fixture(name="pipeline")
def _pipeline(simdriver):
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    bs.shutdown()


def configure(provider, **kwargs):
    kwargs.setdefault("max_delay_millis", 60_000)
    session = bs.configure(provider, clock="cuda", **kwargs)
    assert session.clock == "cuda"
    return session


class TestGpuTiming:
    def test_brick_reports_the_kernels_gpu_time_not_the_host_time(self, pipeline, simdriver):
        """A brick around a 2 ms simulated kernel lasts 2 ms on the GPU; its host scope takes microseconds."""
        provider, exporter = pipeline
        configure(provider)
        stream = new_stream()
        # Earlier work keeps the stream busy, as in a real decode loop: the brick's start
        # event completes when that work ends and the 2 ms kernel follows it directly. (On an
        # idle stream the GPU interval would also hold the host's launch gap, as on a GPU.)
        queued_from = bs.now_ns()
        simdriver.enqueue_kernel(stream, 5 * MS)
        queued_by = bs.now_ns()
        with bs.brick("ffn_down", stream=stream):
            simdriver.enqueue_kernel(stream, 2 * MS)
            launched_by = bs.now_ns()
        assert bs.sync() is True
        (span,) = exporter.get_finished_spans()
        attributes = span.attributes
        assert attributes[A.CLOCK] == "cuda"
        # 2 ms, plus the stream's idle time if the host was held up past the queued work's end
        # before launching the kernel (the GPU interval then holds that gap, as on a GPU)
        idle = max(0, launched_by - (queued_from + 5 * MS))
        assert 2 * MS - QUANTUM_NS <= attributes[A.GPU_DURATION_NS] <= 2 * MS + idle + QUANTUM_NS
        assert span.end_time - span.start_time == attributes[A.GPU_DURATION_NS]
        assert attributes[A.HOST_DURATION_NS] < 1 * MS
        assert attributes[A.GPU_STREAM_ID] == stream
        assert attributes[A.GPU_DEVICE_ID] == 0
        # GPU work starts after its launch on the host and behind the 5 ms already queued: its
        # start event completes at the later of the queued kernel's end and the event's own
        # recording (inside the brick). Bounds from the host's own timestamps, so they hold
        # however long the host is descheduled between the two launches.
        host_start, host_end = attributes[A.HOST_START_NS], attributes[A.HOST_START_NS] + attributes[A.HOST_DURATION_NS]
        assert max(host_start, queued_from + 5 * MS) - QUANTUM_NS <= span.start_time
        assert span.start_time <= max(queued_by + 5 * MS, host_end) + QUANTUM_NS

    def test_deferred_never_blocks_inside_the_loop(self, pipeline, simdriver):
        """Deferred mode makes no blocking driver call while bricks run; sync() resolves them all."""
        provider, exporter = pipeline
        configure(provider)
        stream = new_stream()
        _, lead_end = simdriver.enqueue_kernel(stream, 5 * MS)  # keep the stream busy
        before = simdriver.counters()["blocking_calls"]
        ends = [lead_end]
        with bs.layer(0):
            for _ in range(50):
                with bs.brick("attention_score", stream=stream):
                    ends.append(simdriver.enqueue_kernel(stream, 100_000)[1])
        assert simdriver.counters()["blocking_calls"] == before
        assert exporter.get_finished_spans() == ()
        assert bs.sync() is True
        spans = exporter.get_finished_spans()
        assert len(spans) == 51
        bricks = [s for s in spans if s.name == "attention_score"]
        assert_bricks_measure_their_kernels(bricks, ends)

    def test_step_end_resolves_only_what_is_complete(self, pipeline, simdriver):
        """At a step end in deferred mode, finished GPU work is emitted without blocking; the rest waits."""
        provider, exporter = pipeline
        session = configure(provider)
        stream = new_stream()
        before = simdriver.counters()["blocking_calls"]
        with bs.step(0):
            with bs.brick("rms_norm", stream=stream):
                simdriver.enqueue_kernel(stream, 1)
            time.sleep(0.002)
            with bs.brick("ffn_up", stream=stream):
                simdriver.enqueue_kernel(stream, 200 * MS)
        assert simdriver.counters()["blocking_calls"] == before
        assert [s.name for s in exporter.get_finished_spans()] == ["rms_norm"]
        assert session.stats()["pending"] == 2
        assert bs.sync() is True
        assert [s.name for s in exporter.get_finished_spans()] == ["rms_norm", "ffn_up", "step"]

    def test_per_layer_waits_at_layer_end_only(self, pipeline, simdriver):
        """per_layer: no wait at brick ends; the layer end waits for the GPU (polling the end
        events, bounded by sync_timeout_millis) and the spans are out then."""
        provider, exporter = pipeline
        configure(provider, sync_mode="per_layer")
        stream = new_stream()
        with bs.layer(0):
            before = simdriver.counters()["blocking_calls"]
            for _ in range(3):
                with bs.brick("ffn_up", stream=stream):
                    _, kernel_end = simdriver.enqueue_kernel(stream, 1 * MS)
            assert simdriver.counters()["blocking_calls"] == before
            assert exporter.get_finished_spans() == ()
        assert time.monotonic_ns() >= kernel_end  # the layer's end waited for the last kernel
        assert len(exporter.get_finished_spans()) == 4

    def test_immediate_waits_at_each_brick(self, pipeline, simdriver):
        """immediate: each brick end waits for its GPU work and emits its span at once."""
        provider, exporter = pipeline
        configure(provider, sync_mode="immediate")
        stream = new_stream()
        for i in range(3):
            with bs.brick("ffn_up", stream=stream):
                _, kernel_end = simdriver.enqueue_kernel(stream, 1 * MS)
            assert time.monotonic_ns() >= kernel_end
            assert len(exporter.get_finished_spans()) == i + 1

    @pytest.mark.parametrize("mode", ["immediate", "overflow"])
    def test_a_hung_stream_holds_a_hot_path_sync_only_until_its_deadline(self, pipeline, simdriver, mode):
        """A kernel that would run 60 s: the brick's end (immediate) or the overflow's forced
        sync returns at sync_timeout_millis; the scope stays pending, nothing is lost."""
        provider, exporter = pipeline
        kwargs = {"sync_mode": "immediate"} if mode == "immediate" else {"max_pending": 1}
        session = configure(provider, sync_timeout_millis=100, **kwargs)
        stream = new_stream()
        started = time.monotonic()
        with bs.brick("ffn_up", stream=stream):
            simdriver.enqueue_kernel(stream, 60_000 * MS)
        assert time.monotonic() - started < 20  # hang guard only: the kernel alone is 60 s
        stats = session.stats()
        assert stats["sync_timeouts"] == 1
        assert stats["pending"] == 1
        assert exporter.get_finished_spans() == ()
        session.shutdown(timeout_millis=100)  # still hung: emitted on the host clock, said why
        (span,) = exporter.get_finished_spans()
        assert span.attributes[A.GPU_TIMING_ERROR] == "unresolved_at_shutdown"

    def test_a_stream_whose_set_up_fails_falls_back_once(self, pipeline, simdriver, caplog):
        """Event creation failing while a stream is set up: host timing for its scopes,
        counted and logged once, never retried on every scope."""
        provider, exporter = pipeline
        session = configure(provider)
        stream = new_stream()
        simdriver.inject_event_oom(0)
        try:
            creations = simdriver.calls("cuEventCreate")
            for _ in range(5):
                with bs.brick("ffn_up", stream=stream):
                    pass
            tried = simdriver.calls("cuEventCreate") - creations
        finally:
            simdriver.inject_event_oom(-1)
        session.sync()
        spans = exporter.get_finished_spans()
        assert [s.attributes[A.CLOCK] for s in spans] == ["host"] * 5
        assert session.stats()["gpu_fallbacks"] == 1
        assert tried <= 1  # the failed set-up is not attempted again for the next four
        assert sum("could not be set up" in r.getMessage() for r in caplog.records) == 1

    def test_none_mode_never_touches_the_gpu(self, pipeline, simdriver):
        """sync_mode='none' times on the host clock and makes no event calls."""
        provider, exporter = pipeline
        session = bs.configure(provider, clock="cuda", sync_mode="none")
        records = simdriver.calls("cuEventRecord")
        with bs.brick("rms_norm"):
            pass
        bs.sync()
        assert session.clock == "host"
        assert simdriver.calls("cuEventRecord") == records
        assert exporter.get_finished_spans()[0].attributes[A.CLOCK] == "host"

    def test_two_streams_overlap_on_the_host_timeline(self, pipeline, simdriver):
        """Work on two streams at once gives overlapping GPU intervals, each ordered as enqueued."""
        provider, exporter = pipeline
        configure(provider)
        first, second = new_stream(), new_stream()
        simdriver.enqueue_kernel(first, 1 * MS)
        simdriver.enqueue_kernel(second, 1 * MS)
        with bs.brick("attention_score", stream=first):
            simdriver.enqueue_kernel(first, 5 * MS)
        with bs.brick("all_reduce", stream=second):
            simdriver.enqueue_kernel(second, 5 * MS)
        with bs.brick("ffn_up", stream=first):
            simdriver.enqueue_kernel(first, 1 * MS)
        bs.sync()
        spans = {s.name: s for s in exporter.get_finished_spans()}
        attn, reduce, ffn = spans["attention_score"], spans["all_reduce"], spans["ffn_up"]
        assert reduce.start_time < attn.end_time and attn.start_time < reduce.end_time  # overlap
        assert attn.end_time <= ffn.start_time + QUANTUM_NS  # stream order on the first stream
        assert attn.attributes[A.GPU_STREAM_ID] != reduce.attributes[A.GPU_STREAM_ID]

    def test_layer_spans_cover_their_bricks_gpu_time(self, pipeline, simdriver):
        """A layer has no stream of its own; its span is the GPU extent of the bricks inside."""
        provider, exporter = pipeline
        configure(provider)
        stream = new_stream()
        _, lead_end = simdriver.enqueue_kernel(stream, 2 * MS)
        with bs.layer(0):
            for _ in range(3):
                with bs.brick("ffn_up", stream=stream):
                    _, last_end = simdriver.enqueue_kernel(stream, 1 * MS)
        bs.sync()
        spans = exporter.get_finished_spans()
        layer = next(s for s in spans if s.name == "layer")
        bricks = [s for s in spans if s.name == "ffn_up"]
        assert layer.attributes[A.CLOCK] == "cuda"
        assert layer.start_time == min(b.start_time for b in bricks)
        assert layer.end_time == max(b.end_time for b in bricks)
        # The first brick's start event completes at the stream's tail, the lead kernel's end;
        # the last brick's end event at its kernel's end. The extent is 3 ms when the host kept
        # ahead of the stream and longer by the idle gaps when it did not; either way it is the
        # simulator's own timeline, so the check holds whatever the machine's load.
        extent = layer.end_time - layer.start_time
        assert extent >= 3 * MS - 2 * QUANTUM_NS
        assert abs(extent - (last_end - lead_end)) <= 2 * QUANTUM_NS


class TestDegradation:
    def test_sticky_launch_failure_mid_run(self, pipeline, simdriver, caplog):
        """After a sticky launch failure, every span still arrives, host-timed with the error; nothing raises."""
        provider, exporter = pipeline
        session = configure(provider)
        stream = new_stream()
        with bs.brick("rms_norm", stream=stream):
            simdriver.enqueue_kernel(stream, 10_000)
        simdriver.inject_launch_failure(0)
        for _ in range(5):
            with bs.brick("ffn_up", stream=stream):
                pass
        assert bs.sync() is True
        spans = exporter.get_finished_spans()
        assert len(spans) == 6
        failed = [s for s in spans if s.attributes[A.CLOCK] == "host"]
        assert len(failed) >= 5
        assert all(s.attributes[A.GPU_TIMING_ERROR] for s in failed)
        assert session.stats()["gpu_timing_errors"] == len(failed)

    def test_event_oom_when_the_pool_grows(self, pipeline, simdriver):
        """Out of memory at event creation: affected spans are host-timed with an error, counted, delivered."""
        provider, exporter = pipeline
        session = configure(provider)
        simdriver.inject_event_oom(0)
        for _ in range(3):
            with bs.brick("ffn_up"):
                pass
        bs.sync()
        spans = exporter.get_finished_spans()
        assert len(spans) == 3
        assert all(s.attributes[A.CLOCK] == "host" for s in spans)
        errors = {s.attributes[A.GPU_TIMING_ERROR] for s in spans}
        assert "CUDA_ERROR_OUT_OF_MEMORY" in errors and errors <= {"CUDA_ERROR_OUT_OF_MEMORY", "mark_failed"}
        assert session.stats()["gpu_timing_errors"] == 3

    def test_invalid_handle_on_query(self, pipeline, simdriver):
        """An invalid handle during resolution marks the span with the CUDA error name; no exception."""
        provider, exporter = pipeline
        configure(provider)
        stream = new_stream()
        with bs.brick("rms_norm", stream=stream):
            simdriver.enqueue_kernel(stream, 10_000)
        simdriver.inject_invalid_handle(2)
        assert bs.sync() is True
        (span,) = exporter.get_finished_spans()
        assert span.attributes[A.GPU_TIMING_ERROR] == "CUDA_ERROR_INVALID_HANDLE"
        assert span.attributes[A.CLOCK] == "host"

    def test_clock_cuda_without_a_device_is_a_setup_error(self, simdriver):
        """clock='cuda' with no device raises ValueError at configure time."""
        simdriver.set_device_count(0)
        with pytest.raises(ValueError, match="clock='cuda'"):
            bs.configure(TracerProvider(), clock="cuda")

    def test_no_event_leak_over_100k_scopes(self, pipeline, simdriver):
        """100,000 GPU-timed bricks keep the live-event count bounded (events are pooled and reused)."""
        provider, exporter = pipeline
        provider._active_span_processor._span_processors = ()  # measure the recorder, not the exporter
        configure(provider, max_pending=4096)
        peak = 0
        for step in range(20):
            with bs.step(step):
                for _ in range(5000):
                    with bs.brick("rms_norm"):
                        pass
            bs.sync()
            peak = max(peak, simdriver.counters()["live_events"])
        assert peak <= 2 * 4096 + 64


class TestQuickstartOnTheSimulator:
    def test_quickstart_gets_gpu_timed_spans(self, simdriver_env, tmp_path):
        """The quickstart with clock=cuda on the simulated driver times every brick with CUDA events."""
        result = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--out", str(tmp_path), "--steps", "2",
             "--clock", "cuda"],
            capture_output=True, text=True, timeout=120, env=simdriver_env,
        )
        assert result.returncode == 0, result.stderr
        assert "clock: cuda" in result.stdout
        assert "Self time by brick (clock: cuda" in result.stdout
        assert "GPU timing errors: 0" in result.stdout


class TestResolutionQueries:
    """The GPU queries of one resolution batch (SpanMaker.drain in C) share their set-up."""

    def test_a_thread_with_no_context_current_pushes_it_once_per_batch(self, pipeline, simdriver):
        """Resolving 50 GPU bricks on a thread where no context is current (the resolver
        thread's case) makes the stream's context current once for all their queries in C
        (once per query in Python) and leaves the thread as it found it; the spans are the same."""
        from cuda.bindings import driver as drv

        from brickscope import native

        provider, exporter = pipeline
        configure(provider)
        stream = new_stream()
        _, lead_end = simdriver.enqueue_kernel(stream, 5 * MS)  # keep the stream busy
        ends = [lead_end]
        with bs.layer(0):
            for _ in range(50):
                with bs.brick("attention_score", stream=stream):
                    ends.append(simdriver.enqueue_kernel(stream, 100_000)[1])
        assert int(drv.cuCtxGetCurrent()[1]) == 0
        drv.cuStreamSynchronize(drv.CUstream(stream))  # complete: the resolution below waits for nothing
        pushes, pops = simdriver.calls("cuCtxPushCurrent"), simdriver.calls("cuCtxPopCurrent")
        assert bs.sync() is True
        pushes, pops = simdriver.calls("cuCtxPushCurrent") - pushes, simdriver.calls("cuCtxPopCurrent") - pops
        assert int(drv.cuCtxGetCurrent()[1]) == 0 and pushes == pops
        if native.implementations()["brickscope._hotpath"].in_use == "c":
            assert pushes == 2  # the re-anchor at the blocking sync point (Python), then one for the batch
        else:
            assert pushes > 100  # a push per query: complete, host time, elapsed time
        bricks = [s for s in exporter.get_finished_spans() if s.name == "attention_score"]
        assert len(bricks) == 50
        assert_bricks_measure_their_kernels(bricks, ends)

    def test_the_anchor_age_is_checked_against_the_clock_read_once_per_batch(self, pipeline, simdriver, monkeypatch):
        """A step end resolving 20 complete GPU bricks reads the host clock once for their
        anchor-age checks in C (once per brick in Python, in host_time_ns)."""
        from brickscope import _clock, native

        provider, exporter = pipeline
        configure(provider, sync_mode="deferred")
        stream = new_stream()
        with bs.step(0):
            for _ in range(20):
                with bs.brick("ffn_up", stream=stream):
                    simdriver.enqueue_kernel(stream, 1_000)
            time.sleep(0.002)  # the GPU is done when the step ends
            calls = []
            real = _clock.perf_counter_ns

            def counted() -> int:
                calls.append(1)
                return real()

            monkeypatch.setattr(_clock, "perf_counter_ns", counted)  # the C side then calls host_ns
        monkeypatch.undo()
        assert [s.name for s in exporter.get_finished_spans()] == ["ffn_up"] * 20 + ["step"]
        assert len(calls) == (1 if native.implementations()["brickscope._hotpath"].in_use == "c" else 20)
