# SPDX-License-Identifier: Apache-2.0
"""The Spark engine in Spark's local mode against the in-memory and DuckDB engines: the same
Parquet spans give the same report, every section of its JSON.

One local session (two cores, two shuffle partitions, no UI) serves the whole module: a
JVM starts once. Skipped where pyspark or Java is missing (``brickscope[spark]``).
"""

from __future__ import annotations

import json
import shutil

import pytest

from brickscope.analysis import AnalysisError, analyse, load, to_json
from brickscope.cli import main

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")
if shutil.which("java") is None:
    pytest.skip("Spark needs Java (none on PATH)", allow_module_level=True)

from brickscope.analysis._spark import (
    SparkSettings,
    _local_defaults,
    check_footer,
    load_spark,
    report_spark,
    spark_session,
)

#: A JVM start and Spark's query planning take tens of seconds on a busy 2-core machine.
pytestmark = pytest.mark.timeout(900)

LOCAL = SparkSettings(
    master="local[2]",
    conf=(
        ("spark.sql.shuffle.partitions", "2"),
        ("spark.default.parallelism", "2"),
        ("spark.ui.enabled", "false"),
        ("spark.ui.showConsoleProgress", "false"),
        ("spark.driver.memory", "1g"),
    ),
    app_name="brickscope-tests",
)


@pytest.fixture(name="spark", scope="module")
def _spark():
    session = spark_session(LOCAL)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _duckdb_json(path, **options):
    """The DuckDB engine's report (every section in its SQL), or None where DuckDB is not installed."""
    from brickscope.analysis._duckdb import available, report_parquet

    if not available():
        return None
    return to_json(report_parquet(str(path), memory_limit="256MB", threads=2, **options))


def test_spark_gives_the_in_memory_and_duckdb_report(tmp_path, spark, engine_cases):
    """Every section of the report JSON, computed in Spark SQL, is the other engines', on a trace
    of four ranks with every shape the generator makes (each Spark report is a few dozen
    queries: tens of seconds in local mode, so one trace here; the DuckDB engine's tests run
    the same SQL over many)."""
    seed, backend = 7, "numpy"
    spans = engine_cases.generate(seed, steps=2 + seed % 3, ranks=1 + seed % 4)
    path = engine_cases.write_parquet(spans, tmp_path / "trace.parquet", row_group_rows=7 + seed)
    expected = to_json(analyse(load(path, backend=backend), top=5))
    got = to_json(report_spark(str(path), backend=backend, spark=spark, top=5))
    assert got.keys() == expected.keys()
    for section in expected:
        assert got[section] == expected[section], section
    duckdb = _duckdb_json(path, top=5)
    if duckdb is not None:
        assert got == duckdb


def test_a_dataset_directory_with_filters(tmp_path, spark, engine_cases):
    """Per-rank files in subdirectories and one beside them: the same files in the same order as
    the in-memory engine reads them, and --step/--rank select the same rows."""
    spans = engine_cases.generate(3, steps=4, ranks=4)
    engine_cases.write_rank_dataset(spans, tmp_path / "job")
    (tmp_path / "job" / "README.txt").write_text("not a span file: left out, as *.parquet only is read")
    memory, job = load(tmp_path / "job"), str(tmp_path / "job")
    options = {"steps": (1, 3), "ranks": [memory.ranks[1], memory.ranks[2]]}
    got = to_json(report_spark(job, spark=spark, backend="python", **options))
    assert len(got["sources"]) == 4
    assert got == to_json(analyse(memory, **options))


def test_local_mode_takes_one_shuffle_partition_a_core_only_where_unset(tmp_path, spark, engine_cases):
    """Spark's 200 shuffle partitions become one a core (local[2]: 2) while a report runs, and
    are unset again after; a value set by the user (this session's 2) is left alone."""
    key = "spark.sql.shuffle.partitions"
    assert _local_defaults(spark) == {}
    path = str(engine_cases.write_parquet(engine_cases.generate(1), tmp_path / "t.parquet"))
    spark.conf.unset(key)
    try:
        assert _local_defaults(spark) == {key: "2"}
        report_spark(path, spark=spark)
        assert spark.conf.get(key, None) is None
    finally:
        spark.conf.set(key, "2")


