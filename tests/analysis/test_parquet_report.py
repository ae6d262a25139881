# SPDX-License-Identifier: Apache-2.0
"""A trace's report is the same whether it is read from its .pftrace or from the Parquet file
converted from it: every section of the JSON, the input's name aside."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("brickscope.exporter.perfetto")

from brickscope.cli import main
from brickscope.offline import ParquetSpanWriter, open_spans
from brickscope.trace import attributes as A

GOLDEN = sorted((Path(__file__).parents[1] / "golden").glob("*.pftrace"))


def _report(capsys, *inputs: str) -> dict:
    assert main(["report", *inputs, "--format", "json", "--top", "5"]) == 0
    report = json.loads(capsys.readouterr().out)
    report.pop("sources")
    return report


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_report_of_parquet_equals_report_of_pftrace(tmp_path, capsys, path):
    converted = tmp_path / f"{path.stem}.parquet"
    with ParquetSpanWriter(converted) as writer, open_spans(path) as spans:
        assert writer.write(spans) > 0
    assert _report(capsys, str(converted)) == _report(capsys, str(path))


def test_a_dataset_directory_reports_as_its_files(tmp_path, capsys):
    """Per-rank part files under a dataset root are found recursively and read as one job."""
    for index, path in enumerate(GOLDEN[:2]):
        (tmp_path / "run" / f"rank-{index}").mkdir(parents=True)
        with ParquetSpanWriter(tmp_path / "run" / f"rank-{index}" / "part-00000.parquet") as writer:
            writer.write(open_spans(path))
    expected = _report(capsys, *map(str, GOLDEN[:2]))
    assert _report(capsys, str(tmp_path / "run")) == expected
    assert _report(capsys, str(tmp_path / "run" / "rank-*" / "*.parquet")) == expected


def _load_both(path: Path, monkeypatch) -> tuple:
    """The table of ``path`` through the column path, then through the record path."""
    from brickscope.analysis import _load

    fast = _load.load(str(path))
    with monkeypatch.context() as patch:
        patch.setattr(_load, "_add_parquet", lambda *args: False)
        slow = _load.load(str(path))
    return fast, slow


def _same_tables(fast, slow) -> None:
    assert sorted(fast.columns) == sorted(slow.columns)
    for name in slow.columns:
        assert list(fast[name]) == list(slow[name]), name
    for name in ("operations", "categories", "ranks", "devices", "streams", "launches", "kernel_sources", "impossible"):
        assert getattr(fast, name) == getattr(slow, name), name
    assert (fast.rows, fast.notes) == (slow.rows, slow.notes)


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_columns_path_makes_the_record_paths_table(tmp_path, monkeypatch, path):
    """A Parquet file becomes the same table, code for code, whether its columns are taken
    whole or each row goes through the span-by-span builder."""
    from brickscope.analysis import _parquet

    converted = tmp_path / f"{path.stem}.parquet"
    with ParquetSpanWriter(converted) as writer, open_spans(path) as spans:
        writer.write(spans)
    added = []
    real = _parquet.add_parquet
    monkeypatch.setattr(_parquet, "add_parquet", lambda *a: added.append(real(*a)) or added[-1])
    fast, slow = _load_both(converted, monkeypatch)
    assert added and added[0] is not None  # the column path ran
    _same_tables(fast, slow)


@pytest.mark.parametrize("seed", range(4))
def test_columns_path_keeps_every_bit_of_64_bit_values(tmp_path, monkeypatch, engine_cases, seed):
    """Seeded traces with random 64-bit span ids, parent ids, source hashes and checksums,
    in row groups that hold a root (a null parent) or a span without a hash: each value comes
    out exact, as the record path reads it (a column with nulls once came out of Arrow as
    float64, rounding such values to 53 bits)."""
    spans = engine_cases.generate(seed, steps=3, ranks=2)
    path = engine_cases.write_parquet(spans, tmp_path / "trace.parquet", row_group_rows=6 + seed)
    fast, slow = _load_both(path, monkeypatch)
    _same_tables(fast, slow)
    hashes = {int(span.attributes[A.KERNEL_SOURCE_HASH], 16) for span in spans if A.KERNEL_SOURCE_HASH in span.attributes}
    assert max(hashes) > 2**53 and max(span.context.span_id for span in spans) > 2**63  # the cases that rounded


def test_columns_path_counts_impossible_rows_as_the_rule_does(tmp_path, monkeypatch):
    """Each impossible row is left out and counted under its first reason, as open_records counts it."""
    from brickscope.testing import make_span
    from brickscope.trace import attributes as A

    t0 = 1_700_000_000_000_000_000
    brick = {A.SCOPE_KIND: "brick", A.BRICK_CATEGORY: "ffn"}
    spans = [
        make_span(1, "ok", t0, t0 + 100, attributes={**brick, A.WORK_BYTES: 64, "flops": 2.0}),
        make_span(2, "backwards", t0 + 100, t0, attributes=brick),
        make_span(3, "negative", t0, t0 + 100, attributes={**brick, A.BRICK_SELF_DURATION_NS: -1}),
        make_span(4, "negative-bytes", t0, t0 + 100, attributes={**brick, "bytes": -5}),
        make_span(5, "too-long", t0, t0 + 100, attributes={**brick, A.BRICK_SELF_DURATION_NS: 500}),
        make_span(6, "gpu", t0, t0 + 100, attributes={**brick, A.GPU_DURATION_NS: 5_000}),
        make_span(7, "both", t0 + 100, t0, attributes={**brick, A.GPU_DURATION_NS: -5}),
        make_span(8, "no-start", 0, t0, attributes=brick),
    ]
    path = tmp_path / "bad.parquet"
    with ParquetSpanWriter(path) as writer:
        writer.write(spans)
    fast, slow = _load_both(path, monkeypatch)
    _same_tables(fast, slow)
    assert fast.rows == 1
    assert fast.impossible == {
        "no_start_time": 1, "end_before_start": 2, "negative_duration": 1, "negative_amount": 1, "inconsistent_duration": 2,
    }  # fmt: skip


def test_odd_values_take_the_record_path(tmp_path, monkeypatch):
    """A value no typed column holds (a step given as text) is read as the span path reads it."""
    from brickscope.analysis import _parquet
    from brickscope.testing import make_span
    from brickscope.trace import attributes as A

    path = tmp_path / "odd.parquet"
    with ParquetSpanWriter(path) as writer:
        writer.write([make_span(1, "b", 10, 20, attributes={A.SCOPE_KIND: "brick", A.STEP_NUMBER: "3"})])
    real = _parquet.add_parquet
    results = []
    monkeypatch.setattr(_parquet, "add_parquet", lambda *a: results.append(real(*a)) or results[-1])
    fast, slow = _load_both(path, monkeypatch)
    assert results == [None]
    _same_tables(fast, slow)
    assert list(fast["step"]) == [3]
