# SPDX-License-Identifier: Apache-2.0
"""The exporter gives the interpreter back often: pauses between small units of work,
the same bytes with or without them, nothing lost, and bookkeeping the garbage
collector does not have to walk."""

from __future__ import annotations

import gc
import threading

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pftrace_testlib import T0, THREAD, gpu_attributes, make_span

from brickscope.exporter.perfetto import PerfettoSpanExporter, _writer as writer_module, read_spans
from brickscope.exporter.perfetto._lanes import MAX_TIME_NS, LaneSet
from brickscope.exporter.perfetto._writer import TraceWriter
from brickscope.sdk.pacing import Pacer
from brickscope.trace import attributes as A


def _steps(count: int, bricks: int = 5, first_id: int = 1) -> list:
    """``count`` steps of ``bricks`` host bricks with one GPU kernel each, children first
    (the order a BatchSpanProcessor delivers them): ``count * (1 + 2 * bricks)`` spans."""
    spans = []
    span_id = first_id
    for step in range(count):
        base = T0 + step * 1_000_000
        step_id = span_id
        span_id += 1
        for b in range(bricks):
            start = base + 1_000 + b * 100_000
            brick_id, kernel_id = span_id, span_id + 1
            span_id += 2
            spans.append(make_span(kernel_id, f"k{b}", start + 30_000, start + 70_000, brick_id,
                                   attributes=gpu_attributes(start + 1_000, 2_000, 40_000)))  # fmt: skip
            spans.append(make_span(brick_id, f"brick{b}", start, start + 50_000, step_id,
                                   attributes={A.SCOPE_KIND: "brick", A.CLOCK: "host", **THREAD}))  # fmt: skip
        spans.append(make_span(step_id, "step", base, base + 900_000,
                               attributes={A.SCOPE_KIND: "step", A.STEP_NUMBER: step, **THREAD}))  # fmt: skip
    return spans


def _two_threads() -> int:
    """Another thread runs beside the exporter's (the application's)."""
    return 2


class _Ticks:
    """A clock that moves ``step`` per reading, and a sleep that records its pauses."""

    def __init__(self, step: int) -> None:
        self.now = 0
        self.step = step
        self.slept: list[float] = []

    def clock(self) -> int:
        self.now += self.step
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


class TestPacer:
    def test_pauses_once_the_budget_is_spent_and_not_before(self):
        """Budget 500 on a clock moving 100 per reading: start reads 100; ticks read
        200..500 (spent 100..400: no pause), then 600 (spent 500: pause, restart at 700)."""
        ticks = _Ticks(100)
        pacer = Pacer(500, 0.25, clock=ticks.clock, sleep=ticks.sleep, threads=_two_threads)
        pacer.start()
        for _ in range(4):
            pacer.tick()
        assert ticks.slept == []
        pacer.tick()
        assert ticks.slept == [0.25] and pacer.pauses == 1
        # The budget counts again from the pause's end (700): ticks at 800..1100 spend 100..400.
        for _ in range(4):
            pacer.tick()
        assert pacer.pauses == 1
        pacer.tick()
        assert pacer.pauses == 2

    def test_start_resets_the_budget(self):
        """Time spent between two exports (waiting for the next batch) is not work."""
        ticks = _Ticks(100)
        pacer = Pacer(500, 0.0, clock=ticks.clock, sleep=ticks.sleep, threads=_two_threads)
        ticks.now = 10_000  # long after construction
        pacer.start()
        pacer.tick()
        assert pacer.pauses == 0

    def test_no_pause_while_the_exporters_thread_is_the_only_one(self):
        """An offline command's only thread: the budget is spent at 600 as above, nothing
        sleeps, and the budget restarts (the next pause point is 500 later); once a second
        thread exists, the spent budget pauses."""
        ticks, threads = _Ticks(100), [1]
        pacer = Pacer(500, 0.25, clock=ticks.clock, sleep=ticks.sleep, threads=lambda: threads[0])
        pacer.start()
        for _ in range(10):
            pacer.tick()
        assert ticks.slept == [] and pacer.pauses == 0
        threads[0] = 2
        for _ in range(5):
            pacer.tick()
        assert ticks.slept == [0.25] and pacer.pauses == 1

    def test_the_default_counts_python_threads(self):
        """With the default thread count a second running thread makes a spent budget pause."""
        ticks = _Ticks(1000)
        pacer = Pacer(500, 0.0, clock=ticks.clock, sleep=ticks.sleep)
        release = threading.Event()
        other = threading.Thread(target=release.wait)
        other.start()
        try:
            pacer.tick()
        finally:
            release.set()
            other.join()
        assert pacer.pauses == 1

    @pytest.mark.parametrize("budget, pause", [(0, 0.1), (-5, 0.1), (10, -0.1)])
    def test_refuses_a_budget_or_pause_that_cannot_work(self, budget, pause):
        with pytest.raises(ValueError, match="budget_ns"):
            Pacer(budget, pause)


