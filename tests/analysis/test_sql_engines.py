# SPDX-License-Identifier: Apache-2.0
"""The SQL engines against the in-memory engine: the same Parquet spans give the same report,
every section of its JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from brickscope.analysis import AnalysisError, _engines, analyse, load, to_json
from brickscope.cli import main
from brickscope.offline import ParquetSpanWriter, open_spans

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from brickscope.analysis._duckdb import load_parquet, report_parquet


def _duckdb(*inputs, backend):
    return load_parquet(*map(str, inputs), backend=backend, memory_limit="256MB", threads=2)


def _sql_report(*inputs, backend=None, **options):
    """The report computed in SQL, out of core (what ``report --engine duckdb`` prints)."""
    return to_json(report_parquet(*map(str, inputs), backend=backend, memory_limit="256MB", threads=2, **options))


@pytest.mark.parametrize("seed", range(12))
def test_duckdb_gives_the_in_memory_report(seed, tmp_path, backend, engine_cases):
    """Every section of the report JSON is the in-memory engine's, on traces of every shape."""
    spans = engine_cases.generate(seed, steps=2 + seed % 3, ranks=1 + seed % 4)
    path = engine_cases.write_parquet(spans, tmp_path / "trace.parquet", row_group_rows=7 + seed)
    expected = to_json(analyse(load(path, backend=backend), top=5))
    table = to_json(analyse(_duckdb(path, backend=backend), top=5))
    sql = _sql_report(path, backend=backend, top=5)
    assert table.keys() == sql.keys() == expected.keys()
    for section in expected:
        assert table[section] == expected[section], section
        assert sql[section] == expected[section], section


def test_a_dataset_directory_reads_as_the_in_memory_engine_reads_it(tmp_path, backend, engine_cases):
    """Per-rank files in subdirectories, and one beside them: same files, same order, same report."""
    spans = engine_cases.generate(3, steps=3, ranks=4)
    engine_cases.write_rank_dataset(spans, tmp_path / "job")
    expected = to_json(analyse(load(tmp_path / "job", backend=backend)))
    got = to_json(analyse(_duckdb(tmp_path / "job", backend=backend)))
    assert len(got["sources"]) == 4
    assert got == expected
    assert _sql_report(tmp_path / "job", backend=backend) == expected


def test_filters_select_the_same_rows(tmp_path, engine_cases):
    """--step, --rank and --device act on the DuckDB table as on the in-memory one."""
    spans = engine_cases.generate(7, steps=4, ranks=4)
    path = engine_cases.write_parquet(spans, tmp_path / "trace.parquet")
    memory, sql = load(path), _duckdb(path, backend=None)
    options = {"steps": (1, 3), "ranks": [memory.ranks[1], memory.ranks[2]], "devices": [0]}
    expected = to_json(analyse(memory, **options))
    assert to_json(analyse(sql, **options)) == expected
    assert _sql_report(path, **options) == expected
    for bad in ({"ranks": ["nope"]}, {"devices": [7]}, {"steps": (50, None)}):
        with pytest.raises(AnalysisError) as in_memory:
            analyse(memory, **bad)
        with pytest.raises(AnalysisError, match=f"^{re.escape(str(in_memory.value))}$"):
            _sql_report(path, **bad)


