# SPDX-License-Identifier: Apache-2.0
"""The chrome-json reader: Chrome trace JSON and torch.profiler's Kineto dialect, by hand-written
traces whose figures are worked out in the comments."""

from __future__ import annotations

import gzip
import io
import json
import tracemalloc

import pytest

from brickscope import analysis
from brickscope.offline import TraceFileError, open_records, open_spans, write_chrome_trace
from brickscope.trace import attributes as A

BASE = 1_700_000_000_000_000_000  # Kineto's baseTimeNanoseconds


def _write(tmp_path, document, name="trace.json") -> str:
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return str(path)


def _read(path, **options):
    with open_spans(path, **options) as spans:
        read = list(spans)
    return read, spans


def _by_name(spans):
    found = {}
    for span in spans:
        assert span.name not in found, f"two spans named {span.name}"
        found[span.name] = span
    return found


def _parent_name(span, spans):
    if span.parent is None:
        return None
    return next(s.name for s in spans if s.context.span_id == span.parent.span_id)


class TestPhases:
    def test_bare_array_of_begin_end_and_complete_events_nests_by_time(self, tmp_path):
        """B/E pairs and X events on one thread nest by containment; times are µs read to the ns."""
        path = _write(tmp_path, [
            {"ph": "B", "name": "outer", "pid": 1, "tid": 2, "ts": 10},
            {"ph": "X", "name": "inner", "cat": "work", "pid": 1, "tid": 2, "ts": 12.5, "dur": 3.25},
            {"ph": "E", "pid": 1, "tid": 2, "ts": 20},
            {"ph": "X", "name": "other thread", "pid": 1, "tid": 3, "ts": 11, "dur": 1},
        ])  # fmt: skip
        spans, stream = _read(path)
        assert stream.format == "chrome-json"
        named = _by_name(spans)
        outer, inner = named["outer"], named["inner"]
        assert (outer.start_time, outer.end_time) == (10_000, 20_000)
        assert (inner.start_time, inner.end_time) == (12_500, 15_750)
        assert _parent_name(inner, spans) == "outer"
        assert named["other thread"].parent is None  # tid 3: not nested in tid 2's slice
        # outer's self time: 10 µs less inner's 3.25 µs; a slice with no cat is category "other"
        assert outer.attributes[A.BRICK_SELF_DURATION_NS] == 6_750
        assert outer.attributes[A.BRICK_CATEGORY] == "other"
        assert inner.attributes[A.BRICK_CATEGORY] == "work"
        assert outer.attributes[A.THREAD_ID] == 2
        assert outer.attributes[A.SCOPE_KIND] == A.SCOPE_KIND_BRICK

    def test_bare_array_may_end_without_its_bracket(self, tmp_path):
        """The JSON Array Format's closing bracket is optional (a crashed writer's trace)."""
        path = _write(tmp_path, '[{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2},\n')
        spans, stream = _read(path)
        assert [s.name for s in spans] == ["a"] and stream.truncation is None

    def test_thread_instants_are_events_of_the_innermost_slice_and_others_are_counted(self, tmp_path):
        """An i/I event of thread scope is a span event of the slice around it; the rest is a note."""
        path = _write(tmp_path, {"traceEvents": [
            {"ph": "X", "name": "outer", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
            {"ph": "X", "name": "inner", "pid": 1, "tid": 1, "ts": 2, "dur": 2},
            {"ph": "i", "name": "mark", "pid": 1, "tid": 1, "ts": 3, "s": "t", "args": {"token": 7}},
            {"ph": "I", "name": "late", "pid": 1, "tid": 1, "ts": 8},
            {"ph": "i", "name": "global", "pid": 1, "tid": 1, "ts": 5, "s": "g"},
            {"ph": "i", "name": "nowhere", "pid": 1, "tid": 1, "ts": 50},
            {"ph": "C", "name": "memory", "pid": 1, "ts": 1, "args": {"bytes": 5}},
        ]})  # fmt: skip
        spans, stream = _read(path)
        named = _by_name(spans)
        assert [(e.name, e.timestamp, dict(e.attributes)) for e in named["inner"].events] == [("mark", 3000, {"token": 7})]
        assert [(e.name, e.timestamp) for e in named["outer"].events] == [("late", 8000)]
        assert stream.notes == [
            "3 events left out by phase: 1 C, 1 i (outside every slice of its thread), 1 i (scope g)"
        ]

    def test_metadata_names_processes_and_threads_and_distributed_info_gives_the_rank(self, tmp_path):
        """process_name is the resource's service.name, thread_name the span's thread.name;
        distributedInfo's rank and world size go on the resource."""
        path = _write(tmp_path, {
            "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8},
            "traceEvents": [
                {"ph": "M", "name": "process_name", "pid": 42, "tid": 0, "args": {"name": "trainer"}},
                {"ph": "M", "name": "thread_name", "pid": 42, "tid": 7, "args": {"name": "loader"}},
                {"ph": "X", "name": "load", "pid": 42, "tid": 7, "ts": 0, "dur": 1},
            ],
        })  # fmt: skip
        (span,), _ = _read(path)
        assert dict(span.resource.attributes) == {
            "service.name": "trainer", "process.pid": 42, A.RANK: 3, A.WORLD_SIZE: 8,
        }  # fmt: skip
        assert span.attributes[A.THREAD_NAME] == "loader"
        assert analysis.load(path).ranks == ["3"]

    def test_epoch_microseconds_keep_their_nanoseconds(self, tmp_path):
        """A ts in µs since the epoch with three decimals is read exactly (a double would not)."""
        path = _write(tmp_path, '[{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1700000000123456.789, "dur": 0.001}]')
        (span,), _ = _read(path)
        assert (span.start_time, span.end_time) == (1_700_000_000_123_456_789, 1_700_000_000_123_456_790)

    def test_partly_overlapping_slices_go_under_the_slice_that_contains_them_and_are_counted(self, tmp_path):
        """[0, 10] and [5, 15] on one thread: the second is no child of the first; [6, 7] is the
        second's child (the innermost that contains it); the note counts one partial overlap."""
        path = _write(tmp_path, [
            {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
            {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 5, "dur": 10},
            {"ph": "X", "name": "c", "pid": 1, "tid": 1, "ts": 6, "dur": 1},
        ])  # fmt: skip
        spans, stream = _read(path)
        named = _by_name(spans)
        assert named["b"].parent is None and _parent_name(named["c"], spans) == "b"
        assert named["a"].attributes[A.BRICK_SELF_DURATION_NS] == 10_000
        assert named["b"].attributes[A.BRICK_SELF_DURATION_NS] == 9_000
        assert stream.notes == [
            "1 slices partly overlap another of their thread: each is placed under the innermost slice that contains it"
        ]

    def test_children_that_overlap_one_another_are_subtracted_once(self, tmp_path):
        """A frame [0, 100] calls a function [10, 40] whose range [30, 70] outlives it (a
        record_function entered in __enter__, left in __exit__ [60, 80]): all three are the
        frame's children, covering [10, 80]: the frame's self time is 100 - 70 = 30 µs (summing
        the children, 30 + 40 + 20 = 90, would leave 10; torch.profiler's own sum can go below 0)."""
        path = _write(tmp_path, [
            {"ph": "X", "name": "frame", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
            {"ph": "X", "name": "__enter__", "pid": 1, "tid": 1, "ts": 10, "dur": 30},
            {"ph": "X", "name": "range", "pid": 1, "tid": 1, "ts": 30, "dur": 40},
            {"ph": "X", "name": "__exit__", "pid": 1, "tid": 1, "ts": 60, "dur": 20},
        ])  # fmt: skip
        spans, _ = _read(path)
        named = _by_name(spans)
        assert {_parent_name(named[n], spans) for n in ("__enter__", "range", "__exit__")} == {"frame"}
        assert named["frame"].attributes[A.BRICK_SELF_DURATION_NS] == 30_000
        assert named["range"].attributes[A.BRICK_SELF_DURATION_NS] == 40_000

    def test_a_frame_around_the_profiler_steps_is_not_charged_for_them(self, tmp_path):
        """The training loop's Python frame [0, 100] holds ProfilerStep#1 [10, 90] (a step, no
        brick) and, in it, aten::mm [20, 30]: the frame's self time is 100 - 80 = 20 µs, the
        profiler's own figure, not 90."""
        path = _write(tmp_path, [
            {"ph": "X", "cat": "python_function", "name": "train.py(3): main", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 10, "dur": 80},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 20, "dur": 10},
        ])  # fmt: skip
        spans, _ = _read(path)
        named = _by_name(spans)
        assert named["ProfilerStep#1"].attributes[A.SCOPE_KIND] == "step"
        assert named["train.py(3): main"].attributes[A.BRICK_SELF_DURATION_NS] == 20_000
        assert named["aten::mm"].attributes[A.BRICK_SELF_DURATION_NS] == 10_000


KINETO = {
    "schemaVersion": 1,
    "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
    "distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2},
    "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 10, "tid": 0, "args": {"name": "python"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#5", "pid": 10, "tid": 10, "ts": 90, "dur": 210},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 10, "ts": 100, "dur": 50,
         "args": {"External id": 3, "Input Dims": [[4, 8], [8, 2]]}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": 110, "dur": 10,
         "args": {"External id": 3, "correlation": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 10, "tid": 10, "ts": 200, "dur": 40},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 10, "tid": 10, "ts": 205, "dur": 20,
         "args": {"correlation": 8}},
        {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": 130, "dur": 30,
         "args": {"device": 0, "stream": 7, "correlation": 7, "grid": [4, 1, 1], "block": [128, 1, 1],
                  "shared memory": 1024}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 7,
         "ts": 230, "dur": 20, "args": {"device": 0, "stream": 7, "bytes": 4096}},
        {"ph": "s", "id": 7, "pid": 10, "tid": 10, "ts": 110, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 7, "pid": 0, "tid": 7, "ts": 130, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "s", "id": 8, "pid": 10, "tid": 10, "ts": 205, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 8, "pid": 0, "tid": 7, "ts": 230, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 80, "dur": 300},
    ],
    "traceName": "trace.json",
    "displayTimeUnit": "ms",
    "baseTimeNanoseconds": BASE,
}  # fmt: skip


