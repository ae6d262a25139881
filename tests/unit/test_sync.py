# SPDX-License-Identifier: Apache-2.0
"""Sync policies, flush, shutdown, interpreter exit, overflow and fork: nothing pending is lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import brickscope as bs

#: How the forked-child scripts below start: a session exporting to memory.
SESSION_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, threading, time
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import brickscope as bs

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    bs.configure(provider, clock="host", max_delay_millis=60_000)
    """
)


@pytest.fixture(name="pipeline")
def _pipeline():
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def names(exporter):
    return [s.name for s in exporter.get_finished_spans()]


class TestSyncPoints:
    def test_deferred_holds_spans_until_a_sync_point(self, pipeline):
        """Deferred mode emits nothing while bricks run and everything at sync()."""
        provider, exporter = pipeline
        bs.configure(provider, clock="host", max_delay_millis=60_000)
        with bs.layer(0):
            with bs.brick("rms_norm"):
                pass
            with bs.brick("ffn_up"):
                pass
            assert names(exporter) == []
        assert names(exporter) == []
        assert bs.sync() is True
        assert names(exporter) == ["rms_norm", "ffn_up", "layer"]

    def test_step_end_is_a_sync_point_in_deferred_mode(self, pipeline):
        """Closing a step resolves the step and everything in it."""
        provider, exporter = pipeline
        bs.configure(provider, clock="host", max_delay_millis=60_000)
        with bs.step(0):
            with bs.brick("rms_norm"):
                pass
            assert names(exporter) == []
        assert names(exporter) == ["rms_norm", "step"]

    def test_per_layer_resolves_at_layer_end(self, pipeline):
        """per_layer: bricks wait for their layer to close, then come out together."""
        provider, exporter = pipeline
        bs.configure(provider, clock="host", sync_mode="per_layer", max_delay_millis=60_000)
        with bs.step(0):
            with bs.layer(0):
                with bs.brick("rms_norm"):
                    pass
                assert names(exporter) == []
            assert names(exporter) == ["rms_norm", "layer"]

    def test_immediate_resolves_at_each_brick(self, pipeline):
        """immediate: each brick's span is out as soon as the brick closes."""
        provider, exporter = pipeline
        bs.configure(provider, clock="host", sync_mode="immediate", max_delay_millis=60_000)
        with bs.layer(0):
            with bs.brick("rms_norm"):
                with bs.kernel("k"):
                    pass
                assert names(exporter) == []
            assert names(exporter) == ["k", "rms_norm"]

    def test_deferred_polls_after_max_delay(self, pipeline):
        """Without sync points, ended scopes older than max_delay_millis come out at a later scope end."""
        provider, exporter = pipeline
        session = bs.configure(provider, clock="host", max_delay_millis=1)
        with bs.brick("rms_norm"):
            pass
        import time

        time.sleep(0.005)
        with bs.brick("ffn_up"):
            pass
        assert names(exporter) == ["rms_norm", "ffn_up"]
        assert session.stats()["polls"] >= 1


