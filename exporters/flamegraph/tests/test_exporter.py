# SPDX-License-Identifier: Apache-2.0
"""Tests for FlamegraphSpanExporter: configuration, error policy, files on disk, the SDK."""

from __future__ import annotations

import json
import logging
import os
import time
from importlib.metadata import entry_points

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from brickscope.exporter.flamegraph import FlamegraphSpanExporter
from brickscope.trace import attributes as A

LOGGER = "brickscope.exporter.flamegraph._exporter"


def _lines(path) -> dict[str, int]:
    with open(path, encoding="utf-8") as file:
        text = file.read()
    return {
        stack: int(weight) for stack, weight in (line.rsplit(" ", 1) for line in text.splitlines())
    }


class TestConstruction:
    def test_missing_directory_is_refused(self, tmp_path):
        """A path in a directory that does not exist fails at construction."""
        with pytest.raises(ValueError, match="does not exist"):
            FlamegraphSpanExporter(tmp_path / "nope" / "out.folded")

    def test_directory_path_is_refused(self, tmp_path):
        """A path that is a directory fails at construction."""
        with pytest.raises(ValueError, match="is a directory"):
            FlamegraphSpanExporter(tmp_path)

    def test_existing_file_is_not_overwritten_silently(self, tmp_path):
        """An existing output is refused unless overwrite is asked for."""
        path = tmp_path / "out.folded"
        path.write_text("precious\n")
        with pytest.raises(ValueError, match="already exists.*overwrite=True"):
            FlamegraphSpanExporter(path)
        FlamegraphSpanExporter(path, overwrite=True).shutdown()
        assert path.read_text() == ""

    @pytest.mark.skipif(os.geteuid() == 0, reason="root can write to read-only directories")
    def test_read_only_directory_is_refused(self, tmp_path):
        """A directory without write permission fails at construction."""
        tmp_path.chmod(0o500)
        try:
            with pytest.raises(ValueError, match="not writable"):
                FlamegraphSpanExporter(tmp_path / "out.folded")
        finally:
            tmp_path.chmod(0o700)

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"unit": "ms"}, "unit must be"),
            ({"weight": " "}, "weight must be"),
            ({"write_interval_millis": -1}, "write_interval_millis"),
        ],
    )
    def test_bad_options_are_refused(self, tmp_path, kwargs, message):
        """Unknown units, empty weights and negative intervals fail at construction."""
        with pytest.raises(ValueError, match=message):
            FlamegraphSpanExporter(tmp_path / "out.folded", **kwargs)

    def test_same_path_twice_is_refused(self, tmp_path):
        """The folded and speedscope outputs must be different files."""
        with pytest.raises(ValueError, match="same file"):
            FlamegraphSpanExporter(tmp_path / "x", speedscope_path=tmp_path / "x")

    def test_environment_fills_unset_arguments(self, tmp_path, monkeypatch, make_span):
        """BRICKSCOPE_FLAMEGRAPH_* configure an exporter built without arguments."""
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("BRICKSCOPE_FLAMEGRAPH_PATH", "env.folded")
        monkeypatch.setenv("BRICKSCOPE_FLAMEGRAPH_SPEEDSCOPE_PATH", "env.json")
        monkeypatch.setenv("BRICKSCOPE_FLAMEGRAPH_WEIGHT", "host")
        monkeypatch.setenv("BRICKSCOPE_FLAMEGRAPH_UNIT", "ns")
        exporter = FlamegraphSpanExporter()
        exporter.export([make_span("x", host=(0, 1234))])
        exporter.shutdown()
        assert _lines(tmp_path / "env.folded") == {"svc;x": 1234}
        assert json.loads((tmp_path / "env.json").read_text())["profiles"][0]["weights"] == [1234]

    def test_default_path_is_in_the_working_directory(self, tmp_path, monkeypatch):
        """Without a path or variable the output is ./brickscope-<pid>.folded, numbered if taken."""
        monkeypatch.chdir(tmp_path)
        monkeypatch.delenv("BRICKSCOPE_FLAMEGRAPH_PATH", raising=False)
        monkeypatch.delenv("BRICKSCOPE_FLAMEGRAPH_OVERWRITE", raising=False)
        first = FlamegraphSpanExporter()
        assert first.path == str(tmp_path / f"brickscope-{os.getpid()}.folded")
        first.shutdown()  # writes it: the next default takes the next free name
        assert FlamegraphSpanExporter().path == str(tmp_path / f"brickscope-{os.getpid()}-1.folded")

    def test_pid_in_a_path_is_expanded(self, tmp_path):
        exporter = FlamegraphSpanExporter(tmp_path / "run-{pid}.folded", speedscope_path=tmp_path / "run-{pid}.json")
        assert (exporter.path, exporter.speedscope_path) == (
            str(tmp_path / f"run-{os.getpid()}.folded"),
            str(tmp_path / f"run-{os.getpid()}.json"),
        )

    @pytest.mark.parametrize("kind", ["symlink", "fifo"])
    def test_only_regular_files_are_replaced(self, tmp_path, kind):
        """With overwrite, a symbolic link (its target would be clobbered) or a pipe is still refused."""
        target = tmp_path / "victim.txt"
        target.write_text("keep\n")
        path = tmp_path / "out.folded"
        if kind == "symlink":
            path.symlink_to(target)
        else:
            os.mkfifo(path)
        with pytest.raises(ValueError, match="symbolic link" if kind == "symlink" else "not a regular file"):
            FlamegraphSpanExporter(path, overwrite=True)
        assert target.read_text() == "keep\n"

    def test_otel_entry_point_names_the_exporter(self):
        """OTEL_TRACES_EXPORTER=flamegraph finds this class through its entry point."""
        (entry_point,) = entry_points(group="opentelemetry_traces_exporter", name="flamegraph")
        assert entry_point.load() is FlamegraphSpanExporter


