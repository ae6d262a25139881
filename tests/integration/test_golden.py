# SPDX-License-Identifier: Apache-2.0
"""Golden traces (tests/golden, made by make_golden.py) against what Perfetto's trace processor read in them.

The expected files hold the real trace processor's slices, flows and processes for a
host-clock demo trace, a GPU run on the simulated driver and their merge. Without the
trace processor (CI), the project's checker must read the same in the goldens, and the
current writer, given the spans read back from a golden, must still produce them: a
format regression shows here without a GPU and without the trace processor.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from brickscope.exporter.perfetto import PerfettoSpanExporter
from brickscope.offline import open_spans

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
NAMES = ("host", "gpu", "merged")
sys.path.insert(0, str(ROOT / "exporters" / "perfetto" / "tests"))
from pftrace_testlib import Decoded, decode_trace  # noqa: E402

SHELL = os.environ.get("PERFETTO_TRACE_PROCESSOR_SHELL") or shutil.which("trace_processor_shell")


def _expected(name: str) -> dict[str, list]:
    return json.loads((GOLDEN / f"{name}.expected.json").read_text())


def _slices(rows) -> list[tuple]:
    return sorted(tuple(row) for row in rows)


def _view(decoded: Decoded) -> dict[str, list[tuple]]:
    """The checker's decode in the trace processor's terms (slices, flow pairs, processes)."""
    pieces = decoded.slices + decoded.instants
    sources = {f: s for s in pieces for f in s.flow_ids}
    # The trace processor draws each arrow from the earlier slice to the later one.
    flows = [
        (a.name, a.ts, b.name, b.ts) if a.ts <= b.ts else (b.name, b.ts, a.name, a.ts)
        for b in pieces
        for f in b.terminating_flow_ids
        if f in sources
        for a in (sources[f],)
    ]
    processes = sorted(
        {(d.process.pid, d.process.process_name) for d in decoded.descriptors.values() if d.HasField("process")}
    )
    return {
        "slices": _slices((s.name, s.ts, s.dur, s.depth) for s in pieces),
        "flows": sorted(flows),
        "processes": [tuple(p) for p in processes],
    }


def _as_tuples(expected: dict[str, list]) -> dict[str, list[tuple]]:
    return {
        "slices": _slices(expected["slices"]),
        "flows": sorted(tuple(row) for row in expected["flows"]),
        "processes": [tuple(row) for row in expected["processes"]],
    }


@pytest.mark.parametrize("name", NAMES)
def test_the_checker_reads_what_the_trace_processor_read(name):
    decoded = decode_trace(GOLDEN / f"{name}.pftrace")
    assert decoded.errors == []
    assert _view(decoded) == _as_tuples(_expected(name))
    assert _expected(name)["problems"] == []


@pytest.mark.parametrize("name", NAMES)
def test_the_writer_still_writes_what_the_trace_processor_read(tmp_path, name):
    """Spans read back from the golden, written again by the current exporter, decode to the same."""
    spans = list(open_spans(GOLDEN / f"{name}.pftrace"))
    with PerfettoSpanExporter(tmp_path / "again.pftrace") as exporter:
        assert exporter.export(spans).name == "SUCCESS"
    decoded = decode_trace(tmp_path / "again.pftrace")
    assert decoded.errors == [] and decoded.flows_drawn == decoded.flows_expected
    expected = _as_tuples(_expected(name))
    again = _view(decoded)
    assert again["slices"] == expected["slices"]
    assert again["flows"] == expected["flows"]
    # Process names come back; a merged file's synthetic pids are drawn anew.
    assert sorted(name for _, name in again["processes"]) == sorted(name for _, name in expected["processes"])


@pytest.mark.skipif(SHELL is None, reason="no trace_processor_shell (set PERFETTO_TRACE_PROCESSOR_SHELL)")
@pytest.mark.parametrize("name", NAMES)
def test_the_trace_processor_still_reads_the_goldens_so(name):
    sys.path.insert(0, str(GOLDEN))
    import make_golden

    found = make_golden.query(SHELL, GOLDEN / f"{name}.pftrace")
    assert _as_tuples(found) == _as_tuples(_expected(name)) and found["problems"] == []
