# SPDX-License-Identifier: Apache-2.0
"""PerfettoSpanExporter: streaming, crash safety, paths, errors, the OTel entry point."""

from __future__ import annotations

import errno
import logging
import os
from importlib.metadata import entry_points

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from pftrace_testlib import T0, THREAD, decode_trace, expected_slices, gpu_attributes, make_span

from brickscope.exporter.perfetto import BRICKSCOPE_PERFETTO_PATH, PerfettoSpanExporter


def _batches():
    """Five batches of a step: GPU kernels, bricks, then their parents, in export order."""
    out = []
    for layer in range(5):
        base = T0 + layer * 10_000
        kernel = make_span(
            100 + layer, "gemm", base + 3000, base + 6000, 200 + layer, attributes=gpu_attributes(base + 200, 50, 3000)
        )
        brick = make_span(200 + layer, "ffn", base + 100, base + 900, 300 + layer, attributes=dict(THREAD))
        layer_span = make_span(300 + layer, "layer", base, base + 9000, attributes=dict(THREAD))
        out.append([kernel, brick, layer_span])
    return out


class _FailingFile:
    """A file whose writes fail with ENOSPC after ``budget`` more bytes (a disk filling up)."""

    def __init__(self, real, budget):
        self._real = real
        self.budget = budget

    def write(self, data):
        if len(data) > self.budget:
            if self.budget == 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            written = self._real.write(data[: self.budget])  # a short write, like the OS does
            self.budget = 0
            return written
        self.budget -= len(data)
        return self._real.write(data)

    def __getattr__(self, name):
        return getattr(self._real, name)


class TestStreaming:
    def test_file_valid_after_every_export(self, tmp_path):
        """After each export the file decodes cleanly and holds exactly the spans so far."""
        path = tmp_path / "t.pftrace"
        seen = []
        with PerfettoSpanExporter(path) as exporter:
            for batch in _batches():
                exporter.export(batch)
                seen.extend(batch)
                decoded = decode_trace(path)
                assert decoded.errors == []
                assert sorted((s.name, s.ts, s.dur) for s in decoded.slices) == expected_slices(seen)

    def test_file_cut_at_any_export_boundary_is_a_valid_prefix(self, tmp_path):
        """Cutting the file where any export ended (a crash) leaves a valid trace of the batches before."""
        path = tmp_path / "t.pftrace"
        sizes, seen = [], []
        with PerfettoSpanExporter(path) as exporter:
            sizes.append(os.path.getsize(path))
            for batch in _batches():
                exporter.export(batch)
                sizes.append(os.path.getsize(path))
        data = path.read_bytes()
        batches = _batches()
        for index, size in enumerate(sizes):
            decoded = decode_trace(None, data=data[:size])
            assert decoded.errors == [], index
            seen = [s for b in batches[:index] for s in b]
            assert sorted((s.name, s.ts, s.dur) for s in decoded.slices) == expected_slices(seen)

    def test_with_the_sdk_pipeline(self, tmp_path):
        """Spans ended through an SDK TracerProvider land in the file."""
        path = tmp_path / "t.pftrace"
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(PerfettoSpanExporter(path)))
        tracer = provider.get_tracer("app")
        with tracer.start_as_current_span("outer"):
            with tracer.start_as_current_span("inner"):
                pass
        provider.shutdown()
        decoded = decode_trace(path)
        assert decoded.errors == []
        assert sorted(s.name for s in decoded.slices) == ["inner", "outer"]

    def test_export_after_shutdown_fails(self, tmp_path):
        """Export after shutdown returns FAILURE; shutdown twice is harmless."""
        exporter = PerfettoSpanExporter(tmp_path / "t.pftrace")
        exporter.shutdown()
        exporter.shutdown()
        assert exporter.export(_batches()[0]) is SpanExportResult.FAILURE
        assert exporter.force_flush() is False