class TestNothingLost:
    def test_force_flush_delivers_pending_spans(self, pipeline):
        """provider.force_flush() resolves pending scopes before exporters flush."""
        provider, exporter = pipeline
        bs.configure(provider, clock="host", max_delay_millis=60_000)
        with bs.layer(0), bs.brick("rms_norm"):
            pass
        assert provider.force_flush() is True
        assert names(exporter) == ["rms_norm", "layer"]

    def test_shutdown_delivers_pending_spans(self, pipeline):
        """Shutting the provider down emits pending scopes before the exporters close."""
        provider, exporter = pipeline
        bs.configure(provider, clock="host", max_delay_millis=60_000)
        with bs.layer(0), bs.brick("rms_norm"):
            pass
        provider.shutdown()
        assert names(exporter) == ["rms_norm", "layer"]

    def test_interpreter_exit_delivers_pending_spans(self, tmp_path):
        """A process that exits with scopes pending still exports them (atexit)."""
        out = tmp_path / "spans.json"
        script = textwrap.dedent(
            f"""
            import json
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
            import brickscope as bs

            class FileExporter(SpanExporter):
                def export(self, spans):
                    with open({str(out)!r}, "a") as f:
                        for s in spans:
                            f.write(json.dumps(s.name) + "\\n")
                    return SpanExportResult.SUCCESS

            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
            bs.configure(provider, clock="host", max_delay_millis=60_000)
            with bs.layer(0):
                with bs.brick("rms_norm"):
                    pass
            # no sync, no flush, no shutdown: the interpreter just exits
            """
        )
        subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
        assert [json.loads(line) for line in out.read_text().splitlines()] == ["rms_norm", "layer"]

    def test_overflow_forces_a_sync_and_counts_it(self, pipeline):
        """When max_pending ended scopes wait, the next close forces a sync: all spans arrive, counted."""
        provider, exporter = pipeline
        session = bs.configure(provider, clock="host", max_pending=10, max_delay_millis=60_000)
        with bs.layer(0):
            for _ in range(25):
                with bs.brick("rms_norm"):
                    pass
            assert len(exporter.get_finished_spans()) == 20
        assert session.stats()["forced_syncs"] == 2
        session.sync()
        assert len(exporter.get_finished_spans()) == 26

    @pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
    def test_forked_child_does_not_inherit_pending_scopes(self, tmp_path):
        """A child forked with scopes pending emits only its own scopes."""
        out = tmp_path / "child.json"
        script = SESSION_SCRIPT + textwrap.dedent(
            f"""
            with bs.brick("parent_brick"):
                pass
            pid = os.fork()
            if pid == 0:
                with bs.brick("child_brick"):
                    pass
                bs.sync()
                with open({str(out)!r}, "w") as f:
                    json.dump([s.name for s in exporter.get_finished_spans()], f)
                os._exit(0)
            os.waitpid(pid, 0)
            """
        )
        subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
        assert json.loads(out.read_text()) == ["child_brick"]

    @pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
    def test_a_child_forked_while_a_thread_held_the_span_id_lock_still_gets_ids(self, tmp_path):
        """Span ids are drawn under a lock; a thread of the parent holding it at the fork does
        not exist in the child, so the child gets the lock free (it would wait forever for
        its first span id). The parent script gives the child 30 s, then kills it."""
        out = tmp_path / "child.json"
        script = SESSION_SCRIPT + textwrap.dedent(
            f"""
            from brickscope import _otel_context

            held, release = threading.Event(), threading.Event()

            def hold():
                with _otel_context._id_lock:
                    held.set()
                    release.wait()

            threading.Thread(target=hold, daemon=True).start()
            held.wait()
            pid = os.fork()
            if pid == 0:
                with bs.step(0):
                    with bs.brick("child_brick"):
                        pass
                bs.sync()
                spans = exporter.get_finished_spans()
                with open({str(out)!r}, "w") as f:
                    json.dump([[s.name, s.context.span_id != 0] for s in spans], f)
                os._exit(0)
            release.set()
            for _ in range(300):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    sys.exit(0)
                time.sleep(0.1)
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            sys.exit("the child hung")
            """
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stderr
        assert json.loads(out.read_text()) == [["child_brick", True], ["step", True]]


class TestPacing:
    def test_a_burst_larger_than_the_batch_queue_is_not_dropped(self, monkeypatch):
        """A sync point releasing 3000 spans into a BatchSpanProcessor with a 256-span queue loses none.

        The pacing budget (0.5 s of waiting per sync point) is raised to a hang guard, so the
        outcome does not depend on how fast a loaded machine schedules the export thread.
        """
        import time as _time

        from brickscope.sdk.trace import _resolution

        monkeypatch.setattr(_resolution, "_PACE_BUDGET_S", 60.0)

        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

        class SlowExporter(SpanExporter):
            def __init__(self):
                self.count = 0

            def export(self, spans):
                _time.sleep(0.001)
                self.count += len(spans)
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        exporter = SlowExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=256, max_export_batch_size=64))
        session = bs.configure(provider, clock="host", max_delay_millis=60_000)
        with bs.layer(0):
            for _ in range(2999):
                with bs.brick("rms_norm"):
                    pass
        assert session.sync() is True
        provider.force_flush()
        assert exporter.count == 3000
        assert session.stats()["pacing_waits"] > 0
        provider.shutdown()


class TestAfterShutdown:
    def test_scope_closing_after_reconfigure_is_still_delivered(self, pipeline):
        """A brick open while brickscope is reconfigured is emitted when it closes, and counted."""
        provider, exporter = pipeline
        first = bs.configure(provider, clock="host", max_delay_millis=60_000)
        with bs.brick("all_reduce"):
            bs.configure(provider, clock="host", max_delay_millis=60_000)
        assert names(exporter) == ["all_reduce"]
        assert first.stats()["closed_after_shutdown"] == 1
