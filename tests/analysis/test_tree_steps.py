# SPDX-License-Identifier: Apache-2.0
"""``tree --step`` over Parquet reads only the chosen steps' rows: the same graphs as the whole
table gives, in a fraction of the memory, on traces of every shape."""

from __future__ import annotations

import pytest
from analysis_synthetic import write_otlp_json

from brickscope.analysis import load, render_tree, tree_graphs
from brickscope.cli import main

pytest.importorskip("pyarrow")


def _expected(path, steps, fmt):
    whole = load(path)
    return render_tree(tree_graphs(whole, steps), fmt, sources=whole.kernel_sources)


@pytest.mark.parametrize("seed", range(6))
def test_step_graphs_read_from_their_rows_alone_equal_the_whole_tables(seed, tmp_path, capsys, engine_cases):
    """Seeded traces with ranks, nested bricks, kernels and launches, overhead, GC and another
    instrumentation's spans nested in steps (rows without a step number, always kept); row
    groups of a few rows, so whole groups are skipped by their statistics."""
    spans = engine_cases.generate(seed, steps=4, ranks=1 + seed % 3)
    path = engine_cases.write_parquet(spans, tmp_path / "trace.parquet", row_group_rows=5 + seed)
    for option, steps in (("1", (1, 2)), ("1:3", (1, 3)), ("2:", (2, None)), (":1", (None, 1))):
        for fmt in ("text", "json"):
            assert main(["tree", "-q", str(path), "--step", option, "--format", fmt]) == 0
            assert capsys.readouterr().out == _expected(path, steps, fmt), (option, fmt)


def test_only_the_chosen_steps_rows_are_in_the_table(tmp_path, engine_cases):
    """load(steps=...) keeps the rows of those steps and the rows without a step number."""
    spans = engine_cases.generate(2, steps=4, ranks=2)
    path = engine_cases.write_parquet(spans, tmp_path / "trace.parquet", row_group_rows=9)
    whole = load(path)
    expected = sum(1 for step in whole["step"] if step in (-1, 2))  # -1: no step number
    assert load(path, steps=(2, 3)).rows == expected < whole.rows
    # The record path (another format) keeps the same rows.
    assert load(write_otlp_json(tmp_path / "trace.jsonl", spans), steps=(2, 3)).rows == expected


def test_a_step_the_files_do_not_hold_names_the_steps_they_do(tmp_path, capsys, engine_cases):
    spans = engine_cases.generate(1, steps=3, ranks=1)
    path = engine_cases.write_parquet(spans, tmp_path / "trace.parquet")
    numbers = sorted(
        {span.attributes["brickscope.step.number"] for span in spans if "brickscope.step.number" in span.attributes}
    )
    assert main(["tree", "-q", str(path), "--step", "50"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"brickscope tree: no step 50 in the trace (steps {numbers[0]} to {numbers[-1]})"
    )