class TestPaths:
    def test_existing_file_is_not_overwritten(self, tmp_path):
        """An existing file is a clear error at construction, and left untouched."""
        path = tmp_path / "t.pftrace"
        path.write_bytes(b"keep")
        with pytest.raises(ValueError, match="already exists"):
            PerfettoSpanExporter(path)
        assert path.read_bytes() == b"keep"

    def test_overwrite_when_asked(self, tmp_path):
        """overwrite=True replaces an existing file."""
        path = tmp_path / "t.pftrace"
        path.write_bytes(b"old")
        with PerfettoSpanExporter(path, overwrite=True) as exporter:
            exporter.export(_batches()[0])
        assert decode_trace(path).errors == []

    def test_unwritable_path_raises_at_construction(self, tmp_path):
        """A path in a missing directory raises ValueError naming the path."""
        with pytest.raises(ValueError, match="cannot create"):
            PerfettoSpanExporter(tmp_path / "missing" / "t.pftrace")

    def test_device_node_is_never_replaced(self):
        """A device node (here /dev/full) is refused even with overwrite: only regular files are replaced."""
        if not os.path.exists("/dev/full"):
            pytest.skip("no /dev/full on this system")
        with pytest.raises(ValueError, match="/dev/full: is not a regular file"):
            PerfettoSpanExporter("/dev/full", overwrite=True)

    def test_symlink_is_not_followed(self, tmp_path):
        """With overwrite, a symbolic link to another file is refused; the target keeps its content."""
        victim = tmp_path / "victim.txt"
        victim.write_text("keep\n")
        (tmp_path / "t.pftrace").symlink_to(victim)
        with pytest.raises(ValueError, match="symbolic link"):
            PerfettoSpanExporter(tmp_path / "t.pftrace", overwrite=True)
        assert victim.read_text() == "keep\n"

    def test_default_path_in_cwd_with_pid(self, tmp_path, monkeypatch):
        """Without a path or variable, the file is brickscope-<pid>.pftrace in the working directory."""
        monkeypatch.chdir(tmp_path)
        monkeypatch.delenv(BRICKSCOPE_PERFETTO_PATH, raising=False)
        with PerfettoSpanExporter() as exporter:
            pass
        assert exporter.path == f"brickscope-{os.getpid()}.pftrace"

    def test_default_path_never_overwrites(self, tmp_path, monkeypatch):
        """If the default file exists, a numbered name is used instead."""
        monkeypatch.chdir(tmp_path)
        monkeypatch.delenv(BRICKSCOPE_PERFETTO_PATH, raising=False)
        (tmp_path / f"brickscope-{os.getpid()}.pftrace").write_bytes(b"keep")
        with PerfettoSpanExporter() as exporter:
            pass
        assert exporter.path == f"brickscope-{os.getpid()}-1.pftrace"

    def test_path_from_environment(self, tmp_path, monkeypatch):
        """BRICKSCOPE_PERFETTO_PATH sets the path, with {pid} replaced."""
        monkeypatch.setenv(BRICKSCOPE_PERFETTO_PATH, str(tmp_path / "rank-{pid}.pftrace"))
        with PerfettoSpanExporter() as exporter:
            pass
        assert exporter.path == str(tmp_path / f"rank-{os.getpid()}.pftrace")

    def test_entry_point(self, tmp_path, monkeypatch):
        """OTEL_TRACES_EXPORTER=perfetto finds the exporter through its entry point."""
        (entry_point,) = entry_points(group="opentelemetry_traces_exporter", name="perfetto")
        monkeypatch.setenv(BRICKSCOPE_PERFETTO_PATH, str(tmp_path / "ep.pftrace"))
        exporter = entry_point.load()()
        exporter.shutdown()
        assert isinstance(exporter, PerfettoSpanExporter) and os.path.exists(tmp_path / "ep.pftrace")


class TestFailures:
    def test_disk_full_during_export(self, tmp_path, caplog):
        """A full disk fails the export with one logged reason and cuts the partial batch off."""
        path = tmp_path / "t.pftrace"
        batches = _batches()
        exporter = PerfettoSpanExporter(path)
        exporter.export(batches[0])
        exporter._file = _FailingFile(exporter._file, budget=40)
        with caplog.at_level(logging.ERROR):
            assert exporter.export(batches[1]) is SpanExportResult.FAILURE
            assert exporter.export(batches[2]) is SpanExportResult.FAILURE
        assert len(caplog.records) == 1 and "No space left" in caplog.records[0].getMessage()
        decoded = decode_trace(path)
        assert decoded.errors == []
        assert sorted((s.name, s.ts, s.dur) for s in decoded.slices) == expected_slices(batches[0])
        assert exporter.failed_exports == 2
        exporter.shutdown()

    def test_recovers_when_space_returns(self, tmp_path, caplog):
        """After a failed write, later batches still decode (state resynchronised)."""
        path = tmp_path / "t.pftrace"
        batches = _batches()
        exporter = PerfettoSpanExporter(path)
        exporter.export(batches[0])
        failing = _FailingFile(exporter._file, budget=40)
        exporter._file = failing
        with caplog.at_level(logging.ERROR):
            exporter.export(batches[1])
        failing.budget = 1 << 30
        assert exporter.export(batches[2]) is SpanExportResult.SUCCESS
        assert exporter.export(batches[3]) is SpanExportResult.SUCCESS
        exporter.shutdown()
        decoded = decode_trace(path)
        assert decoded.errors == []
        expected = expected_slices(batches[0] + batches[2] + batches[3])
        assert sorted((s.name, s.ts, s.dur) for s in decoded.slices) == expected

    def test_bad_span_does_not_raise(self, tmp_path, caplog):
        """A span the encoder chokes on yields FAILURE and a log line, not an exception."""
        exporter = PerfettoSpanExporter(tmp_path / "t.pftrace")
        with caplog.at_level(logging.ERROR):
            assert exporter.export([object()]) is SpanExportResult.FAILURE
        assert len(caplog.records) == 1
        assert exporter.export(_batches()[0]) is SpanExportResult.SUCCESS
        exporter.shutdown()
        assert decode_trace(exporter.path).errors == []

    def test_forked_child_does_not_write(self, tmp_path, monkeypatch, caplog):
        """In a forked child the exporter refuses to write, so the parent's file stays valid."""
        path = tmp_path / "t.pftrace"
        exporter = PerfettoSpanExporter(path)
        size = path.stat().st_size
        monkeypatch.setattr(os, "getpid", lambda: -1)
        with caplog.at_level(logging.ERROR):
            assert exporter.export(_batches()[0]) is SpanExportResult.FAILURE
        assert path.stat().st_size == size and "one exporter per process" in caplog.text
        monkeypatch.undo()
        exporter.shutdown()

    def test_span_without_start_is_skipped_and_said(self, tmp_path, caplog):
        """A span with no start time is left out, with one warning, and the rest is written."""
        path = tmp_path / "t.pftrace"
        broken = make_span(9, "broken", T0, T0 + 1)
        broken._start_time = None
        with caplog.at_level(logging.WARNING), PerfettoSpanExporter(path) as exporter:
            assert exporter.export([broken, *_batches()[0]]) is SpanExportResult.SUCCESS
            exporter.export([broken])
            assert exporter.skipped_spans == 2
        assert len(caplog.records) == 1 and "without a start or end time" in caplog.text
        assert sorted((s.name, s.ts, s.dur) for s in decode_trace(path).slices) == expected_slices(_batches()[0])

    def test_invalid_budget_rejected(self, tmp_path):
        """A non-positive max_tracked_slices is a ValueError at construction."""
        with pytest.raises(ValueError, match="max_tracked_slices"):
            PerfettoSpanExporter(tmp_path / "t.pftrace", max_tracked_slices=0)


