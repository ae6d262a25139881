# SPDX-License-Identifier: Apache-2.0
"""ParquetSpanExporter: part files, their names, failures, and the zero-code route."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExportResult

from brickscope.exporter.parquet import ParquetSpanExporter, environment_variables as env
from brickscope.offline import open_spans, parquet_files
from brickscope.testing import make_span
from brickscope.trace import attributes as A

pq = pytest.importorskip("pyarrow.parquet")

T0 = 1_700_000_000_000_000_000
RANKED = Resource({"service.name": "train", "service.instance.id": "i-1", A.RANK: 5})


def _spans(count: int, resource: Resource = RANKED, first: int = 0) -> list:
    return [
        make_span(
            first + i + 1,
            f"brick{first + i}",
            T0 + 10 * (first + i),
            T0 + 10 * (first + i) + 5,
            attributes={A.SCOPE_KIND: "brick", A.BRICK_CATEGORY: "ffn", A.STEP_NUMBER: (first + i) // 4},
            resource=resource,
        )
        for i in range(count)
    ]


def _names(directory) -> list[str]:
    return [span.name for path in parquet_files(directory) for span in open_spans(path)]


class TestParts:
    def test_spans_read_back_from_the_published_parts(self, tmp_path):
        with ParquetSpanExporter(tmp_path / "out") as exporter:
            assert exporter.export(_spans(6)) is SpanExportResult.SUCCESS
        assert [os.path.basename(p) for p in exporter.parts] == ["part-00000.parquet"]
        assert _names(tmp_path / "out") == [f"brick{i}" for i in range(6)]

    def test_parts_roll_at_part_rows(self, tmp_path):
        """7 spans in batches of 2 with parts of 3 or more spans: parts of 4 and 3 (a part closes
        after the export that fills it)."""
        exporter = ParquetSpanExporter(tmp_path / "out", part_rows=3)
        for first in range(0, 7, 2):
            exporter.export(_spans(min(2, 7 - first), first=first))
        exporter.shutdown()
        rows = [pq.ParquetFile(p).metadata.num_rows for p in parquet_files(tmp_path / "out")]
        assert rows == [4, 3]
        assert _names(tmp_path / "out") == [f"brick{i}" for i in range(7)]

    def test_parts_roll_at_part_interval(self, tmp_path):
        """An export that finds the part 60 s old publishes it, the batch included; a younger
        part stays open. Time is driven by the test."""
        now = [0]
        exporter = ParquetSpanExporter(tmp_path / "out", part_interval_millis=60_000, clock=lambda: now[0])
        exporter.export(_spans(2))  # opens the part at t=0
        now[0] = 59_999_000_000
        exporter.export(_spans(1, first=2))
        assert exporter.parts == []
        now[0] = 60_000_000_000
        exporter.export(_spans(1, first=3))
        assert len(exporter.parts) == 1 and pq.ParquetFile(exporter.parts[0]).metadata.num_rows == 4
        exporter.export(_spans(1, first=4))  # a new part, opened at t=60 s
        now[0] = 119_000_000_000
        exporter.export(_spans(1, first=5))
        assert len(exporter.parts) == 1
        exporter.shutdown()
        assert _names(tmp_path / "out") == [f"brick{i}" for i in range(6)]

    def test_nothing_readable_until_flushed_then_everything(self, tmp_path):
        """The open part is hidden from readers; force_flush publishes it."""
        exporter = ParquetSpanExporter(tmp_path / "out")
        exporter.export(_spans(3))
        with pytest.raises(FileNotFoundError):
            parquet_files(tmp_path / "out")
        assert exporter.force_flush()
        assert _names(tmp_path / "out") == ["brick0", "brick1", "brick2"]
        exporter.export(_spans(1, first=3))
        exporter.shutdown()
        exporter.shutdown()  # idempotent
        assert len(parquet_files(tmp_path / "out")) == 2
        assert exporter.export(_spans(1)) is SpanExportResult.FAILURE

    def test_a_second_exporter_takes_the_next_part_number(self, tmp_path):
        for first in (0, 2):
            with ParquetSpanExporter(tmp_path / "out") as exporter:
                exporter.export(_spans(2, first=first))
        assert [os.path.basename(p) for p in parquet_files(tmp_path / "out")] == [
            "part-00000.parquet",
            "part-00001.parquet",
        ]

    def test_run_column(self, tmp_path, monkeypatch):
        """run: the argument, else BRICKSCOPE_PARQUET_RUN, else the resource's service.instance.id."""
        for run, environ, expected in (("a", "b", "a"), (None, "b", "b"), (None, None, "i-1")):
            if environ is None:
                monkeypatch.delenv(env.BRICKSCOPE_PARQUET_RUN, raising=False)
            else:
                monkeypatch.setenv(env.BRICKSCOPE_PARQUET_RUN, environ)
            with ParquetSpanExporter(tmp_path / f"{expected}-{run}", run=run) as exporter:
                exporter.export(_spans(1))
            assert pq.read_table(exporter.parts[0]).column("run").to_pylist() == [expected]