class TestRefusals:
    """A file the engine cannot read exactly is refused in one line naming it."""

    def test_a_parquet_file_of_another_schema(self, tmp_path):
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = tmp_path / "other.parquet"
        pq.write_table(pa.table({"x": [1, 2]}), path)
        with pytest.raises(AnalysisError, match=rf"^{path}: not a brickscope span file"):
            _duckdb(path, backend=None)

    def test_a_newer_schema_version(self, tmp_path, engine_cases):
        import pyarrow.parquet as pq

        path = engine_cases.write_parquet(engine_cases.generate(1), tmp_path / "t.parquet")
        table = pq.read_table(path)
        pq.write_table(table.replace_schema_metadata({"brickscope.schema_version": "2"}), path)
        with pytest.raises(AnalysisError, match=rf"^{path}: schema version 2 is newer"):
            _duckdb(path, backend=None)

    def test_a_missing_column(self, tmp_path, engine_cases):
        import pyarrow.parquet as pq

        path = engine_cases.write_parquet(engine_cases.generate(1), tmp_path / "t.parquet")
        table = pq.read_table(path)
        pq.write_table(table.drop_columns(["self_ns"]), path)
        with pytest.raises(AnalysisError, match=rf"^{path}: missing column self_ns$"):
            _duckdb(path, backend=None)

    def test_not_a_parquet_file(self, tmp_path):
        path = tmp_path / "t.parquet"
        path.write_bytes(b"not parquet at all")
        with pytest.raises(AnalysisError, match=rf"^{path}: not a complete Parquet file"):
            _duckdb(path, backend=None)

    def test_an_analysis_attribute_of_another_type(self, tmp_path, engine_cases):
        """A text step number is kept in the attributes JSON, which SQL does not read as the
        in-memory engine does (it parses "3" as 3): refused rather than counted otherwise."""
        from brickscope.testing import make_span
        from brickscope.trace import attributes as A

        spans = engine_cases.generate(1)
        spans.append(make_span(99, "odd", 10**18, 10**18 + 5, attributes={A.SCOPE_KIND: "brick", A.STEP_NUMBER: "3"}))
        path = engine_cases.write_parquet(spans, tmp_path / "t.parquet")
        with pytest.raises(AnalysisError, match=rf"^{path}: 1 spans hold brickscope.step.number"):
            _duckdb(path, backend=None)


GOLDEN = sorted((Path(__file__).parents[1] / "golden").glob("*.pftrace"))


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_golden_traces_report_the_same_on_both_engines(tmp_path, path):
    """Traces recorded by the real pipeline, converted to Parquet: the same report on both engines."""
    pytest.importorskip("brickscope.exporter.perfetto")
    converted = tmp_path / f"{path.stem}.parquet"
    with ParquetSpanWriter(converted) as writer, open_spans(path) as spans:
        writer.write(spans)
    expected = to_json(analyse(load(converted), top=5))
    assert to_json(analyse(_duckdb(converted, backend=None), top=5)) == expected
    assert _sql_report(converted, top=5) == expected


FOREIGN = Path(__file__).parents[2] / "exporters/perfetto/tests/data/tg4perfetto_example.pftrace"


def test_another_producers_trace_reports_the_same_on_both_engines(tmp_path):
    """Slices of no brickscope kind (a third-party TrackEvent writer's): the self time by span
    name, the one section such a trace has, is the same on both engines."""
    pytest.importorskip("brickscope.exporter.perfetto")
    converted = tmp_path / "foreign.parquet"
    with ParquetSpanWriter(converted) as writer, open_spans(FOREIGN) as spans:
        writer.write(spans)
    expected = to_json(analyse(load(converted), top=5))
    assert expected["others"], "the trace has slices of no brickscope kind"
    assert _sql_report(converted, top=5) == expected