class TestScopeData:
    def test_data_added_inside_a_brick_round_trips_through_a_pftrace(self, tmp_path):
        """bs.event and the OTel span API inside a brick: instants in the file, back on the brick when read."""
        from opentelemetry import trace

        import brickscope as bs
        from brickscope.offline import open_spans
        from brickscope.testing import capture_spans

        path = tmp_path / "t.pftrace"
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(PerfettoSpanExporter(path)))
        with capture_spans(provider):
            with bs.step(0), bs.brick("sampling"):
                trace.get_current_span().set_attribute("sampler", "top_p")
                bs.event("eos", token=2)
                trace.get_current_span().add_event("cache.lookup", {"hit": True})
        decoded = decode_trace(path)
        brick_slice = next(s for s in decoded.slices if s.name == "sampling")
        assert [(i.name, i.track) for i in decoded.instants] == [
            ("eos", brick_slice.track), ("cache.lookup", brick_slice.track)
        ]
        with open_spans(path) as spans:
            brick = next(s for s in spans if s.name == "sampling")
        assert brick.attributes["sampler"] == "top_p"
        assert [(e.name, dict(e.attributes)) for e in brick.events] == [("eos", {"token": 2}), ("cache.lookup", {"hit": True})]

    def test_record_gpu_is_drawn_on_the_gpu_tracks_like_a_cuda_brick(self, tmp_path, monkeypatch):
        """bs.record_gpu: a slice on device 1's stream 7 track at the given times, a flow from its call site."""
        import brickscope as bs
        from brickscope._clock import EPOCH_OFFSET_NS
        from brickscope.sdk.trace import _recorder
        from brickscope.testing import capture_spans

        # The recorder's clock driven by hand (1 µs a read), so that the GPU work runs after
        # the call recorded it (a queued submit) however the machine schedules this test.
        now = [10**12]

        def driven() -> int:
            now[0] += 1_000
            return now[0]

        monkeypatch.setattr(_recorder, "perf_counter_ns", driven)
        path = tmp_path / "t.pftrace"
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(PerfettoSpanExporter(path)))
        with capture_spans(provider):
            with bs.step(0), bs.brick("frame"):
                start = now[0] + EPOCH_OFFSET_NS + 1_000_000  # 1 ms after the clock's last reading
                bs.record_gpu("vk_blit", start, start + 4_000, device=1, stream=7)
        decoded = decode_trace(path)
        gpu = [s for s in decoded.slices if s.name == "vk_blit" and decoded.track_kind(s.track) == "gpu"]
        launch = [s for s in decoded.slices if s.name == "vk_blit" and decoded.track_kind(s.track) == "thread"]
        assert len(gpu) == 1 and len(launch) == 1
        assert (gpu[0].ts, gpu[0].dur) == (start, 4_000)
        assert launch[0].flow_ids and launch[0].flow_ids == gpu[0].terminating_flow_ids
        assert "7" in decoded.descriptors[gpu[0].track].name and not decoded.errors
