# SPDX-License-Identifier: Apache-2.0
"""Every span brickscope produces is counted exported or dropped; flush, shutdown and exit keep
their deadlines while an exporter is stuck. The exporters here are driven by the test (blocked
until released, failing on purpose), so no figure depends on timing; elapsed-time checks are
hang guards only, far above the deadlines."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult

import brickscope as bs
from brickscope import _catalog

HANG_GUARD_S = 20.0


def threads_start_at_exit() -> bool:
    """Whether this interpreter lets an exit handler start a thread (CPython 3.12.1 does not;
    the refusal is printed, not returned: exit handlers' exceptions are only reported)."""
    probe = "import atexit, threading; atexit.register(lambda: threading.Thread(target=int).start())"
    return b"RuntimeError" not in subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=60).stderr


class DrivenExporter(SpanExporter):
    """Blocks each export until ``release`` is set; fails the batches ``fail`` says."""

    def __init__(self, fail=lambda batch_number: False, blocked=True) -> None:
        self.release = threading.Event()
        if not blocked:
            self.release.set()
        self.exporting = threading.Event()
        self.fail = fail
        self.batches = 0
        self.delivered = []  # spans of the batches that succeeded
        self.failed = []  # spans of the batches that failed

    def export(self, spans):
        self.exporting.set()
        self.release.wait()
        self.batches += 1
        if self.fail(self.batches):
            self.failed.extend(spans)
            return SpanExportResult.FAILURE
        self.delivered.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self):
        self.release.set()


@pytest.fixture
def exporters():
    made = []
    yield made
    for exporter in made:  # never leave a worker thread blocked behind the test
        exporter.release.set()


def ours(spans):
    return [s for s in spans if s.instrumentation_scope.name == "brickscope"]


def books(stats):
    return stats["spans_produced"], stats["spans_exported"], stats["spans_dropped"]


class TestDeadlines:
    def test_force_flush_and_shutdown_return_by_their_deadline_and_count_what_was_lost(self, exporters):
        exporter = DrivenExporter()
        exporters.append(exporter)
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=4, schedule_delay_millis=60_000))
        session = bs.configure(provider, clock="host")
        for _ in range(10):
            with bs.brick("rms_norm"):
                pass
        session.sync()  # 10 spans queued: the 4th wakes the worker, which takes 4 and blocks
        assert exporter.exporting.wait(HANG_GUARD_S)

        started = time.monotonic()
        assert session.force_flush(timeout_millis=200) is False
        stats = session.stats()
        assert stats["export_timeouts"] == 1
        assert books(stats) == (10, 0, 0)  # a flush that times out drops nothing

        session.shutdown(timeout_millis=200)
        assert time.monotonic() - started < HANG_GUARD_S
        stats = session.stats()
        assert stats["export_timeouts"] == 2
        assert stats["dropped_at_shutdown"] == 10  # 4 in the stuck export + 6 still queued
        assert books(stats) == (10, 0, 10)

        exporter.release.set()  # the stuck export completes late: not counted a second time
        provider.shutdown()
        assert books(session.stats()) == (10, 0, 10)

    @pytest.mark.skipif(
        not threads_start_at_exit(),
        reason="this CPython refuses new threads at exit (3.12): the exit flush runs inline, without the deadline",
    )
    def test_interpreter_exit_keeps_its_deadline_with_a_collector_that_never_answers(self):
        """An OTLP/HTTP receiver that accepts the connection and never replies: exit takes
        brickscope's 5 s, not the exporter's 30 s timeout, and says how many spans it lost."""
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        script = textwrap.dedent(
            """
            import brickscope as bs
            bs.configure(clock="host")
            for _ in range(7):
                with bs.brick("rms_norm"):
                    pass
            """
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "BRICKSCOPE_"))}
        env["BRICKSCOPE_HOST_INTERVALS"] = "false"  # the scopes' own spans are counted
        env.update(
            OTEL_TRACES_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/protobuf",
            OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"http://127.0.0.1:{port}/v1/traces",
            OTEL_EXPORTER_OTLP_TIMEOUT="30",
            OTEL_METRICS_EXPORTER="none",
        )
        try:
            started = time.monotonic()
            result = subprocess.run(
                [sys.executable, "-c", script], capture_output=True, text=True, timeout=25, env=env
            )
            elapsed = time.monotonic() - started
        finally:
            listener.close()
        assert result.returncode == 0, result.stderr
        assert elapsed < 25  # hang guard: the exporter alone would hold exit for 30 s
        assert "7 spans were not exported within 5000 ms" in result.stderr


    def test_interpreter_exit_still_exports_where_no_thread_can_start(self):
        """CPython 3.12 refuses new threads once the interpreter exits, so the exit flush
        cannot run under a deadline thread: it runs inline, every span is exported, and no
        traceback. Emulated here: an exit handler registered after configure() (so it runs
        before brickscope's) makes starting a thread raise as 3.12 does."""
        script = textwrap.dedent(
            """
            import atexit, threading
            import brickscope as bs
            bs.configure(clock="host")
            for _ in range(7):
                with bs.brick("rms_norm"):
                    pass

            def refuse(self):
                raise RuntimeError("can't create new thread at interpreter shutdown")

            atexit.register(lambda: setattr(threading.Thread, "start", refuse))
            """
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "BRICKSCOPE_"))}
        env["BRICKSCOPE_HOST_INTERVALS"] = "false"  # the scopes' own spans are counted
        env.update(OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="none")
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
        assert result.stdout.count('"name": "rms_norm"') == 7


