# SPDX-License-Identifier: Apache-2.0
"""configure(): install brickscope's processors on a TracerProvider and switch scopes on.

Example::

    import brickscope as bs
    session = bs.configure()              # the global provider, deferred sync, auto clock
    ...
    print(session.report())
    session.shutdown()
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from typing import Any

from opentelemetry import metrics as otel_metrics, trace as otel_trace
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.trace import TracerProvider

from brickscope import _kernel_sources, _record, _scope, _state, propagation
from brickscope._clock import host_ns
from brickscope.sdk import _environment, _otel_internals, _resource, _self_metrics
from brickscope.sdk._options import ConfigureOptions
from brickscope.sdk.trace._aggregation import CategoryAggregator
from brickscope.sdk.trace._sampling import StepSampling
from brickscope.sdk.trace._sync import GpuSyncSpanProcessor

logger = logging.getLogger(__name__)


class Session:
    """What :func:`configure` installed: inspect it, report from it, shut it down.

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        tracer_provider: TracerProvider,
        sync_processor: GpuSyncSpanProcessor,
        aggregator: CategoryAggregator | None,
        owns_provider: bool,
        clock_fallback_reason: str | None,
    ) -> None:
        self.tracer_provider = tracer_provider
        self.sync_processor = sync_processor
        self.aggregator = aggregator
        #: Why GPU timing is off although ``clock="auto"`` asked for it, or None.
        self.clock_fallback_reason = clock_fallback_reason
        self._owns_provider = owns_provider
        self._closed = False
        #: The self-telemetry counters this session's stats feed (configure() sets it).
        self._self_metrics: Any = None
        #: (token, context) of the TRACEPARENT context configure() attached, or None.
        self._environment_context: tuple[Any, Any] | None = None

    @property
    def clock(self) -> str:
        """``"cuda"`` or ``"host"``: the clock scopes are timed with."""
        return self.sync_processor.clock

    @property
    def sync_mode(self) -> str:
        return self.sync_processor.sync_mode

    def sync(self, timeout_millis: float | None = None) -> bool:
        """Resolve and emit every pending scope; True when nothing is left."""
        return self.sync_processor.sync(block=True, timeout_millis=timeout_millis)

    def report(self, format: str = "text") -> str:
        """The category report (``"text"``, ``"markdown"`` or ``"json"``), after a sync."""
        if self.aggregator is None:
            raise RuntimeError("brickscope: this session was configured with aggregate=False")
        self.sync()
        return self.aggregator.report(format)

    def stats(self) -> dict[str, int]:
        """Counters: spans emitted, syncs, forced syncs, GPU timing errors, processor errors..."""
        return self.sync_processor.stats()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Emit everything pending, then flush the provider's exporters, all within
        ``timeout_millis``. False when something is still pending or being exported at the
        deadline (``stats()["export_timeouts"]`` counts it; nothing is dropped by a flush).
        """
        deadline = time.monotonic() + timeout_millis / 1e3
        resolved = self.sync_processor.force_flush(timeout_millis)
        remaining = max(0.0, deadline - time.monotonic())
        flushed = _finishes_within(remaining, self.tracer_provider.force_flush, int(remaining * 1e3))
        if flushed is None:
            self.sync_processor.counters.add("export_timeouts")
            _warn_once("flush_timeout", "brickscope: force_flush: the exporters did not finish within %d ms", timeout_millis)
        return resolved and bool(flushed)

    def shutdown(self, timeout_millis: int = 30000) -> None:
        """Emit everything pending, remove brickscope's processors, turn scopes off.

        Shuts the provider down too when configure() created it (else flushes it), all
        within ``timeout_millis``. What is not exported by then is counted dropped
        (``stats()["dropped_at_shutdown"]``), so afterwards
        ``spans_produced == spans_exported + spans_dropped``. Idempotent.
        """
        if self._closed:
            return
        if _state.configured is self.sync_processor.recorder:
            _state.configured = _state.recorder = None
        self._retire(timeout_millis)

    def _retire(self, timeout_millis: int = 30000) -> None:
        """Shut this session down once scopes no longer record into it (shutdown, or a newer
        configure() that already switched them over)."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + timeout_millis / 1e3
        self.sync_processor.shutdown(timeout_millis)
        if self.aggregator is not None:
            self.aggregator.collect_unsampled_from(None)
        _otel_internals.remove_processors(self.tracer_provider, (self.sync_processor, self.aggregator))
        if self._environment_context is not None:
            propagation._detach_environment_context(self._environment_context)
            self._environment_context = None
        remaining = max(0.0, deadline - time.monotonic())
        if self._owns_provider:
            done = _finishes_within(remaining, self.tracer_provider.shutdown)
        else:
            done = _finishes_within(remaining, self.tracer_provider.force_flush, int(remaining * 1e3))
        counters = self.sync_processor.counters
        if done is None:
            counters.add("export_timeouts")
        lost = self.sync_processor.close_deliveries()
        if self._self_metrics is not None:
            self._self_metrics.retire(self.sync_processor.stats())
        if lost:
            _warn_once(
                "shutdown_lost",
                "brickscope: shutdown: %d spans were not exported within %d ms and are counted dropped",
                lost,
                timeout_millis,
            )


