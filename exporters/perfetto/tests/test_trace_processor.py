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