class TestEveryLossIsCounted:
    def test_under_load_produced_equals_exported_plus_dropped(self, exporters):
        """4 threads x 150 steps of a brick into a 64-span queue whose exporter is stuck at first
        (the queue overflows) and then fails every third batch: all 1200 spans are accounted."""
        exporter = DrivenExporter(fail=lambda number: number % 3 == 0)
        exporters.append(exporter)
        provider = TracerProvider()
        provider.add_span_processor(
            BatchSpanProcessor(exporter, max_queue_size=64, max_export_batch_size=16, schedule_delay_millis=10)
        )
        session = bs.configure(provider, clock="host", max_pending=32)

        def work():
            for number in range(150):
                with bs.step(number):
                    with bs.brick("rms_norm"):
                        pass

        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        exporter.release.set()
        session.shutdown(timeout_millis=10_000)
        stats = session.stats()
        produced, exported, dropped = books(stats)
        delivered, failed = len(ours(exporter.delivered)), len(ours(exporter.failed))
        assert produced == 4 * 150 * 2
        assert exported == delivered
        assert stats["dropped_export_failed"] == failed > 0
        assert stats["dropped_at_shutdown"] == 0  # the exporter was released: the deadline was met
        assert stats["dropped_queue_full"] == 1200 - delivered - failed > 0  # what never reached it
        assert produced == exported + dropped
        assert stats["spans_in_export"] == stats["spans_handed_over"] == 0

    def test_only_brickscope_spans_are_counted(self, exporters):
        exporter = DrivenExporter(blocked=False)
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        session = bs.configure(provider, clock="host")
        with provider.get_tracer("app").start_as_current_span("request"):
            with bs.brick("rms_norm"):
                pass
        session.shutdown()
        assert books(session.stats()) == (1, 1, 0)
        assert sorted(s.name for s in exporter.delivered) == ["request", "rms_norm"]

    @pytest.mark.parametrize("inject", ["build", "catalog"])
    def test_an_error_while_building_a_span_is_counted_and_the_rest_still_arrive(self, exporters, monkeypatch, inject):
        exporter = DrivenExporter(blocked=False)
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        session = bs.configure(provider, clock="host")
        builder = session.sync_processor._resolver._builder
        if inject == "build":  # the Python seam (the C loop, which builds without it, off)
            real_build = builder.build

            def build(rec):
                if rec.owner._name == "broken":
                    raise RuntimeError("injected")
                return real_build(rec)

            monkeypatch.setattr(builder, "build", build)
            monkeypatch.setattr(builder, "drain", None)
        else:  # a broken catalog entry: the C span maker and the Python builder both fail on it
            _catalog._resolved[("broken", None)] = object()  # reset_globals clears it
        for name in ("rms_norm", "broken", "ffn_up"):
            with bs.brick(name):
                pass
        session.shutdown()
        stats = session.stats()
        assert [s.name for s in exporter.delivered] == ["rms_norm", "ffn_up"]
        assert stats["span_build_errors"] == 1
        assert books(stats) == (3, 2, 1)


class TestSelfTelemetry:
    def test_the_stats_are_observable_counters_on_the_sessions_meter(self, exporters):
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        def collect(reader):
            points = {}
            for resource in reader.get_metrics_data().resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        if not metric.name.startswith(("brickscope.spans.", "brickscope.scope.", "brickscope.timeouts")):
                            continue
                        for point in metric.data.data_points:
                            reason = dict(point.attributes).get("brickscope.reason")
                            points[(metric.name, reason)] = point.value
            return points

        reader = InMemoryMetricReader()
        meter_provider = MeterProvider(metric_readers=[reader])
        exporter = DrivenExporter(fail=lambda number: number == 2, blocked=False)
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        session = bs.configure(provider, clock="host", meter_provider=meter_provider)
        step = bs.enter_scope(bs.step(0))
        layer = bs.enter_scope(bs.layer(0))
        bs.exit_scope(step)  # a repair
        bs.exit_scope(layer)
        session.shutdown()
        points = collect(reader)
        assert points[("brickscope.spans.produced", None)] == 2
        assert points[("brickscope.spans.exported", None)] == 1
        assert points[("brickscope.spans.dropped", "export_failed")] == 1
        assert points[("brickscope.scope.repairs", None)] == 1
        assert points[("brickscope.timeouts", "export")] == 0

        # A second session on the same meter provider adds to the totals: never back to 0.
        session = bs.configure(provider, clock="host", meter_provider=meter_provider)
        with bs.brick("rms_norm"):
            pass
        session.shutdown()
        points = collect(reader)
        assert points[("brickscope.spans.produced", None)] == 3
        assert points[("brickscope.spans.exported", None)] == 2
