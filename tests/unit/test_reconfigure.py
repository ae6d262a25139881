# SPDX-License-Identifier: Apache-2.0
"""configure() validates before it acts, reconfiguring replaces atomically, and misuse is said once."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import brickscope as bs
from brickscope import _state


def run_python(script: str, **env: str) -> subprocess.CompletedProcess:
    """A fresh interpreter (OTel's global providers can be set once per process)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "BRICKSCOPE_"))}
    environment["BRICKSCOPE_HOST_INTERVALS"] = "false"  # the scopes' own spans are counted
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=120, env=environment
    )


def provider_with_memory() -> tuple[TracerProvider, InMemorySpanExporter]:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


class TestValidateThenAct:
    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"max_pending": 0}, "max_pending"),
            ({"max_pending": 2.5}, "max_pending"),
            ({"max_delay_millis": 0}, "max_delay_millis"),
            ({"max_delay_millis": -1.0}, "max_delay_millis"),
            ({"sync_mode": "sometimes"}, "sync mode"),
            ({"clock": "sundial"}, "clock"),
        ],
    )
    def test_a_bad_argument_registers_nothing(self, kwargs, match):
        """The global provider is untouched when configure() refuses its arguments."""
        result = run_python(
            f"""
            from opentelemetry import trace
            import brickscope as bs
            before = trace.get_tracer_provider()
            try:
                bs.configure(**{kwargs!r})
            except ValueError as exc:
                print("refused:", exc)
            print(trace.get_tracer_provider() is before, type(trace.get_tracer_provider()).__name__)
            """,
            OTEL_TRACES_EXPORTER="console",
        )
        assert result.returncode == 0, result.stderr
        refused, unchanged = result.stdout.strip().splitlines()
        assert refused.startswith("refused:") and match in refused
        assert unchanged == "True ProxyTracerProvider"

    def test_a_bad_argument_leaves_the_running_session_alone(self):
        provider, exporter = provider_with_memory()
        session = bs.configure(provider, clock="host")
        with pytest.raises(ValueError, match="max_pending"):
            bs.configure(TracerProvider(), clock="host", max_pending=0)
        with bs.brick("rms_norm"):
            pass
        session.sync()
        assert [s.name for s in exporter.get_finished_spans()] == ["rms_norm"]
        assert provider._active_span_processor._span_processors[0] is session.sync_processor