class TestWriterChunks:
    def test_every_unit_of_work_is_followed_by_a_pause_point(self, monkeypatch):
        """Between two calls of ``pace`` the writer collects at most one span, places at
        most one slice and writes at most one event packet."""
        counts = {"collect": 0, "place": 0, "packet": 0}
        worst = dict(counts)
        for name, owner, attribute in (
            ("collect", TraceWriter, "_collect"),
            ("place", TraceWriter, "_place"),
            ("packet", writer_module.EventEncoder, "packet"),
        ):
            original = getattr(owner, attribute)

            def counted(*args, _original=original, _name=name, **kwargs):
                counts[_name] += 1
                return _original(*args, **kwargs)

            monkeypatch.setattr(owner, attribute, counted)
        paces = 0

        def pace():
            nonlocal paces
            paces += 1
            for key in counts:
                worst[key] = max(worst[key], counts[key])
                counts[key] = 0

        spans = _steps(20)  # 220 spans, 320 slices (a kernel has a launch slice too), 640 events
        TraceWriter(pace=pace).encode(spans)
        assert worst == {"collect": 1, "place": 1, "packet": 1}
        assert paces >= 220 + 320 + 640

    def test_forgetting_old_slices_pauses_per_slice(self):
        """Past ``max_tracked_slices`` the writer forgets half of what it remembers, one
        slice per pause point: a step's worth of slices is never dropped in one go."""
        paces = 0

        def pace():
            nonlocal paces
            paces += 1

        writer = TraceWriter(max_tracked_slices=100, pace=pace)
        writer.encode(_steps(10))  # 110 spans, 160 slices: over the budget once
        remembered = sum(t.lanes.size for t in writer._tracks)
        # One pause point per span collected, per slice placed, per slice's events listed
        # and per event written, plus one per forgotten slice.
        forgotten = 160 - remembered
        assert forgotten > 0
        assert paces == 110 + 160 + 160 + 320 + forgotten


def test_pausing_writes_the_same_bytes(same_ids):
    """A writer that pauses at every unit of work writes byte for byte what one that
    never pauses writes, batch after batch (interning, clocks and lanes carry over)."""
    ticks = _Ticks(1)
    paced = TraceWriter(
        max_tracked_slices=200, pace=Pacer(1, 0.0, clock=ticks.clock, sleep=ticks.sleep, threads=_two_threads).tick
    )
    plain = TraceWriter(max_tracked_slices=200)
    spans = _steps(40)
    for first in range(0, len(spans), 97):  # batches that cut steps in two
        batch = spans[first : first + 97]
        assert paced.encode(batch) == plain.encode(batch)
        paced.commit()
        plain.commit()
    assert len(ticks.slept) > 1000


def test_nothing_is_lost_behind_a_batch_processor(tmp_path):
    """Every span ended on the provider is in the file, paused exports or not."""
    path = tmp_path / "t.pftrace"
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(PerfettoSpanExporter(path), max_export_batch_size=64))
    tracer = provider.get_tracer("test")
    for i in range(1000):
        with tracer.start_as_current_span(f"op{i % 7}"):
            pass
    provider.shutdown()
    spans = read_spans(path)
    assert len(spans) == 1000
    assert sorted(s.name for s in spans) == sorted(f"op{i % 7}" for i in range(1000))


def test_spans_outside_the_time_range_are_skipped_and_counted():
    """Perfetto times are unsigned 64-bit: a span starting past that range is skipped and
    counted, its batch-mates are written; a launch reaching past it is left out."""
    writer = TraceWriter()
    good = make_span(1, "ok", T0, T0 + 10, attributes=dict(THREAD))
    late = make_span(2, "late", MAX_TIME_NS + 1, MAX_TIME_NS + 5, attributes=dict(THREAD))
    kernel = make_span(3, "k", T0, T0 + 10, attributes=gpu_attributes(MAX_TIME_NS - 1, 5, 10))
    data = writer.encode([good, late, kernel])
    assert writer.skipped_spans == 1
    assert data  # the other two are there
    placed = sum(t.lanes.size for t in writer._tracks)
    assert placed == 2  # "ok" and the kernel's GPU slice; no launch slice


def test_remembered_slices_add_no_objects_for_the_garbage_collector():
    """10,000 remembered nested and sibling slices leave the number of objects the cyclic
    GC walks almost unchanged (it was two per slice): a full collection, which runs with
    the interpreter held, does not grow with ``max_tracked_slices``."""
    gc.collect()
    before = len(gc.get_objects())
    lanes = LaneSet()
    for step in range(1000):
        base = step * 1000
        lanes.place(base, base + 900)
        for brick in range(9):
            lanes.place(base + brick * 100, base + brick * 100 + 50)
    gc.collect()
    assert lanes.size == 10_000
    assert len(gc.get_objects()) - before < 50
