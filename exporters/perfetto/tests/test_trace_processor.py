# SPDX-License-Identifier: Apache-2.0
"""Load our traces in Perfetto's real trace processor, when its binary is available.

The ``perfetto`` package downloads ``trace_processor_shell`` on first use, which
needs internet access; no package registry ships the binary. Set
``PERFETTO_TRACE_PROCESSOR_SHELL`` to a local binary (or put
``trace_processor_shell`` on ``PATH``) to run these tests.
"""

from __future__ import annotations

import os
import shutil

import pytest
from pftrace_testlib import T0, THREAD, expected_slices, gpu_attributes, make_span

from brickscope.exporter.perfetto import PerfettoSpanExporter, merge_traces

_SHELL = os.environ.get("PERFETTO_TRACE_PROCESSOR_SHELL") or shutil.which("trace_processor_shell")

pytestmark = pytest.mark.skipif(
    _SHELL is None, reason="no trace_processor_shell (set PERFETTO_TRACE_PROCESSOR_SHELL); it cannot be downloaded here"
)


def _spans(offset=0, pid=4242):
    from opentelemetry.sdk.resources import Resource

    resource = Resource({"service.name": f"svc{pid}", "process.pid": pid})
    return [
        make_span(offset + 1, "step", T0, T0 + 10_000, attributes=dict(THREAD), resource=resource),
        make_span(offset + 2, "attn", T0 + 100, T0 + 900, offset + 1, attributes=dict(THREAD), resource=resource),
        make_span(
            offset + 3,
            "gemm",
            T0 + 2000,
            T0 + 5000,
            offset + 2,
            attributes=gpu_attributes(T0 + 200, 50, 3000),
            resource=resource,
        ),
        make_span(offset + 4, "tail", T0 + 9000, T0 + 20_000, offset + 1, attributes=dict(THREAD), resource=resource),
    ]


def _query(path, sql):
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    with TraceProcessor(trace=str(path), config=TraceProcessorConfig(bin_path=_SHELL)) as tp:
        return list(tp.query(sql))


class TestTraceProcessor:
    def test_slices_as_exported(self, tmp_path):
        """The trace processor's slice table holds every slice at its exact ts and dur, with no import error."""
        path = tmp_path / "t.pftrace"
        spans = _spans()
        with PerfettoSpanExporter(path) as exporter:
            exporter.export(spans[2:])  # children first, as a BatchSpanProcessor would
            exporter.export(spans[:2])
        rows = _query(path, "SELECT name, ts, dur FROM slice")
        assert sorted((r.name, r.ts, r.dur) for r in rows) == expected_slices(spans)
        errors = _query(path, "SELECT name, value FROM stats WHERE severity IN ('error', 'data_loss') AND value > 0")
        assert [(r.name, r.value) for r in errors] == []

    def test_flow_from_launch_to_gpu(self, tmp_path):
        """The launch slice has a flow to the GPU slice."""
        path = tmp_path / "t.pftrace"
        with PerfettoSpanExporter(path) as exporter:
            exporter.export(_spans())
        rows = _query(
            path,
            "SELECT o.ts AS launch, i.ts AS gpu FROM flow f JOIN slice o ON f.slice_out = o.id "
            "JOIN slice i ON f.slice_in = i.id",
        )
        assert [(r.launch, r.gpu) for r in rows] == [(T0 + 200, T0 + 2000)]

    def test_merged_ranks(self, tmp_path):
        """A merge of two ranks loads with both processes and every slice."""
        for rank in range(2):
            with PerfettoSpanExporter(tmp_path / f"r{rank}.pftrace") as exporter:
                exporter.export(_spans(offset=10 * rank, pid=100 + rank))
        merge_traces([tmp_path / "r0.pftrace", tmp_path / "r1.pftrace"], tmp_path / "all.pftrace")
        rows = _query(tmp_path / "all.pftrace", "SELECT name, ts, dur FROM slice")
        assert len(rows) == 2 * len(expected_slices(_spans()))
        processes = _query(tmp_path / "all.pftrace", "SELECT pid FROM process WHERE pid IN (100, 101)")
        assert sorted(r.pid for r in processes) == [100, 101]

    def test_equal_ends_across_batches_keep_their_slices_and_flows(self, tmp_path):
        """Two GPU slices on one stream ending at the same instant, written in two batches (the
        case lane rule 4 handles): each slice keeps its exact ts and dur, and each flow goes
        from a span's own launch slice to its own GPU slice."""
        outer = make_span(1, "outer", T0 + 20, T0 + 60, attributes=gpu_attributes(T0 + 50, 30, 40, device=0, stream=0))
        inner = make_span(2, "inner", T0 + 30, T0 + 60, 1, attributes=gpu_attributes(T0 + 40, 0, 30, device=0, stream=0))
        path = tmp_path / "t.pftrace"
        with PerfettoSpanExporter(path) as exporter:
            exporter.export([outer])
            exporter.export([inner])
        rows = _query(path, "SELECT name, ts, dur FROM slice")
        assert sorted((r.name, r.ts, r.dur) for r in rows) == expected_slices([outer, inner])
        flows = _query(
            path,
            "SELECT o.name AS a, o.ts AS a_ts, i.name AS b, i.ts AS b_ts FROM flow f "
            "JOIN slice o ON f.slice_out = o.id JOIN slice i ON f.slice_in = i.id",
        )
        # Each pair is {launch slice, GPU slice} of one span (the trace processor orders a
        # flow by which slice begins first): outer's launch at +50, its GPU slice at +20;
        # inner's launch at +40, its GPU slice at +30.
        pairs = sorted(tuple(sorted(((r.a, r.a_ts - T0), (r.b, r.b_ts - T0)))) for r in flows)
        launches = {(r.name, r.ts - T0) for r in rows} - {("outer", 20), ("inner", 30)}
        assert len(pairs) == 2 and len(launches) == 2
        assert {pair[0][1] for pair in pairs} | {pair[1][1] for pair in pairs} == {20, 30, 40, 50}
        by_gpu = {next(p for p in pair if p in {("outer", 20), ("inner", 30)}): pair for pair in pairs}
        assert {gpu: {p[1] for p in pair} for gpu, pair in by_gpu.items()} == {("outer", 20): {20, 50}, ("inner", 30): {30, 40}}
        errors = _query(path, "SELECT name, value FROM stats WHERE severity IN ('error', 'data_loss') AND value > 0")
        assert [(r.name, r.value) for r in errors] == []