_session: Session | None = None
_configure_lock = threading.RLock()  # one configure() or shutdown() at a time
_warned: set[str] = set()


def configure(
    tracer_provider: TracerProvider | None = None,
    *,
    sync_mode: str | None = None,
    clock: str | None = None,
    enabled: bool | None = None,
    max_pending: int | None = None,
    max_delay_millis: float = 1000.0,
    propagate_context: bool = True,
    time_kernels: bool = False,
    aggregate: bool = True,
    meter_provider: otel_metrics.MeterProvider | None = None,
    sync_timeout_millis: float = 1000.0,
    step_sampling: StepSampling | str | None = None,
    resolver: str | None = None,
    duration_histogram: str | None = None,
    host_intervals: bool | None = None,
) -> Session:
    """Install brickscope on ``tracer_provider`` (default: the global one) and turn scopes on.

    The GpuSyncSpanProcessor goes in front of the provider's existing processors
    (so flush and shutdown resolve scopes before exporters flush); the
    CategoryAggregator goes after them. Arguments left None come from the
    ``BRICKSCOPE_*`` environment variables, then the defaults. Configuring again
    replaces the previous session.

    With no provider given and no SDK provider registered, the provider is built
    from the standard ``OTEL_*`` variables by the SDK's own configuration code
    (exporters, sampler, resource), and so is the MeterProvider when no SDK one is
    registered and ``OTEL_METRICS_EXPORTER`` names an exporter. ``OTEL_SDK_DISABLED=true``
    turns scopes off. The provider's resource gains host name, launcher rank and
    CUDA device names where it lacks them. A ``TRACEPARENT`` in the environment
    becomes the current parent when no span is current (see
    :mod:`brickscope.propagation`), until the session shuts down.

    Args:
        tracer_provider: an SDK TracerProvider. None: the global provider, or a new
            one (registered globally) if the global one is not an SDK provider.
        sync_mode: ``"deferred"``, ``"per_layer"``, ``"immediate"`` or ``"none"``.
        clock: ``"auto"``, ``"cuda"`` or ``"host"``.
        enabled: False records nothing until :func:`enable`.
        max_pending: ended scopes held before a forced sync.
        max_delay_millis: deferred mode resolves complete scopes this often.
        propagate_context: open steps, layers and bricks become the current OTel span.
        time_kernels: also GPU-time kernel scopes.
        aggregate: install a CategoryAggregator (and its metrics).
        meter_provider: for the aggregator's metrics; default: the global one
            (built from the environment, as above, when it is not an SDK one).
        sync_timeout_millis: the most a sync point reached on the hot path (a scope
            end in ``immediate``/``per_layer`` mode, a forced sync on overflow) waits for
            the GPU; what is not complete by then stays pending, counted in
            ``stats()["sync_timeouts"]``.
        step_sampling: which steps produce spans: a :class:`StepSampling` or its text
            form (``"every=100"``, ``"wait=5,warmup=1,active=3,repeat=2"``); default
            ``BRICKSCOPE_STEP_SAMPLING``, else every step. Metrics count every brick
            whatever is sampled.
        resolver: ``"inline"`` (default, or ``BRICKSCOPE_RESOLVER``): resolution at sync
            points on the thread reaching them; ``"thread"``: a resolver thread does
            it, the application thread only records.
        duration_histogram: which bricks the ``brickscope.brick.duration`` histogram
            records: ``"sampled"`` (default, or ``BRICKSCOPE_DURATION_HISTOGRAM``: the
            bricks that have a span, with exemplars), ``"all"`` (every brick; brickscope
            aggregates the histogram, ~0.8 us a value) or ``"off"``. Exact count, self time and elements of every
            brick are observable counters either way.
        host_intervals: True (default, or ``BRICKSCOPE_HOST_INTERVALS``): brickscope's own
            work at sync points on application threads becomes ``overhead`` spans, and
            garbage-collection pauses inside sampled scopes ``gc`` spans
            (``docs/semantic-conventions.md``, "Overhead and GC spans"); False: neither.

    Raises:
        ValueError: an unknown sync mode or clock, a bad bound, ``clock="cuda"``
            without a usable CUDA driver and device, or a bad ``OTEL_*`` value
            (unknown exporter, sampler, protocol...). The message names the
            environment variable when the value came from one.
        TypeError: ``tracer_provider`` is not an SDK TracerProvider.

    .. versionadded:: 0.1.0
    """
    with _configure_lock:
        options = ConfigureOptions.from_arguments(  # raises here, before anything is built
            tracer_provider,
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
            step_sampling=step_sampling,
            resolver=resolver,
            duration_histogram=duration_histogram,
            host_intervals=host_intervals,
        )
        return SessionBuilder(options).build()