class TestKineto:
    def test_a_kernel_is_on_the_gpu_clock_under_the_operation_that_launched_it(self, tmp_path):
        """The kernel's correlation finds cudaLaunchKernel inside aten::mm: aten::mm is its parent,
        the launch call its host interval; device, stream, launch configuration from its args."""
        spans, _ = _read(_write(tmp_path, KINETO))
        named = _by_name(spans)
        kernel = named["gemm_kernel"]
        assert _parent_name(kernel, spans) == "aten::mm"
        assert (kernel.start_time, kernel.end_time) == (BASE + 130_000, BASE + 160_000)
        assert {k: kernel.attributes[k] for k in (
            A.SCOPE_KIND, A.CLOCK, A.GPU_DEVICE_ID, A.GPU_STREAM_ID, A.GPU_DURATION_NS, A.HOST_START_NS,
            A.HOST_DURATION_NS, A.BRICK_NAME, A.BRICK_CATEGORY, A.STEP_NUMBER, A.KERNEL_GRID, A.KERNEL_BLOCK,
            A.KERNEL_SHARED_MEM_BYTES,
        )} == {
            A.SCOPE_KIND: "kernel", A.CLOCK: "gpu", A.GPU_DEVICE_ID: 0, A.GPU_STREAM_ID: 7,
            A.GPU_DURATION_NS: 30_000, A.HOST_START_NS: BASE + 110_000, A.HOST_DURATION_NS: 10_000,
            A.BRICK_NAME: "aten::mm", A.BRICK_CATEGORY: "kernel", A.STEP_NUMBER: 5,
            A.KERNEL_GRID: (4, 1, 1), A.KERNEL_BLOCK: (128, 1, 1), A.KERNEL_SHARED_MEM_BYTES: 1024,
        }  # fmt: skip
        # The kernel belongs to the profiled process (Kineto's GPU pid 0 is the device) and its rank.
        assert kernel.resource is named["aten::mm"].resource
        assert kernel.resource.attributes[A.RANK] == 1

    def test_a_memcpy_found_by_its_ac2g_flow_alone(self, tmp_path):
        """The memcpy has no correlation arg: its ac2g flow starts in cudaMemcpyAsync, inside aten::copy_."""
        spans, _ = _read(_write(tmp_path, KINETO))
        memcpy = _by_name(spans)["Memcpy DtoH (Device -> Pageable)"]
        assert _parent_name(memcpy, spans) == "aten::copy_"
        assert memcpy.attributes[A.BRICK_CATEGORY] == "gpu_memcpy"
        assert memcpy.attributes["bytes"] == 4096
        assert memcpy.attributes[A.HOST_START_NS] == BASE + 205_000

    def test_profiler_step_is_a_step_and_host_operations_are_bricks_with_self_time(self, tmp_path):
        """ProfilerStep#5 is step 5; aten::mm's self time is 50 µs less its launch call's 10 µs
        (kernels are not subtracted); the Trace range is left out."""
        spans, stream = _read(_write(tmp_path, KINETO))
        named = _by_name(spans)
        step = named["ProfilerStep#5"]
        assert (step.attributes[A.SCOPE_KIND], step.attributes[A.STEP_NUMBER]) == ("step", 5)
        mm = named["aten::mm"]
        assert (mm.attributes[A.SCOPE_KIND], mm.attributes[A.BRICK_CATEGORY]) == ("brick", "cpu_op")
        assert mm.attributes[A.BRICK_SELF_DURATION_NS] == 40_000
        assert mm.attributes[A.STEP_NUMBER] == 5
        assert mm.attributes["Input Dims"] == "[[4, 8], [8, 2]]"  # nested lists: their JSON text
        assert named["aten::copy_"].attributes[A.BRICK_SELF_DURATION_NS] == 20_000
        assert "PyTorch Profiler (0)" not in named
        assert stream.notes == ["1 events left out by phase: 1 X (category Trace)"]

    def test_report_of_a_kineto_trace(self, tmp_path):
        """Per operation: one kernel of 30 µs and one memcpy of 20 µs on device 0 (busy 50 µs),
        bricks by Kineto category; the step's throughput row is step 5."""
        table = analysis.load(_write(tmp_path, KINETO))
        report = analysis.analyse(table)
        rows = {(o.kind, o.name): (o.count, o.self_ns) for o in report.operations}
        assert rows[("kernel", "gemm_kernel")] == (1, 30_000)
        assert rows[("kernel", "Memcpy DtoH (Device -> Pageable)")] == (1, 20_000)
        assert rows[("brick", "cudaLaunchKernel")] == (1, 10_000)
        categories = {c.category: c.self_ns for c in report.categories}
        # cpu_op: aten::mm 40 + aten::copy_ 20; cuda_runtime: 10 + 20
        assert categories == {"cpu_op": 60_000, "cuda_runtime": 30_000}
        (device,) = report.devices
        assert device.busy_ns == 50_000
        assert [s.step for s in report.throughput.steps] == [5]

    def test_a_gpu_annotation_is_a_gpu_brick_apart_from_the_host_range(self, tmp_path):
        """A gpu_user_annotation around the kernel is a brick on the gpu clock, category
        gpu_user_annotation; the kernel stays under the operation that launched it."""
        document = json.loads(json.dumps(KINETO))
        document["traceEvents"].append(
            {"ph": "X", "cat": "gpu_user_annotation", "name": "block", "pid": 0, "tid": 7, "ts": 125, "dur": 40,
             "args": {"device": 0, "stream": 7}}
        )  # fmt: skip
        spans, _ = _read(_write(tmp_path, document))
        named = _by_name(spans)
        block = named["block"]
        assert {k: block.attributes[k] for k in (A.SCOPE_KIND, A.BRICK_CATEGORY, A.CLOCK, A.GPU_STREAM_ID)} == {
            A.SCOPE_KIND: "brick", A.BRICK_CATEGORY: "gpu_user_annotation", A.CLOCK: "gpu", A.GPU_STREAM_ID: 7,
        }  # fmt: skip
        assert block.attributes[A.BRICK_SELF_DURATION_NS] == 40_000  # kernels are no bricks
        assert _parent_name(named["gemm_kernel"], spans) == "aten::mm"

    def test_same_named_only_child_is_folded_into_its_parent(self, tmp_path):
        """aten::sum holding only aten::sum holding aten::fill_: one aten::sum, as key_averages() counts,
        with fill_ its child and self time 10 - 1 µs; a non-Kineto slice of the same shape is kept."""
        path = _write(tmp_path, [
            {"ph": "X", "cat": "cpu_op", "name": "aten::sum", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
            {"ph": "X", "cat": "cpu_op", "name": "aten::sum", "pid": 1, "tid": 1, "ts": 1, "dur": 8},
            {"ph": "X", "cat": "cpu_op", "name": "aten::fill_", "pid": 1, "tid": 1, "ts": 2, "dur": 1},
            {"ph": "X", "name": "recurse", "pid": 1, "tid": 2, "ts": 0, "dur": 10},
            {"ph": "X", "name": "recurse", "pid": 1, "tid": 2, "ts": 1, "dur": 8},
        ])  # fmt: skip
        spans, _ = _read(path)
        sums = [s for s in spans if s.name == "aten::sum"]
        assert len(sums) == 1 and (sums[0].start_time, sums[0].end_time) == (0, 10_000)
        assert sums[0].attributes[A.BRICK_SELF_DURATION_NS] == 9_000
        fill = next(s for s in spans if s.name == "aten::fill_")
        assert fill.parent.span_id == sums[0].context.span_id
        assert len([s for s in spans if s.name == "recurse"]) == 2
        with open_records(path) as records:
            assert sorted(r[0] for r in records) == ["aten::fill_", "aten::sum", "recurse", "recurse"]

    def test_records_and_spans_agree(self, tmp_path):
        """open_records gives each span's (name, start, end, ids, resource, attributes)."""
        path = _write(tmp_path, KINETO)
        spans, _ = _read(path)
        with open_records(path) as stream:
            records = list(stream)
        assert [(r[0], r[1], r[2], r[3], r[4]) for r in records] == [
            (s.name, s.start_time, s.end_time, s.context.span_id, s.parent.span_id if s.parent else 0) for s in spans
        ]

    def test_the_same_file_gets_the_same_ids(self, tmp_path):
        """Ids are drawn from the file: reading it twice gives the same span and trace ids."""
        path = _write(tmp_path, KINETO)
        first, _ = _read(path)
        second, _ = _read(path)
        assert [s.context for s in first] == [s.context for s in second]


class TestRoundTrip:
    def test_brickscope_chrome_json_reads_back_with_its_attributes(self, tmp_path):
        """write_chrome_trace's output reads back: names, times, kinds and self times as written."""
        spans, _ = _read(_write(tmp_path, KINETO))
        out = io.BytesIO()
        write_chrome_trace(spans, out)
        again, _ = _read(_write(tmp_path, out.getvalue().decode(), "again.json"))
        key = lambda s: (s.name, s.start_time, s.end_time)  # noqa: E731
        assert sorted(map(key, again)) == sorted(map(key, spans))
        before, after = _by_name(spans), _by_name(again)
        for name, span in before.items():
            for attribute in (A.SCOPE_KIND, A.BRICK_SELF_DURATION_NS, A.CLOCK, A.STEP_NUMBER):
                assert after[name].attributes.get(attribute) == span.attributes.get(attribute), (name, attribute)
        assert _parent_name(after["cudaLaunchKernel"], again) == "aten::mm"

    def test_brickscope_overhead_spans_are_kept(self, tmp_path):
        """brickscope's own overhead span is written with cat "overhead" (its kind): it reads back,
        unlike a Kineto overhead slice (the profiler's own work)."""
        from brickscope.testing import make_span

        step = make_span(1, "step", BASE, BASE + 10_000, attributes={A.SCOPE_KIND: "step", A.THREAD_ID: 1})
        resolve = make_span(2, A.OVERHEAD_SPAN_NAME, BASE + 9_000, BASE + 9_500, 1,
                            attributes={A.SCOPE_KIND: A.SCOPE_KIND_OVERHEAD, A.THREAD_ID: 1})  # fmt: skip
        out = io.BytesIO()
        write_chrome_trace([step, resolve], out)
        document = json.loads(out.getvalue())
        document["traceEvents"].append({"ph": "X", "cat": "overhead", "name": "Activity Buffer Request",
                                        "pid": 1, "tid": 1, "ts": 1, "dur": 1})  # fmt: skip
        again, stream = _read(_write(tmp_path, document))
        assert sorted(s.name for s in again) == [A.OVERHEAD_SPAN_NAME, "step"]
        assert stream.notes == ["1 events left out by phase: 1 X (category overhead)"]


class TestFormat:
    @pytest.mark.parametrize(
        "document",
        [
            '{"traceEvents": []}',
            '\ufeff {"displayTimeUnit": "ns", "traceEvents": []}',
            '{\n  "schemaVersion": 1,\n  "deviceProperties": [],\n  "traceEvents": []}',
            '[{"name": "a", "ph": "X", "ts": 0, "dur": 1, "pid": 1, "tid": 1}]',
            '[ { "ph": "X", "ts": 0, "dur": 1, "pid": 1, "tid": 1, "name": "a"}]',
        ],
    )
    def test_told_from_otlp_json_by_content(self, tmp_path, document):
        """An object opening with a Chrome trace key, or an array of events, is Chrome trace JSON."""
        from brickscope.offline._formats import CHROME_JSON, OTLP_JSON, installed_formats

        head = document.encode()[:64]
        assert CHROME_JSON.matches(head)
        assert next(f for f in installed_formats() if f.matches(head)) is CHROME_JSON
        assert OTLP_JSON.matches(b'{"resourceSpans": []}') and not CHROME_JSON.matches(b'{"resourceSpans": []}')
        assert not CHROME_JSON.matches(b'[{"resourceSpans": []}]')

    def test_gzip_and_a_document_longer_than_the_read_window(self, tmp_path):
        """20,000 events (several MiB, gzip) are read whole across the reader's 1 MiB window:
        the sum of their durations is 20,000 x 1.5 µs."""
        events = [
            {"ph": "X", "name": f"op{i % 7}", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 10 * i + 0.123,
             "dur": 1.5, "args": {"pad": "x" * 200}}
            for i in range(20_000)
        ]  # fmt: skip
        path = tmp_path / "big.json.gz"
        with gzip.open(path, "wt") as out:
            json.dump({"traceEvents": events, "baseTimeNanoseconds": BASE}, out)
        with open_records(path) as records:
            rows = list(records)
        assert len(rows) == 20_000
        assert sum(r[2] - r[1] for r in rows) == 20_000 * 1_500
        assert min(r[1] for r in rows) == BASE + 123


class TestBadInput:
    def test_malformed_json_is_one_line_naming_the_file(self, tmp_path):
        """A syntax error in an event is refused, naming the file."""
        path = _write(tmp_path, '{"traceEvents": [{"ph": "X", "ts": 1,, "dur": 2}]}')
        with pytest.raises(TraceFileError) as caught:
            _read(path)
        message = str(caught.value)
        assert message.startswith(path) and "not valid JSON" in message and "\n" not in message

    def test_a_timestamp_that_is_no_number_is_refused(self, tmp_path):
        path = _write(tmp_path, [{"ph": "X", "name": "a", "ts": "soon", "dur": 1}])
        with pytest.raises(TraceFileError, match=r"traceEvents\[0\]\.ts: expected a number of microseconds"):
            _read(path)

    def test_unmatched_begin_end_and_negative_durations_are_counted_impossible(self, tmp_path):
        """A B never ended (no end time), an E with no B (no start time), a negative dur and an E
        before its B (end before start) are left out and counted; the good slice stays."""
        path = _write(tmp_path, [
            {"ph": "X", "name": "good", "pid": 1, "tid": 1, "ts": 0, "dur": 1},
            {"ph": "B", "name": "never ended", "pid": 1, "tid": 2, "ts": 0},
            {"ph": "E", "pid": 1, "tid": 3, "ts": 5},
            {"ph": "X", "name": "negative", "pid": 1, "tid": 1, "ts": 2, "dur": -1},
            {"ph": "B", "name": "backwards", "pid": 1, "tid": 4, "ts": 9},
            {"ph": "E", "pid": 1, "tid": 4, "ts": 8},
        ])  # fmt: skip
        spans, stream = _read(path)
        assert [s.name for s in spans] == ["good"]
        assert stream.dropped == {"no_end_time": 1, "no_start_time": 1, "end_before_start": 2}

    def test_a_file_of_impossible_slices_only_is_refused(self, tmp_path):
        path = _write(tmp_path, [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 2, "dur": -1}])
        with pytest.raises(TraceFileError, match="every span is impossible"):
            _read(path)

    def test_a_cut_trace_events_array_is_truncated(self, tmp_path):
        """An object cut inside traceEvents is refused, or read up to the cut when allowed."""
        document = json.dumps(KINETO)
        path = _write(tmp_path, document[: document.index('"cat": "gpu_memcpy"')])
        with pytest.raises(TraceFileError, match="truncated.*--allow-truncated"):
            _read(path)
        spans, stream = _read(path, allow_truncated=True)
        assert stream.truncation is not None
        assert "gemm_kernel" in {s.name for s in spans}

    def test_a_time_before_the_epoch_is_refused(self, tmp_path):
        """A negative ts with nothing to add to it is on no timeline: one line naming the file."""
        path = _write(tmp_path, [{"ph": "X", "name": "early", "pid": 1, "tid": 1, "ts": -5, "dur": 2}])
        with pytest.raises(TraceFileError, match=r"slice 'early' starts at ts -5 µs, before the Unix epoch"):
            _read(path)

    def test_data_after_the_document_is_refused(self, tmp_path):
        path = _write(tmp_path, '{"traceEvents": []} {"traceEvents": []}')
        with pytest.raises(TraceFileError, match="data after the end of the JSON document"):
            _read(path)