class TestRefusals:
    """A file the engine cannot read exactly is refused in one line naming it, the line of the
    other engines."""

    def test_a_parquet_file_of_another_schema(self, tmp_path, spark):
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = tmp_path / "other.parquet"
        pq.write_table(pa.table({"x": [1, 2]}), path)
        with pytest.raises(AnalysisError, match=rf"^{path}: not brickscope span files: no column span_id"):
            load_spark(str(path), spark=spark)

    def test_a_newer_schema_version(self, tmp_path, spark, engine_cases):
        import pyarrow.parquet as pq

        path = engine_cases.write_parquet(engine_cases.generate(1), tmp_path / "t.parquet")
        table = pq.read_table(path)
        pq.write_table(table.replace_schema_metadata({"brickscope.schema_version": "2"}), path)
        with pytest.raises(
            AnalysisError, match=rf"^{path}: schema version 2 is newer than this brickscope reads \(1\)"
        ):
            load_spark(str(path), spark=spark)

    def test_a_missing_column_in_one_file_of_a_dataset(self, tmp_path, spark, engine_cases):
        """Spark takes the dataset's schema from one file; every file's footer is checked."""
        import pyarrow.parquet as pq

        good = engine_cases.write_parquet(engine_cases.generate(1), tmp_path / "a.parquet")
        bad = engine_cases.write_parquet(engine_cases.generate(2), tmp_path / "b.parquet")
        pq.write_table(pq.read_table(bad).drop_columns(["self_ns"]), bad)
        assert good.exists()
        with pytest.raises(AnalysisError, match=rf"^{bad}: missing column self_ns$"):
            load_spark(str(tmp_path), spark=spark)

    def test_not_a_parquet_file(self, tmp_path, spark):
        path = tmp_path / "t.parquet"
        path.write_bytes(b"not parquet at all")
        with pytest.raises(AnalysisError, match=rf"^{path}: not a complete Parquet file"):
            check_footer(spark, path.as_uri())

    def test_a_missing_input_and_an_empty_glob(self, tmp_path, spark):
        with pytest.raises(AnalysisError, match=rf"^{tmp_path / 'nope'}: no such file or directory$"):
            load_spark(str(tmp_path / "nope"), spark=spark)
        with pytest.raises(AnalysisError, match=r": no such file or directory$"):
            load_spark(str(tmp_path / "*.parquet"), spark=spark)

    def test_an_analysis_attribute_of_another_type(self, tmp_path, spark, engine_cases):
        """A text step number is kept in the attributes JSON, which the SQL does not read."""
        from brickscope.testing import make_span
        from brickscope.trace import attributes as A

        spans = engine_cases.generate(1)
        spans.append(make_span(99, "odd", 10**18, 10**18 + 5, attributes={A.SCOPE_KIND: "brick", A.STEP_NUMBER: "3"}))
        path = engine_cases.write_parquet(spans, tmp_path / "t.parquet")
        with pytest.raises(AnalysisError, match=rf"^{path}: 1 spans hold brickscope.step.number"):
            load_spark(str(path), spark=spark)


class TestCommandLine:
    """``--engine spark`` uses the active session (``getOrCreate``)."""

    def test_diff_json_is_the_in_memory_one(self, tmp_path, capsys, spark, engine_cases):
        """diff reads each run's whole table, brought to the driver (``load_spark``)."""
        base = str(engine_cases.write_parquet(engine_cases.generate(2, ranks=3), tmp_path / "base.parquet"))
        new = str(engine_cases.write_parquet(engine_cases.generate(6, ranks=3), tmp_path / "new.parquet"))
        assert main(["diff", base, new, "--format", "json", "--engine", "spark", "-q"]) == 0
        got = capsys.readouterr()
        assert main(["diff", base, new, "--format", "json", "--engine", "memory", "-q"]) == 0
        assert json.loads(got.out) == json.loads(capsys.readouterr().out)