class SessionBuilder:
    """Assembles a session from validated :class:`ConfigureOptions` (under ``_configure_lock``).

    First the pipeline is built, registering nothing global (a bad ``clock="cuda"`` fails
    there): the provider, the timer, the resource, the sync processor, the meter provider
    and the aggregator. Then it is installed: providers registered, processors installed,
    scopes switched over in one assignment, the previous session retired.
    """

    def __init__(self, options: ConfigureOptions) -> None:
        self.options = options

    def build(self) -> Session:
        """Build and install the session; it becomes the current one."""
        tracer_provider, register_provider = self._tracer_provider()
        timer, fallback_reason = self._timer()
        _resource.extend_provider_resource(
            tracer_provider, {**_resource.process_attributes(), **_resource.gpu_attributes(timer)}
        )
        _publish_kernel_sources(_kernel_sources.resource_attributes(), tracer_provider)
        sync_processor = self._sync_processor(tracer_provider, timer)
        meter_provider, built_meter_provider = self._meter_provider(tracer_provider)
        aggregator = self._aggregator(meter_provider)
        return self._install(
            tracer_provider, register_provider, sync_processor, aggregator, meter_provider, built_meter_provider,
            fallback_reason,
        )  # fmt: skip

    def _tracer_provider(self) -> tuple[TracerProvider, bool]:
        """The provider to install on, and whether it is new (to register globally)."""
        options = self.options
        tracer_provider = options.tracer_provider
        register_provider = False
        if tracer_provider is None:
            tracer_provider = otel_trace.get_tracer_provider()
            if not isinstance(tracer_provider, TracerProvider):
                tracer_provider = (
                    TracerProvider()
                    if options.sdk_disabled
                    else _environment.tracer_provider_from_environment(
                        _resource.create_resource(), min_queue_size=options.max_pending
                    )
                )
                register_provider = True
                if not options.sdk_disabled and not os.environ.get("OTEL_TRACES_EXPORTER", "").strip():
                    _warn_once(
                        "no_exporter",
                        "brickscope: OTEL_TRACES_EXPORTER is unset and no TracerProvider was given: spans go "
                        "nowhere (set it to otlp, console, perfetto or flamegraph, or to none to silence this)",
                    )
        return tracer_provider, register_provider

    def _timer(self) -> tuple[Any, str | None]:
        """The CUDA timer, or None and why not (see :func:`_make_timer`)."""
        options = self.options
        if options.sync_mode == "none" or options.sdk_disabled:
            return None, None
        return _make_timer(options.clock, options.enabled)

    def _sync_processor(self, tracer_provider: TracerProvider, timer: Any) -> GpuSyncSpanProcessor:
        options = self.options
        return GpuSyncSpanProcessor(
            tracer_provider,
            sync_mode=options.sync_mode,
            timer=timer,
            max_pending=options.max_pending,
            max_delay_millis=options.max_delay_millis,
            propagate_context=options.propagate_context,
            time_kernels=options.time_kernels,
            sync_timeout_millis=options.sync_timeout_millis,
            step_sampling=options.step_sampling,
            aggregate_unsampled=options.aggregate,
            resolver=options.resolver,
            unsampled_values=options.aggregate and options.duration_histogram == "all",
            host_intervals=options.host_intervals,
        )

    def _meter_provider(self, tracer_provider: TracerProvider) -> tuple[Any, Any]:
        """The aggregator's meter provider, and the one built here from the environment (to
        register globally) or None."""
        options = self.options
        meter_provider = options.meter_provider
        built_meter_provider = None
        if meter_provider is None and options.aggregate and not options.sdk_disabled:
            meter_provider = built_meter_provider = _meter_provider_from_environment(tracer_provider.resource)
        return meter_provider, built_meter_provider

    def _aggregator(self, meter_provider: Any) -> CategoryAggregator | None:
        options = self.options
        if not options.aggregate:
            return None
        return CategoryAggregator(meter_provider, duration_histogram=options.duration_histogram)

    def _install(
        self,
        tracer_provider: TracerProvider,
        register_provider: bool,
        sync_processor: GpuSyncSpanProcessor,
        aggregator: CategoryAggregator | None,
        meter_provider: Any,
        built_meter_provider: Any,
        fallback_reason: str | None,
    ) -> Session:
        """Register, install, switch scopes over in one assignment, retire the old session."""
        global _session
        owns_provider = False
        if register_provider:
            otel_trace.set_tracer_provider(tracer_provider)
            owns_provider = otel_trace.get_tracer_provider() is tracer_provider
        if built_meter_provider is not None:
            otel_metrics.set_meter_provider(built_meter_provider)
        _otel_internals.install_first(tracer_provider, sync_processor)  # first: flushes resolve before exports
        sync_processor.track_deliveries()
        if aggregator is not None:
            tracer_provider.add_span_processor(aggregator)
            aggregator.collect_unsampled_from(sync_processor.hand_over_unsampled)
        previous = _session
        if previous is not None and previous.tracer_provider is tracer_provider and previous._owns_provider:
            owns_provider, previous._owns_provider = True, False  # the provider lives on in the new session
        _session = Session(tracer_provider, sync_processor, aggregator, owns_provider, fallback_reason)
        _state.configured = sync_processor.recorder
        _state.recorder = sync_processor.recorder if self.options.enabled else None
        _guard_torch_compile()
        if not self.options.sdk_disabled:
            _session._self_metrics = _self_metrics.register(
                meter_provider or otel_metrics.get_meter_provider(), _open_session_stats
            )
        if previous is not None:
            _warn_once(
                "reconfigured",
                "brickscope: configure() called again: the previous session is flushed and replaced "
                "(scopes still open in it are emitted when they end)",
            )
            previous._retire()
        _session._environment_context = propagation._attach_environment_context()
        return _session


