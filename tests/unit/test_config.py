# SPDX-License-Identifier: Apache-2.0
"""Bad input fails at set-up with a clear error; the environment fills unset arguments."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

import brickscope as bs
from brickscope.testing import capture_spans


class TestBadInput:
    @pytest.mark.parametrize(
        ("call", "error", "match"),
        [
            (lambda: bs.brick(42), TypeError, "name must be a str"),
            (lambda: bs.brick(""), ValueError, "must not be empty"),
            (lambda: bs.brick(["rms_norm"]), TypeError, "name must be a str"),
            (lambda: bs.brick("rms_norm", elements=-1), ValueError, "elements must be >= 0"),
            (lambda: bs.brick("rms_norm", elements=1.5), TypeError, "elements must be an int"),
            (lambda: bs.brick("rms_norm", category=3), TypeError, "category must be a str"),
            # the forms the C factory builds itself hand anything invalid to the Python checks
            (lambda: bs.brick("rms_norm", "norm", -2), ValueError, "elements must be >= 0"),
            (lambda: bs.brick("rms_norm", elements=-(1 << 70)), ValueError, "elements must be >= 0"),
            (lambda: bs.brick("rms_norm", elements=True), TypeError, "elements must be an int"),
            (lambda: bs.brick("rms_norm", category="", elements=4), ValueError, "must not be empty"),
            (lambda: bs.brick("", elements=4), ValueError, "must not be empty"),
            (lambda: bs.brick(b"rms_norm", category="norm"), TypeError, "name must be a str"),
            (lambda: bs.kernel(None), TypeError, "name must be a str"),
            (lambda: bs.kernel("k", grid=(0, 1)), ValueError, "grid must be 1 to 3 positive ints"),
            (lambda: bs.kernel("k", block=(1, 2, 3, 4)), ValueError, "block must be 1 to 3"),
            (lambda: bs.kernel("k", shared_mem_bytes=-4), ValueError, "shared_mem_bytes"),
            (lambda: bs.layer(-1), ValueError, "layer index must be >= 0"),
            (lambda: bs.step("one"), TypeError, "step number must be an int"),
            (lambda: bs.register_brick("x", 5), TypeError, "category must be a str"),
        ],
    )
    def test_scope_arguments_are_checked_where_given(self, call, error, match):
        """Malformed scope arguments raise a clear error at the call that gives them."""
        with pytest.raises(error, match=match):
            call()

    def test_unknown_sync_mode(self):
        """configure(sync_mode='sometimes') raises ValueError listing the modes."""
        with pytest.raises(ValueError, match="unknown sync mode 'sometimes'.*deferred"):
            bs.configure(TracerProvider(), sync_mode="sometimes")

    def test_unknown_clock(self):
        """configure(clock='tsc') raises ValueError listing the clocks."""
        with pytest.raises(ValueError, match="unknown clock 'tsc'"):
            bs.configure(TracerProvider(), clock="tsc")

    def test_provider_must_be_an_sdk_provider(self):
        """A non-SDK provider is rejected with TypeError."""
        with pytest.raises(TypeError, match="TracerProvider"):
            bs.configure(trace.NoOpTracerProvider())

    def test_bad_bound(self):
        """A non-positive max_pending is a ValueError."""
        with pytest.raises(ValueError, match="max_pending"):
            bs.configure(TracerProvider(), max_pending=0)


class TestEnvironment:
    def test_env_sync_mode_applies_when_argument_unset(self, monkeypatch):
        """BRICKSCOPE_SYNC_MODE fills sync_mode when the caller leaves it None."""
        monkeypatch.setenv("BRICKSCOPE_SYNC_MODE", "per_layer")
        session = bs.configure(TracerProvider(), clock="host")
        assert session.sync_mode == "per_layer"

    def test_bad_env_value_names_the_variable(self, monkeypatch):
        """A bad BRICKSCOPE_SYNC_MODE is reported with the variable's name."""
        monkeypatch.setenv("BRICKSCOPE_SYNC_MODE", "later")
        with pytest.raises(ValueError, match="BRICKSCOPE_SYNC_MODE"):
            bs.configure(TracerProvider())

    def test_env_disable(self, monkeypatch):
        """BRICKSCOPE_DISABLE=1 configures brickscope switched off."""
        monkeypatch.setenv("BRICKSCOPE_DISABLE", "1")
        with capture_spans() as captured:
            with bs.brick("rms_norm"):
                pass
            assert captured.spans == ()

    def test_bad_env_flag(self, monkeypatch):
        """BRICKSCOPE_DISABLE=maybe is a ValueError naming the variable."""
        monkeypatch.setenv("BRICKSCOPE_DISABLE", "maybe")
        with pytest.raises(ValueError, match="BRICKSCOPE_DISABLE"):
            bs.configure(TracerProvider())