class TestExport:
    def test_files_are_written_on_shutdown(self, tmp_path, make_span):
        """Shutdown writes the aggregate of every batch, in microseconds by default."""
        path = tmp_path / "out.folded"
        exporter = FlamegraphSpanExporter(path, write_interval_millis=None)
        brick = make_span("b", gpu=(0, 5_000))
        assert (
            exporter.export([make_span("k", brick, gpu=(1_000, 3_000))]) is SpanExportResult.SUCCESS
        )
        assert not path.exists()
        exporter.export([brick])
        exporter.shutdown()
        assert _lines(path) == {"svc;b": 3, "svc;b;k": 2}

    def test_force_flush_writes_a_valid_file_mid_run(self, tmp_path, make_span):
        """force_flush rewrites the file with what is known so far; later spans update it."""
        path = tmp_path / "out.folded"
        exporter = FlamegraphSpanExporter(path, unit="ns")
        brick = make_span("b", gpu=(0, 100))
        exporter.export([make_span("k", brick, gpu=(0, 40))])
        assert exporter.force_flush() is True
        assert _lines(path) == {"svc;k": 40}  # parent not here yet: placed at the root
        exporter.export([brick])
        exporter.shutdown()
        assert _lines(path) == {"svc;b": 60, "svc;b;k": 40}
        assert os.listdir(tmp_path) == ["out.folded"]  # no temporary file left behind

    def test_bytes_written_sums_every_write_of_both_files(self, tmp_path, make_span):
        """brickscope's self-telemetry reads it: a flush and the shutdown each write both files."""
        path, speedscope = tmp_path / "out.folded", tmp_path / "out.speedscope.json"
        exporter = FlamegraphSpanExporter(path, unit="ns", speedscope_path=speedscope, write_interval_millis=None)
        assert exporter.bytes_written == 0
        exporter.export([make_span("x", gpu=(0, 7))])
        exporter.force_flush()
        first = path.stat().st_size + speedscope.stat().st_size
        assert exporter.bytes_written == first
        exporter.export([make_span("y", gpu=(0, 9))])
        exporter.shutdown()
        assert exporter.bytes_written == first + path.stat().st_size + speedscope.stat().st_size

    def test_periodic_write_while_exporting(self, tmp_path, make_span):
        """With a write interval, export() keeps the file current without a flush."""
        path = tmp_path / "out.folded"
        exporter = FlamegraphSpanExporter(path, unit="ns", write_interval_millis=0)
        exporter.export([make_span("x", gpu=(0, 7))])
        assert _lines(path) == {"svc;x": 7}

    def test_export_after_shutdown_fails_with_one_log_line(self, tmp_path, make_span, caplog):
        """After shutdown, export returns FAILURE and warns once, however often it is called."""
        exporter = FlamegraphSpanExporter(tmp_path / "out.folded")
        exporter.shutdown()
        exporter.shutdown()
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            results = [exporter.export([make_span("x", gpu=(0, 1))]) for _ in range(3)]
        assert results == [SpanExportResult.FAILURE] * 3
        assert len([r for r in caplog.records if "after shutdown" in r.message]) == 1
        assert exporter.force_flush() is False

    def test_broken_span_fails_the_batch_but_not_the_rest(self, tmp_path, make_span, caplog):
        """A span that breaks the SDK types gives FAILURE and one log line; others still count."""

        class Exploding(ReadableSpan):
            @property
            def attributes(self):
                raise RuntimeError("broken attributes")

        template = make_span("bad", gpu=(0, 1))
        broken = Exploding(name="bad", context=template.context, resource=template.resource)
        path = tmp_path / "out.folded"
        exporter = FlamegraphSpanExporter(path, unit="ns")
        with caplog.at_level(logging.ERROR, logger=LOGGER):
            first = exporter.export([broken, make_span("ok", gpu=(0, 5))])
            second = exporter.export([broken])
        assert (first, second) == (SpanExportResult.FAILURE, SpanExportResult.FAILURE)
        assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
        exporter.shutdown()
        assert _lines(path) == {"svc;ok": 5}

    def test_write_failure_is_reported_not_raised(self, tmp_path, make_span, caplog):
        """A directory removed mid-run makes flush return False and logs once; nothing raises."""
        directory = tmp_path / "gone"
        directory.mkdir()
        exporter = FlamegraphSpanExporter(directory / "out.folded", write_interval_millis=0)
        directory.rmdir()
        with caplog.at_level(logging.ERROR, logger=LOGGER):
            assert exporter.export([make_span("x", gpu=(0, 1))]) is SpanExportResult.FAILURE
            assert exporter.force_flush() is False
            exporter.shutdown()
        assert len([r for r in caplog.records if "cannot write" in r.message]) == 1

    def test_empty_gpu_flamegraph_warns_at_shutdown(self, tmp_path, make_span, caplog):
        """If no span carried GPU time with weight='gpu' asked for, shutdown says so and
        suggests host weighting."""
        exporter = FlamegraphSpanExporter(tmp_path / "out.folded", weight="gpu")
        exporter.export([make_span("host_only", host=(0, 10))])
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            exporter.shutdown()
        assert any("weight='host'" in r.message for r in caplog.records)

    def test_default_weight_follows_a_host_clock_session(self, tmp_path, make_span, monkeypatch):
        """No weight given (OTEL_TRACES_EXPORTER=flamegraph on a machine without a GPU): the
        spans say they were timed on the host clock, so they are weighted by host time
        instead of giving an empty file."""
        monkeypatch.delenv("BRICKSCOPE_FLAMEGRAPH_WEIGHT", raising=False)
        path = tmp_path / "out.folded"
        exporter = FlamegraphSpanExporter(path, unit="ns")
        exporter.export([make_span("host_only", host=(0, 10))])
        exporter.shutdown()
        assert _lines(path) == {"svc;host_only": 10}

    def test_default_weight_stays_gpu_when_spans_are_gpu_timed(self, tmp_path, make_span, monkeypatch):
        monkeypatch.delenv("BRICKSCOPE_FLAMEGRAPH_WEIGHT", raising=False)
        path = tmp_path / "out.folded"
        exporter = FlamegraphSpanExporter(path, unit="ns")
        exporter.export([make_span("kernel_host", host=(0, 50)), make_span("brick", gpu=(0, 7))])
        exporter.shutdown()
        assert _lines(path) == {"svc;brick": 7}

    def test_default_weight_stays_gpu_for_gpu_work_timed_elsewhere(self, tmp_path, make_span, monkeypatch):
        """bs.record_gpu spans (clock "gpu") are GPU work too: the default weight stays GPU time."""
        from brickscope.trace import attributes as A

        monkeypatch.delenv("BRICKSCOPE_FLAMEGRAPH_WEIGHT", raising=False)
        path = tmp_path / "out.folded"
        exporter = FlamegraphSpanExporter(path, unit="ns")
        exporter.export([make_span("vk_blit", gpu=(0, 9), attributes={A.CLOCK: A.CLOCK_GPU})])
        exporter.shutdown()
        assert _lines(path) == {"svc;vk_blit": 9}

    def test_context_manager_shuts_down(self, tmp_path, make_span):
        """Leaving a with block writes the files."""
        path = tmp_path / "out.folded"
        with FlamegraphSpanExporter(path, unit="ns") as exporter:
            exporter.export([make_span("x", gpu=(0, 3))])
        assert _lines(path) == {"svc;x": 3}