def _guard_torch_compile() -> None:
    """Scopes inside torch.compile'd code record nothing and break no graph (``_state.compiling``),
    when torch is already imported; this never imports it (brickscope.torch sets it too)."""
    torch = sys.modules.get("torch")
    if _state.compiling is None and torch is not None:
        _state.compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if torch is not None:
        _scope.register_compile_substitutes(torch)


def enable() -> None:
    """Scopes record again (into the configured session). No-op before configure()."""
    _state.recorder = _state.configured


def disable() -> None:
    """Scopes cost about as much as an empty ``with`` block until :func:`enable`."""
    _state.recorder = None


def shutdown(timeout_millis: int = 30000) -> None:
    """Shut the current session down (see :meth:`Session.shutdown`). Idempotent."""
    global _session
    with _configure_lock:
        if _session is not None:
            _session.shutdown(timeout_millis)
            _session = None


def _open_session_stats(metrics: Any) -> dict[str, int] | None:
    """The open session's stats if it reports to ``metrics`` (self-telemetry counters)."""
    live = _session
    if live is None or live._closed or live._self_metrics is not metrics:
        return None
    return live.stats()


def current_session() -> Session | None:
    """The session configure() returned last, if it is still open."""
    return _session


def _publish_kernel_sources(attributes: dict[str, str], provider: TracerProvider | None = None) -> None:
    """Put the kernel-source registry on ``provider``'s resource (by default the live
    session's), replacing an older registry; nothing when nothing is registered."""
    if provider is None:
        session = current_session()
        if session is None:
            return
        provider = session.tracer_provider
    if attributes:
        _resource.replace_provider_resource_attributes(provider, attributes)