class TestConfigureOptions:
    def test_options_are_final_and_frozen(self, monkeypatch):
        """The options hold the environment's values where the arguments left None, and cannot change."""
        import dataclasses

        from brickscope.sdk._options import ConfigureOptions

        monkeypatch.setenv("BRICKSCOPE_SYNC_MODE", "per_layer")
        monkeypatch.setenv("BRICKSCOPE_MAX_PENDING", "64")
        options = ConfigureOptions.from_arguments(
            TracerProvider(), sync_mode=None, clock="host", enabled=None, max_pending=None,
            max_delay_millis=1000.0, propagate_context=True, time_kernels=False, aggregate=False,
            meter_provider=None, sync_timeout_millis=1000.0, step_sampling="every=2", resolver=None,
            duration_histogram=None,
        )  # fmt: skip
        assert (options.sync_mode, options.max_pending, options.resolver, options.enabled) == (
            "per_layer", 64, "inline", True
        )
        assert options.step_sampling == bs.StepSampling.parse("every=2")
        with pytest.raises(dataclasses.FrozenInstanceError):
            options.sync_mode = "immediate"  # type: ignore[misc]

    def test_a_bad_value_installs_nothing(self):
        """configure() raises on a bad argument before any session is installed or scopes switched on."""
        from brickscope import _state
        from brickscope.sdk import _config

        with pytest.raises(ValueError, match="sync_timeout_millis"):
            bs.configure(TracerProvider(), clock="host", sync_timeout_millis=0)
        assert _config.current_session() is None
        assert _state.configured is None and _state.recorder is None


class TestSession:
    def test_reconfigure_replaces_the_session(self):
        """Configuring twice leaves one GpuSyncSpanProcessor installed, in front."""
        provider = TracerProvider()
        bs.configure(provider, clock="host")
        second = bs.configure(provider, clock="host")
        processors = provider._active_span_processor._span_processors
        assert processors[0] is second.sync_processor
        assert sum(isinstance(p, bs.GpuSyncSpanProcessor) for p in processors) == 1

    def test_shutdown_removes_processors_and_turns_scopes_off(self):
        """After shutdown, the provider has none of brickscope's processors and scopes record nothing."""
        provider = TracerProvider()
        session = bs.configure(provider, clock="host")
        session.shutdown()
        assert provider._active_span_processor._span_processors == ()
        with bs.brick("rms_norm"):
            pass
        assert session.stats()["spans_emitted"] == 0

    def test_auto_clock_without_cuda_falls_back_to_host_with_one_warning(self):
        """clock='auto' where no CUDA driver can be loaded times on the host and says why, once.

        Runs in a fresh process: this one may have the simulated driver loaded by the GPU tests.
        """
        script = textwrap.dedent(
            """
            import logging, sys
            from opentelemetry.sdk.trace import TracerProvider
            import brickscope as bs
            records = []
            handler = logging.Handler()
            handler.emit = records.append
            logging.getLogger("brickscope").addHandler(handler)
            session = bs.configure(TracerProvider(), clock="auto")
            with bs.brick("rms_norm"):
                pass
            session.sync()
            print(session.clock, bool(session.clock_fallback_reason),
                  sum("host clock" in r.getMessage() for r in records))
            """
        )
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["host", "True", "1"]