class TestCommandLine:
    """``--engine`` on report and diff, and the default choice said on stderr."""

    def _trace(self, tmp_path, engine_cases, seed=2):
        return str(engine_cases.write_parquet(engine_cases.generate(seed, ranks=3), tmp_path / f"t{seed}.parquet"))

    def test_report_json_is_the_same_on_both_engines(self, tmp_path, capsys, engine_cases):
        path = self._trace(tmp_path, engine_cases)
        assert main(["report", path, "--format", "json", "--engine", "duckdb", "-q"]) == 0
        sql = capsys.readouterr()
        assert main(["report", path, "--format", "json", "--engine", "memory", "-q"]) == 0
        assert json.loads(sql.out) == json.loads(capsys.readouterr().out)

    def test_the_default_choice_is_said_in_one_line(self, tmp_path, capsys, engine_cases, monkeypatch):
        """Small Parquet inputs stay in memory, large ones go to DuckDB; stderr says which and why."""
        path = self._trace(tmp_path, engine_cases)
        assert main(["report", path, "--format", "json"]) == 0
        said = [line for line in capsys.readouterr().err.splitlines() if "engine" in line]
        assert said == [
            f"brickscope report: engine memory ({_rows(path):,} spans, under 1,000,000; --engine to choose)"
        ]
        monkeypatch.setattr(_engines, "DUCKDB_MIN_SPANS", 10)
        assert main(["report", path, "--format", "json"]) == 0
        said = [line for line in capsys.readouterr().err.splitlines() if "engine" in line]
        assert said == [f"brickscope report: engine duckdb ({_rows(path):,} spans in Parquet; --engine to choose)"]

    @pytest.mark.parametrize(
        "options", [[], ["--step", "1:"], ["--rank", "1", "--device", "1"]], ids=["all", "steps", "rank-device"]
    )
    def test_diff_on_duckdb_is_the_in_memory_diff(self, tmp_path, capsys, engine_cases, options):
        """Each run's statistics computed in SQL: the same comparison, JSON and stderr, one run a
        side (the instances' test) and several (the steps' medians)."""
        runs = [self._trace(tmp_path, engine_cases, seed) for seed in (1, 3, 7, 9)]  # launcher ranks 0, 1, 2
        for sides in ([runs[0], runs[1]], ["--base", runs[0], runs[1], "--new", runs[2], runs[3]]):
            assert main(["diff", *sides, "--format", "json", "--engine", "duckdb", "-q", *options]) == 0
            sql = capsys.readouterr()
            assert main(["diff", *sides, "--format", "json", "--engine", "memory", "-q", *options]) == 0
            memory = capsys.readouterr()
            assert json.loads(sql.out) == json.loads(memory.out)
            assert sql.err == memory.err

    def test_a_sql_engine_refuses_other_formats_in_one_line(self, tmp_path, capsys):
        trace = tmp_path / "t.json"
        trace.write_text("{}")
        assert main(["report", str(trace), "--engine", "duckdb"]) == 1
        err = capsys.readouterr().err
        assert err == (
            f"brickscope report: {trace}: --engine duckdb reads Parquet span files; convert it first"
            f" (brickscope convert {trace} -o t.parquet) or use --engine memory\n"
        )

    def test_a_directory_is_parquet_only_when_every_trace_file_is(self, tmp_path, capsys, engine_cases):
        """A run directory holding a Parquet file and an OTLP JSON one: the refusal names the JSON file."""
        (tmp_path / "run").mkdir()
        engine_cases.write_parquet(engine_cases.generate(1), tmp_path / "run" / "a.parquet")
        (tmp_path / "run" / "b.json").write_text("{}")
        assert main(["report", str(tmp_path / "run"), "--engine", "duckdb"]) == 1
        assert capsys.readouterr().err.startswith(f"brickscope report: {tmp_path / 'run' / 'b.json'}: --engine duckdb")


def _rows(path: str) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def test_shared_span_ids_are_refused(tmp_path, engine_cases):
    """The same file given twice: every span id twice, which the in-memory engine links to the last
    copy and a join would link to both; refused in one line rather than counted otherwise."""
    path = engine_cases.write_parquet(engine_cases.generate(1), tmp_path / "t.parquet")
    with pytest.raises(AnalysisError, match=r"span ids are held by more than one span \(a file given twice\?\)"):
        _sql_report(path, path)