class TestPathTemplate:
    def test_rank_comes_from_the_resource(self, tmp_path):
        with ParquetSpanExporter(tmp_path / "job" / "rank-{rank}") as exporter:
            exporter.export(_spans(1))
        assert exporter.directory == str(tmp_path / "job" / "rank-5")

    def test_rank_is_the_pid_without_a_launcher_rank_and_pid_is_expanded(self, tmp_path):
        with ParquetSpanExporter(tmp_path / "p{pid}" / "r{rank}") as exporter:
            exporter.export(_spans(1, Resource({"service.name": "solo"})))
        pid = os.getpid()
        assert exporter.directory == str(tmp_path / f"p{pid}" / f"r{pid}")

    def test_path_from_environment(self, tmp_path, monkeypatch):
        monkeypatch.setenv(env.BRICKSCOPE_PARQUET_PATH, str(tmp_path / "env-{rank}"))
        with ParquetSpanExporter() as exporter:
            exporter.export(_spans(1))
        assert exporter.directory == str(tmp_path / "env-5")

    def test_a_file_where_the_directory_goes_is_refused_at_once(self, tmp_path):
        (tmp_path / "taken").write_text("")
        with pytest.raises(ValueError, match="is not a directory"):
            ParquetSpanExporter(tmp_path / "taken" / "rank-{rank}")

    def test_bad_part_rows(self, monkeypatch):
        with pytest.raises(ValueError, match="at least 1"):
            ParquetSpanExporter(part_rows=0)
        with pytest.raises(ValueError, match="at least 1"):
            ParquetSpanExporter(part_interval_millis=0)
        monkeypatch.setenv(env.BRICKSCOPE_PARQUET_PART_ROWS, "many")
        with pytest.raises(ValueError, match="BRICKSCOPE_PARQUET_PART_ROWS='many' is not a whole number"):
            ParquetSpanExporter()


class TestFailures:
    def test_spans_without_times_are_skipped_and_counted(self, tmp_path):
        unfinished = _spans(1)[0]
        unfinished._end_time = None
        with ParquetSpanExporter(tmp_path / "out") as exporter:
            exporter.export([unfinished, *_spans(2, first=1)])
        assert exporter.skipped_spans == 1 and _names(tmp_path / "out") == ["brick1", "brick2"]

    def test_a_failed_write_counts_the_lost_spans_and_logs_once(self, tmp_path, caplog):
        """A part whose file vanished mid-run loses its spans (counted); the next export starts a new part."""
        exporter = ParquetSpanExporter(tmp_path / "out")
        exporter.export(_spans(2))
        exporter._writer.close = _raise  # the footer cannot be written
        with caplog.at_level(logging.ERROR):
            assert not exporter.force_flush()
            exporter._writer = None
            exporter.export(_spans(1, first=2))
            exporter._writer.close = _raise
            assert not exporter.force_flush()
        assert exporter.dropped_spans == 3 and exporter.failed_exports == 2
        assert len(caplog.records) == 1 and "cannot close the part file" in caplog.records[0].getMessage()
        assert [n for n in os.listdir(tmp_path / "out") if not n.startswith("rank")] == []
        exporter.shutdown()


def _raise() -> None:
    raise OSError(28, "No space left on device")


class TestZeroCode:
    def test_entry_point(self, tmp_path, monkeypatch):
        """OTEL_TRACES_EXPORTER=parquet finds the exporter through its entry point."""
        (entry_point,) = entry_points(group="opentelemetry_traces_exporter", name="parquet")
        monkeypatch.setenv(env.BRICKSCOPE_PARQUET_PATH, str(tmp_path / "ep"))
        exporter = entry_point.load()()
        exporter.shutdown()
        assert isinstance(exporter, ParquetSpanExporter)

    def test_otel_traces_exporter_in_a_subprocess(self, tmp_path):
        """A program that only calls brickscope.configure() writes its bricks to rank-3/ when
        torchrun's RANK=3 is set, and they read back at shutdown."""
        program = textwrap.dedent(
            """
            import brickscope as bs
            bs.configure(clock="host")
            with bs.step(0):
                for i in range(3):
                    with bs.brick("gemm", category="ffn"):
                        pass
            bs.shutdown()
            """
        )
        environ = {
            **os.environ,
            "OTEL_TRACES_EXPORTER": "parquet",
            "OTEL_METRICS_EXPORTER": "none",
            env.BRICKSCOPE_PARQUET_PATH: str(tmp_path / "job" / "rank-{rank}"),
            env.BRICKSCOPE_PARQUET_RUN: "job1",
            "RANK": "3",
            "LOCAL_RANK": "3",
            "WORLD_SIZE": "4",
        }
        result = subprocess.run(
            [sys.executable, "-c", program], env=environ, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr
        (part,) = parquet_files(tmp_path / "job")
        assert os.path.dirname(part) == str(tmp_path / "job" / "rank-3")
        table = pq.read_table(part)
        rows = zip(table.column("name").to_pylist(), table.column("kind").to_pylist())
        assert sorted(row for row in rows if row[1] != "overhead") == [("gemm", "brick")] * 3 + [("step", "step")]
        assert set(table.column("rank").to_pylist()) == {"3"} and set(table.column("run").to_pylist()) == {"job1"}
