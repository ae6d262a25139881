# SPDX-License-Identifier: Apache-2.0
"""Parquet inputs too large for the in-memory engine are refused in one line before they are
read, with what to do instead; the available memory is set by the test, not the machine's."""

from __future__ import annotations

import pytest
from analysis_synthetic import write_otlp_json

from brickscope.analysis import _duckdb, _engines
from brickscope.cli import main

pytest.importorskip("pyarrow")


@pytest.fixture(name="trace")
def _trace(tmp_path, engine_cases):
    spans = engine_cases.generate(1, steps=3, ranks=1)
    path = engine_cases.write_parquet(spans, tmp_path / "trace.parquet")
    import pyarrow.parquet as pq

    return path, pq.read_metadata(path).num_rows, spans


def _available(monkeypatch, size):
    monkeypatch.setattr(_engines, "available_memory", lambda: size)


def test_report_is_refused_with_the_estimate_and_the_way_out(monkeypatch, capsys, trace):
    path, rows, _ = trace
    _available(monkeypatch, rows * 1_000 - 1)
    assert main(["report", "-q", str(path), "--engine", "memory"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        f"brickscope report: {path}: {rows:,} spans need about {rows / 1e3:.1f} MB in memory (1,000 bytes a span),"
        f" {(rows * 1_000 - 1) / 1e6:.1f} MB is available; --engine duckdb computes it out of core"
        + ("" if _duckdb.available() else " (pip install 'brickscope[duckdb]')")
    )


def test_exactly_enough_memory_is_enough(monkeypatch, capsys, trace):
    path, rows, _ = trace
    _available(monkeypatch, rows * 1_000)
    assert main(["report", "-q", str(path), "--engine", "memory", "--format", "json"]) == 0


def test_tree_needs_more_a_span_and_points_at_step(monkeypatch, capsys, trace):
    path, rows, _ = trace
    _available(monkeypatch, rows * 1_400 - 1)
    assert main(["tree", "-q", str(path)]) == 1
    assert capsys.readouterr().err.strip().endswith("draw a few steps with --step A:B (only their rows are read)")
    assert main(["tree", "-q", str(path), "--step", "1"]) == 0  # only step 1's rows: not refused


def test_diff_checks_each_run(monkeypatch, capsys, trace):
    path, rows, _ = trace
    _available(monkeypatch, rows * 1_000 - 1)
    assert main(["diff", "-q", str(path), str(path), "--engine", "memory"]) == 1
    assert f"{rows:,} spans need about" in capsys.readouterr().err


def test_other_formats_are_not_estimated(monkeypatch, capsys, trace, tmp_path):
    """Their size on disk says little about their spans: read as before."""
    _, _, spans = trace
    otlp = write_otlp_json(tmp_path / "trace.jsonl", spans)
    _available(monkeypatch, 1)
    assert main(["report", "-q", str(otlp), "--format", "json"]) == 0


def test_unknown_available_memory_checks_nothing(monkeypatch, trace):
    path, _, _ = trace
    _available(monkeypatch, None)
    assert main(["report", "-q", str(path), "--engine", "memory", "--format", "json"]) == 0