def test_critical_paths_of_nested_steps(tmp_path, engine_cases):
    """A step inside another step (under a span of no brickscope kind) is left to it: the
    slowest steps and their trees are the in-memory engine's."""
    from brickscope.testing import make_span
    from brickscope.trace import attributes as A

    spans = engine_cases.generate(2, steps=2, ranks=1)
    resource = spans[0].resource
    t = engine_cases.T0 + 10**12  # after the generated steps
    us = engine_cases.US

    def add(span_id, name, start, end, parent, kind=None, **attributes):
        if kind:
            attributes[A.SCOPE_KIND] = kind
        attributes.setdefault(A.CLOCK, "host")
        spans.append(make_span(span_id, name, t + start * us, t + end * us, parent, attributes=attributes,
                               resource=resource))  # fmt: skip

    add(11, "outer", 0, 900, None, "step", **{A.STEP_NUMBER: 7})
    add(12, "request", 10, 800, 11)
    add(13, "inner", 20, 700, 12, "step", **{A.STEP_NUMBER: 8})
    add(14, "matmul", 30, 600, 13, "brick", **{A.STEP_NUMBER: 8})
    add(21, "request", 1000, 1100, None)
    add(22, "wrapped", 1010, 1090, 21, "step", **{A.STEP_NUMBER: 9})
    add(23, "norm", 1020, 1080, 22, "brick", **{A.STEP_NUMBER: 9})
    path = engine_cases.write_parquet(spans, tmp_path / "trace.parquet")
    expected = to_json(analyse(load(path), top=4))
    assert sorted(p["step"] for p in expected["critical_paths"]) == [0, 1, 7, 9]  # not 8, inside 7
    assert _sql_report(path, top=4)["critical_paths"] == expected["critical_paths"]


class TestRooflineFlops:
    """Flops are summed as the in-memory engine sums them, floats added in row order, also where
    SQL could sum them another way."""

    def _gemms(self, tmp_path, engine_cases, flops):
        from brickscope.testing import make_span
        from brickscope.trace import attributes as A

        us = 1_000
        t = 1_700_000_000_000_000_000
        spans = [
            make_span(
                1 + i,
                "gemm",
                t + 10 * i * us,
                t + (10 * i + 4) * us,
                attributes={A.SCOPE_KIND: "brick", A.CLOCK: "host", A.WORK_FLOPS: value, A.WORK_BYTES: 64},
            )  # fmt: skip
            for i, value in enumerate(flops)
        ]
        return engine_cases.write_parquet(spans, tmp_path / "gemm.parquet")

    def _flops(self, report):
        (point,) = report["roofline"]
        return point["flops"]

    def test_whole_flops_past_2_to_the_53_round_as_in_row_order(self, tmp_path, engine_cases):
        """2**53 then 1 then 1: in row order each 1 rounds away (2**53 + 1 is no float), so the
        sum is 2**53, not the exact 2**53 + 2; both engines say 2**53."""
        path = self._gemms(tmp_path, engine_cases, [float(1 << 53), 1.0, 1.0])
        assert self._flops(to_json(analyse(load(path)))) == float(1 << 53)
        assert self._flops(_sql_report(path)) == float(1 << 53)

    def test_whole_multiples_of_a_power_of_two_sum_exactly(self, tmp_path, engine_cases):
        """2**60, 2**60 and 2**10: every partial sum a float, the total 2**61 + 2**10 exactly."""
        path = self._gemms(tmp_path, engine_cases, [float(1 << 60), float(1 << 60), float(1 << 10)])
        assert self._flops(to_json(analyse(load(path)))) == float((1 << 61) + (1 << 10))
        assert self._flops(_sql_report(path)) == float((1 << 61) + (1 << 10))

    def test_fractional_flops_in_row_order(self, tmp_path, engine_cases):
        """0.1 + 0.2 + 0.3 in row order is 0.6000000000000001 (0.3 + 0.2 + 0.1 would be 0.6)."""
        path = self._gemms(tmp_path, engine_cases, [0.1, 0.2, 0.3])
        assert self._flops(to_json(analyse(load(path)))) == 0.1 + 0.2 + 0.3 == 0.6000000000000001
        assert self._flops(_sql_report(path)) == 0.6000000000000001