class TestWithTheSdk:
    def test_brickscope_scopes_through_batch_processor(self, tmp_path):
        """Real scopes through a BatchSpanProcessor: host weights under the steps sum to the
        steps' time; brickscope's own sync points (``overhead`` spans, whether any is made
        depends on what a sync resolved) are stacks of their own beside them, never inside."""
        import brickscope as bs

        path = tmp_path / "run.folded"
        flamegraph = FlamegraphSpanExporter(path, "host", unit="ns")
        captured = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(flamegraph, max_export_batch_size=7))
        provider.add_span_processor(SimpleSpanProcessor(captured))
        bs.configure(provider, sync_mode="none")
        try:
            for step in range(3):
                with bs.step(step):
                    for index in range(2):
                        with bs.layer(index), bs.brick("rms_norm"), bs.kernel("rms_fwd"):
                            time.sleep(0.0002)
        finally:
            bs.shutdown()
            provider.shutdown()
        spans = captured.get_finished_spans()
        steps = [s for s in spans if s.attributes.get(A.SCOPE_KIND) == A.SCOPE_KIND_STEP]
        lines = _lines(path)
        own = [s for s in spans if s.attributes.get(A.SCOPE_KIND) == A.SCOPE_KIND_OVERHEAD]
        under_steps = {stack: w for stack, w in lines.items() if stack.split(";")[1] == "step"}
        beside = {stack: w for stack, w in lines.items() if stack not in under_steps}
        assert len(steps) == 3
        assert sum(under_steps.values()) == sum(s.attributes[A.HOST_DURATION_NS] for s in steps)
        service = next(iter(under_steps)).split(";")[0]
        assert set(beside) <= {f"{service};{s.name}" for s in own}
        assert sum(beside.values()) == sum(s.attributes[A.HOST_DURATION_NS] for s in own)
        kernels = [s for s in spans if s.name == "rms_fwd"]
        kernel_stack = next(s for s in lines if s.endswith(";rms_fwd"))
        assert lines[kernel_stack] == sum(s.attributes[A.HOST_DURATION_NS] for s in kernels)
