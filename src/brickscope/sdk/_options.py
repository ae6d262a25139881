# SPDX-License-Identifier: Apache-2.0
"""configure()'s options: its keyword arguments completed from the ``BRICKSCOPE_*`` and
``OTEL_*`` environment variables and validated, before anything is built or installed.

Example::

    options = ConfigureOptions.from_arguments(None, sync_mode="per_layer", ...)  # raises here
    session = SessionBuilder(options).build()  # brickscope.sdk._config
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from opentelemetry import metrics as otel_metrics, trace as otel_trace
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.trace import TracerProvider

from brickscope import environment_variables as env
from brickscope.sdk import _environment
from brickscope.sdk.trace._aggregation import duration_histogram_mode
from brickscope.sdk.trace._sampling import StepSampling
from brickscope.sdk.trace._sync import RESOLVERS, SYNC_MODES

CLOCKS = ("auto", "cuda", "host")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


@dataclass(frozen=True)
class ConfigureOptions:
    """What :func:`~brickscope.sdk.configure` was asked for, every value final and checked.

    Built by :meth:`from_arguments` only; the arguments are configure()'s (see its docstring).
    """

    # The SDK TracerProvider to install on; None: the global one, or one built from OTEL_*.
    tracer_provider: TracerProvider | None
    # "deferred", "per_layer", "immediate" or "none" (argument, BRICKSCOPE_SYNC_MODE, "deferred").
    sync_mode: str
    # "auto", "cuda" or "host" (argument, BRICKSCOPE_CLOCK, "auto"); CUDA is probed when building.
    clock: str
    # Scopes record from the start (argument, else not BRICKSCOPE_DISABLE); False when sdk_disabled.
    enabled: bool
    # Ended scopes held before a forced sync (argument, BRICKSCOPE_MAX_PENDING, 16384).
    max_pending: int
    # Deferred mode resolves complete scopes this often.
    max_delay_millis: float
    # Open steps, layers and bricks become the current OTel span.
    propagate_context: bool
    # Kernel scopes are GPU-timed too.
    time_kernels: bool
    # A CategoryAggregator (and its metrics) is installed.
    aggregate: bool
    # For the aggregator's metrics; None: the global one, or one built from OTEL_METRICS_EXPORTER.
    meter_provider: otel_metrics.MeterProvider | None
    # The most a sync point on the hot path waits for the GPU.
    sync_timeout_millis: float
    # Which steps produce spans (argument parsed, BRICKSCOPE_STEP_SAMPLING); None: every step.
    step_sampling: StepSampling | None
    # "inline" or "thread" (argument, BRICKSCOPE_RESOLVER, "inline").
    resolver: str
    # "sampled", "all" or "off" (argument, BRICKSCOPE_DURATION_HISTOGRAM, "sampled").
    duration_histogram: str
    # overhead and gc spans (argument, BRICKSCOPE_HOST_INTERVALS, True).
    host_intervals: bool
    # OTEL_SDK_DISABLED=true: OpenTelemetry is off for every signal, so brickscope records
    # nothing, builds no timer and registers no self-metrics.
    sdk_disabled: bool

    @classmethod
    def from_arguments(
        cls,
        tracer_provider: TracerProvider | None,
        *,
        sync_mode: str | None,
        clock: str | None,
        enabled: bool | None,
        max_pending: int | None,
        max_delay_millis: float,
        propagate_context: bool,
        time_kernels: bool,
        aggregate: bool,
        meter_provider: otel_metrics.MeterProvider | None,
        sync_timeout_millis: float,
        step_sampling: StepSampling | str | None,
        resolver: str | None,
        duration_histogram: str | None,
        host_intervals: bool | None = None,
    ) -> ConfigureOptions:
        """configure()'s arguments (each one given: configure() holds the defaults), completed
        from the environment and validated: nothing is built or touched.

        Raises:
            ValueError, TypeError: as :func:`~brickscope.sdk.configure` says.
        """
        sync_mode = _choice("sync mode", sync_mode, env.BRICKSCOPE_SYNC_MODE, "deferred", SYNC_MODES)
        clock = _choice("clock", clock, env.BRICKSCOPE_CLOCK, "auto", CLOCKS)
        if enabled is None:
            enabled = not _env_flag(env.BRICKSCOPE_DISABLE)
        if max_pending is None:
            max_pending = _env_int(env.BRICKSCOPE_MAX_PENDING, 16384)
        _check_bounds(max_pending, max_delay_millis)
        _check_positive("sync_timeout_millis", sync_timeout_millis)
        sampling = _step_sampling(step_sampling)
        resolver = _choice("resolver", resolver, env.BRICKSCOPE_RESOLVER, "inline", RESOLVERS)
        duration_histogram = duration_histogram_mode(duration_histogram)
        if host_intervals is None:
            unset = not os.environ.get(env.BRICKSCOPE_HOST_INTERVALS, "").strip()
            host_intervals = True if unset else _env_flag(env.BRICKSCOPE_HOST_INTERVALS)
        elif not isinstance(host_intervals, bool):
            raise TypeError(f"brickscope: host_intervals must be a bool, got {type(host_intervals).__name__}")
        if tracer_provider is not None and not isinstance(tracer_provider, TracerProvider):
            raise TypeError(
                "brickscope: tracer_provider must be an opentelemetry.sdk.trace.TracerProvider, "
                f"got {type(tracer_provider).__name__}"
            )
        sdk_disabled = _environment.sdk_disabled()
        if sdk_disabled:  # OpenTelemetry is off for every signal: brickscope records nothing
            enabled = False
        else:  # bad OTEL_* values fail here, before anything is registered
            builds_meter_provider = not isinstance(otel_metrics.get_meter_provider(), SdkMeterProvider)
            _environment.validate(
                traces=tracer_provider is None and not isinstance(otel_trace.get_tracer_provider(), TracerProvider),
                metrics=meter_provider is None and aggregate and builds_meter_provider,
            )
        return cls(
            tracer_provider=tracer_provider,
            sync_mode=sync_mode,
            clock=clock,
            enabled=enabled,
            max_pending=max_pending,
            max_delay_millis=max_delay_millis,
            propagate_context=propagate_context,
            time_kernels=time_kernels,
            aggregate=aggregate,
            meter_provider=meter_provider,
            sync_timeout_millis=sync_timeout_millis,
            step_sampling=sampling,
            resolver=resolver,
            duration_histogram=duration_histogram,
            host_intervals=host_intervals,
            sdk_disabled=sdk_disabled,
        )


def _check_bounds(max_pending: object, max_delay_millis: object) -> None:
    if not isinstance(max_pending, int) or isinstance(max_pending, bool) or max_pending < 1:
        raise ValueError(f"brickscope: max_pending must be a positive int, got {max_pending!r}")
    if (
        not isinstance(max_delay_millis, (int, float))
        or isinstance(max_delay_millis, bool)
        or not max_delay_millis > 0
        or max_delay_millis != max_delay_millis
    ):
        raise ValueError(f"brickscope: max_delay_millis must be a number > 0, got {max_delay_millis!r}")


def _check_positive(name: str, value: object) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0 or value != value:
        raise ValueError(f"brickscope: {name} must be a number > 0, got {value!r}")


def _env_int(variable: str, default: int) -> int:
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"brickscope: {variable}={raw!r} is not an int") from None


def _choice(what: str, value: str | None, variable: str, default: str, allowed: tuple[str, ...]) -> str:
    """``value``, else the environment variable, else ``default``; checked against ``allowed``."""
    source = ""
    if value is None:
        value = os.environ.get(variable, "").strip().lower() or default
        source = f" (from {variable})" if variable in os.environ else ""
    if value not in allowed:
        raise ValueError(f"brickscope: unknown {what} {value!r}{source}; expected one of {allowed}")
    return value


def _step_sampling(value: StepSampling | str | None) -> StepSampling | None:
    """``value`` (parsed when text), else ``BRICKSCOPE_STEP_SAMPLING``, else None (every step)."""
    if isinstance(value, StepSampling):
        return value
    if value is None:
        raw = os.environ.get(env.BRICKSCOPE_STEP_SAMPLING, "").strip()
        if not raw:
            return None
        try:
            return StepSampling.parse(raw)
        except ValueError as exc:
            raise ValueError(f"{exc} (from {env.BRICKSCOPE_STEP_SAMPLING})") from None
    if isinstance(value, str):
        return StepSampling.parse(value)
    raise TypeError(f"brickscope: step_sampling must be a StepSampling or a str, got {type(value).__name__}")


def _env_flag(variable: str) -> bool:
    raw = os.environ.get(variable, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError(f"brickscope: {variable}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")