_kernel_sources.set_listener(_publish_kernel_sources)


def _meter_provider_from_environment(resource: Any) -> otel_metrics.MeterProvider | None:
    """None if the global MeterProvider is an SDK one (the aggregator uses it); else one built
    from ``OTEL_METRICS_EXPORTER`` with the spans' resource, for configure() to register;
    None when the variable names nothing."""
    current = otel_metrics.get_meter_provider()
    if isinstance(current, SdkMeterProvider):
        return None
    return _environment.meter_provider_from_environment(resource)


def _make_timer(clock: str, enabled: bool) -> tuple[Any, str | None]:
    """A CudaTimer for ``cuda``/``auto``, or (None, why not).

    ``auto`` without usable CUDA logs one line, once per process and only when scopes
    record; the full reason is ``Session.clock_fallback_reason``.
    """
    if clock == "host":
        return None, None
    try:
        from brickscope._gpu import CudaTimer, CudaUnavailable
    except ImportError as exc:  # the GPU layer itself is missing: treat as no CUDA
        reason = f"brickscope's GPU layer is unavailable: {exc}"
        if clock == "cuda":
            raise ValueError(f"brickscope: clock='cuda' requested but {reason}") from exc
    else:
        try:
            return CudaTimer(host_ns=host_ns), None
        except CudaUnavailable as exc:
            if clock == "cuda":
                raise ValueError(f"brickscope: clock='cuda' requested but CUDA is unusable: {exc.reason}") from exc
            reason = exc.reason
    if enabled:
        _warn_once("no_cuda", "brickscope: no usable CUDA; timing on the host clock (see session.clock_fallback_reason)")
    logger.debug("brickscope: host clock: %s", reason)
    return None, reason


#: The most interpreter exit waits for brickscope: pending scopes resolved and exported.
EXIT_TIMEOUT_MILLIS = 5000


def _flush_at_exit() -> None:
    """Interpreter exit: shut the open session down within EXIT_TIMEOUT_MILLIS (registered once).

    Providers configure() builds do not register the SDK's own exit handler (which waits up
    to 30 s per processor); this shuts them down instead, and says what did not make it.
    """
    live = _session
    if live is not None and not live._closed:
        live.shutdown(EXIT_TIMEOUT_MILLIS)


def _finishes_within(seconds: float, call: Any, *args: Any) -> Any:
    """``call(*args)``'s result if it returns within ``seconds``, else None (it goes on in a
    daemon thread: an exporter blocked on a dead collector cannot be interrupted).

    Where no thread can be started (CPython 3.12 refuses new threads once the interpreter
    is exiting), it runs here, to its end: the deadline is lost, not the spans."""
    result: list[Any] = []
    done = threading.Event()

    def run() -> None:
        try:
            result.append(call(*args))
        except Exception:
            logger.exception("brickscope: %s failed", getattr(call, "__qualname__", call))
            result.append(False)
        finally:
            done.set()

    try:
        threading.Thread(target=run, name="brickscope-deadline", daemon=True).start()
    except RuntimeError:  # "can't create new thread at interpreter shutdown"
        run()
    if not done.wait(seconds):
        return None
    return result[0] if result[0] is not None else True


def _forget_after_fork() -> None:
    """In a forked child: drop the parent's pending scopes and CUDA state (registered once)."""
    if _session is not None:
        _session.sync_processor._forget_after_fork()
    _record.TOP.set(None)


# One handler each for the whole process, acting on whichever session is current:
# registering per configure() would pile up handlers in programs that reconfigure.
atexit.register(_flush_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _warn_once(key: str, message: str, *args: object) -> None:
    """Log a warning the first time ``key`` comes up in this process."""
    if key not in _warned:
        _warned.add(key)
        logger.warning(message, *args)

