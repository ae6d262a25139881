# SPDX-License-Identifier: Apache-2.0
"""The SQL engines against the in-memory engine: the same spans give the same report, every section."""

from __future__ import annotations

import sys

import pytest

from brickscope.analysis import analyse, load_spans, to_json
from brickscope.offline import describe_impossible, impossible

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")




def _memory_report(spans, path, backend, **options):
    """The in-memory engine's report of the valid spans, with the impossible ones counted as a
    reader of ``path`` counts them."""
    dropped: dict[str, int] = {}
    valid = []
    for span in spans:
        reason = impossible(span.start_time, span.end_time, span.attributes)
        if reason is None:
            valid.append(span)
        else:
            dropped[reason] = dropped.get(reason, 0) + 1
    table = load_spans(valid, backend=backend)
    table.sources = [str(path)]
    table.impossible = dropped
    if dropped:
        count = sum(dropped.values())
        table.notes = [f"{path}: {count:,} impossible {'span' if count == 1 else 'spans'} left out"
                       f" ({describe_impossible(dropped)})"]
    return to_json(analyse(table, **options))


@pytest.mark.parametrize("seed", range(12))
def test_duckdb_gives_the_in_memory_report(seed, tmp_path, backend, engine_cases):
    """Every section of the report JSON is the in-memory engine's, on traces of every shape."""
    from brickscope.analysis._duckdb import load_parquet

    spans = engine_cases.generate(seed, steps=2 + seed % 3, ranks=1 + seed % 4)
    path = engine_cases.write_parquet(spans, tmp_path / "trace.parquet", row_group_size=7 + seed)
    expected = _memory_report(spans, path, backend, top=5)
    got = to_json(analyse(load_parquet(str(path), backend=backend, memory_limit="256MB", threads=2), top=5))
    for section in expected:
        assert got[section] == expected[section], section