class TestMemory:
    def test_a_kineto_trace_is_held_compactly_until_its_spans_come_out(self, tmp_path):
        """torch.profiler-like operations (nine args each: unique ids, shapes and types repeated
        from step to step), read in full: each 1,000 more slices raise the peak of Python
        objects (tracemalloc; 5,000 against 15,000 slices, so the reader's fixed buffers cancel)
        by under 900 KB: about 470 bytes a slice on CPython 3.11, where a dict of attributes per
        slice held from the start took about 2,200."""
        self._peak(tmp_path, 1_000)  # what a first read imports and caches for good
        small, big = self._peak(tmp_path, 5_000), self._peak(tmp_path, 15_000)
        per_slice = (big - small) / 10_000
        assert 0 < per_slice < 900, f"{per_slice:.0f} bytes a slice"

    @staticmethod
    def _peak(tmp_path, count: int) -> int:
        shapes = [[[8, 16], [32, 16], [32]], [[8, 32], [4, 32], [4]], [[8, 32]]]
        events = [
            {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 40}", "pid": 7, "tid": 7, "ts": 10 * i, "dur": 5,
             "args": {"External id": 100_000 + i, "Sequence number": 5_000 + i, "Fwd thread id": 0,
                      "Record function id": 0, "Concrete Inputs": ["", "", ""],
                      "Input type": ["float", "float", "float"], "Input Strides": [[16, 1], [16, 1], [1]],
                      "Input Dims": shapes[i % 3], "Ev Idx": i}}
            for i in range(count)
        ]  # fmt: skip
        path = _write(tmp_path, {"traceEvents": events, "baseTimeNanoseconds": 1_700_000_000_000_000_000}, f"{count}.json")
        del events
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            with open_records(path) as records:
                assert sum(1 for _ in records) == count
            return tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