class TestReconfigure:
    def test_reconfiguring_on_the_provider_built_from_the_environment_keeps_it_alive(self):
        """The second configure() finds the provider the first built and registered: the first
        session's shutdown must not shut it down, or every later span is lost."""
        result = run_python(
            """
            import brickscope as bs
            bs.configure(clock="host")
            session = bs.configure(clock="host")
            with bs.step(0):
                with bs.brick("rms_norm_after_reconfigure"):
                    pass
            bs.shutdown()
            """,
            OTEL_TRACES_EXPORTER="console",
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.count('"name": "rms_norm_after_reconfigure"') == 1
        assert result.stdout.count('"name": "step"') == 1

    def test_reconfiguring_from_another_thread_while_bricks_run_loses_no_scope(self):
        """4 threads run steps of one brick until the main thread has reconfigured 30 times
        onto fresh providers: every scope arrives in exactly one exporter."""
        threads, reconfigurations = 4, 30
        exporters = []
        provider, exporter = provider_with_memory()
        exporters.append(exporter)
        bs.configure(provider, clock="host")
        started, done = threading.Barrier(threads + 1), threading.Event()
        steps_run = [0] * threads

        def work(index):
            started.wait()
            while not done.is_set():
                with bs.step(steps_run[index]):
                    with bs.brick("rms_norm"):
                        pass
                steps_run[index] += 1

        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        started.wait()
        for _ in range(reconfigurations):
            provider, exporter = provider_with_memory()
            exporters.append(exporter)
            bs.configure(provider, clock="host")
        done.set()
        for worker in workers:
            worker.join()
        bs.shutdown()
        names = [s.name for e in exporters for s in e.get_finished_spans()]
        assert sum(steps_run) > reconfigurations
        assert names.count("rms_norm") == sum(steps_run)
        assert names.count("step") == sum(steps_run)

    def test_scopes_open_across_a_reconfigure_end_in_the_session_they_began_in(self):
        first_provider, first = provider_with_memory()
        second_provider, second = provider_with_memory()
        bs.configure(first_provider, clock="host")
        with bs.layer(0):
            session = bs.configure(second_provider, clock="host")
            with bs.brick("rms_norm"):
                pass
        session.sync()
        assert [s.name for s in first.get_finished_spans()] == ["layer"]
        assert [s.name for s in second.get_finished_spans()] == ["rms_norm"]
        assert session.stats()["scope_errors"] == 0

    def test_a_second_configure_is_said_once(self, caplog):
        provider = TracerProvider()
        with caplog.at_level(logging.WARNING, logger="brickscope"):
            bs.configure(provider, clock="host")
            bs.configure(provider, clock="host")
            bs.configure(provider, clock="host")
        assert sum("configure() called again" in r.getMessage() for r in caplog.records) == 1


class TestMisuseIsSaidOnce:
    def test_a_brick_before_configure_warns_once_and_records_nothing(self, caplog):
        _state.recorder = _state._NotConfigured()  # as at import, before any configure()
        with caplog.at_level(logging.WARNING, logger="brickscope"):
            for _ in range(3):
                with bs.brick("rms_norm"):
                    pass
            token = bs.enter_scope(bs.layer(0))
            bs.exit_scope(token)
        assert sum("before brickscope.configure()" in r.getMessage() for r in caplog.records) == 1
        assert _state.recorder is None
        assert isinstance(token, bs.ScopeToken)

    def test_configure_after_the_warning_records(self):
        _state.recorder = _state._NotConfigured()
        with bs.brick("rms_norm"):
            pass
        provider, exporter = provider_with_memory()
        session = bs.configure(provider, clock="host")
        with bs.brick("rms_norm"):
            pass
        session.sync()
        assert len(exporter.get_finished_spans()) == 1

    @pytest.mark.parametrize("factory", [bs.brick, bs.start_brick, bs.register_brick])
    def test_an_empty_category_is_refused(self, factory):
        with pytest.raises(ValueError, match="category must not be empty"):
            factory("rms_norm", category="") if factory is not bs.register_brick else factory("rms_norm", "")

    def test_no_cuda_is_said_once_and_not_when_off(self):
        result = run_python(
            """
            import logging
            from opentelemetry.sdk.trace import TracerProvider
            import brickscope as bs
            records = []
            handler = logging.Handler()
            handler.emit = records.append
            logging.getLogger("brickscope").addHandler(handler)
            bs.configure(TracerProvider(), clock="auto", enabled=False)
            off = sum("CUDA" in r.getMessage() for r in records)
            bs.configure(TracerProvider(), clock="auto")
            bs.configure(TracerProvider(), clock="auto")
            print(off, sum("CUDA" in r.getMessage() for r in records))
            """,
            LD_LIBRARY_PATH="",
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["0", "1"]

    @pytest.mark.parametrize(("exporter", "expected"), [(None, "1"), ("none", "0"), ("console", "0")])
    def test_configure_without_an_exporter_says_so_once(self, exporter, expected):
        result = run_python(
            """
            import logging
            import brickscope as bs
            records = []
            handler = logging.Handler()
            handler.emit = records.append
            logging.getLogger("brickscope").addHandler(handler)
            bs.configure(clock="host")
            bs.configure(clock="host")
            print(sum("OTEL_TRACES_EXPORTER is unset" in r.getMessage() for r in records))
            """,
            **({} if exporter is None else {"OTEL_TRACES_EXPORTER": exporter}),
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == [expected]

    def test_otel_sdk_disabled_turns_everything_off_quietly(self):
        result = run_python(
            """
            import logging, warnings
            warnings.simplefilter("error")
            import brickscope as bs
            records = []
            handler = logging.Handler()
            handler.emit = records.append
            logging.getLogger().addHandler(handler)
            session = bs.configure()
            with bs.step(0), bs.brick("rms_norm"):
                pass
            session.force_flush()
            print(session.stats()["spans_emitted"], session.clock, len(records))
            bs.shutdown()
            """,
            OTEL_SDK_DISABLED="true",
            OTEL_TRACES_EXPORTER="console",
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["0", "host", "0"]


class TestDisableSpellings:
    @pytest.mark.parametrize(("value", "records"), [
        ("1", False), ("true", False), ("YES", False), ("On", False),
        ("0", True), ("false", True), ("no", True), ("OFF", True), ("", True),
    ])
    def test_documented_spellings(self, monkeypatch, value, records):
        """BRICKSCOPE_DISABLE takes exactly the spellings docs/otel-integration.md lists."""
        monkeypatch.setenv("BRICKSCOPE_DISABLE", value)
        provider, exporter = provider_with_memory()
        session = bs.configure(provider, clock="host")
        with bs.brick("rms_norm"):
            pass
        session.sync()
        assert len(exporter.get_finished_spans()) == (1 if records else 0)

    @pytest.mark.parametrize("value", ["maybe", "2", "disable", "y"])
    def test_anything_else_is_refused(self, monkeypatch, value):
        monkeypatch.setenv("BRICKSCOPE_DISABLE", value)
        with pytest.raises(ValueError, match="BRICKSCOPE_DISABLE"):
            bs.configure(TracerProvider(), clock="host")
