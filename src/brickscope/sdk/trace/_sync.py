# SPDX-License-Identifier: Apache-2.0
"""GpuSyncSpanProcessor: records scopes cheaply, resolves their timing at sync points,
and emits them as ordinary ended spans through the TracerProvider's processors.

It is the SDK-facing shell around four parts, each in its own module:

- :mod:`~brickscope.sdk.trace._recorder`: the hot path (scope enter/exit, the scope stack);
- :mod:`~brickscope.sdk.trace._resolution`: sync points (waiting for the GPU, in order);
- :mod:`~brickscope.sdk.trace._spans`: a resolved record into a ``ReadableSpan``;
- :mod:`~brickscope.sdk.trace._sdk`: handing spans to the provider's processors (every
  private SDK attribute is read in :mod:`brickscope.sdk._otel_internals`).

Example::

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    session = brickscope.configure(provider)       # installs GpuSyncSpanProcessor first
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

from brickscope.sdk.trace import _delivery
from brickscope.sdk.trace._counters import Counters
from brickscope.sdk.trace._overhead import GcPauses, HostIntervals
from brickscope.sdk.trace._record_cost import per_record_ns
from brickscope.sdk.trace._recorder import CLOSE_ACTIONS, LATE, Recorder
from brickscope.sdk.trace._resolution import Resolver
from brickscope.sdk.trace._sampling import StepSampling
from brickscope.sdk.trace._sdk import Downstream
from brickscope.sdk.trace._spans import SpanBuilder
from brickscope.sdk.trace._unsampled import UnsampledBricks
from brickscope.sdk.trace._worker import ResolverThread

#: Sync policies: when pending records are resolved into spans.
SYNC_MODES = tuple(CLOSE_ACTIONS)
#: Where resolution runs: at sync points on the recording thread, or on a resolver thread.
RESOLVERS = ("inline", "thread")


class GpuSyncSpanProcessor(SpanProcessor):
    """Turns brickscope scopes into spans at sync points, with GPU or host timing.

    Install it first on the provider (``brickscope.configure`` does), so that the
    provider's ``force_flush`` and ``shutdown`` reach it before the exporters'.
    Its own ``on_start``/``on_end`` ignore other spans. Scope enter/exit run on
    the instrumented thread and never block (except ``immediate``/``per_layer``,
    whose whole point is to); resolution runs on whichever thread reaches a sync
    point, under a lock.

    Args:
        tracer_provider: the SDK provider whose resource, id generator, sampler
            and processors the emitted spans go through.
        sync_mode: ``"deferred"`` (resolve at ``sync()``, step end, flush: the
            default), ``"per_layer"``, ``"immediate"`` or ``"none"`` (host timing only).
        timer: a GPU timer (``brickscope._gpu.CudaTimer``) or None for the host clock.
        max_pending: ended records kept before a forced sync (overflow policy:
            force a blocking sync and count it; nothing is dropped).
        max_delay_millis: in deferred mode, resolve already-complete records
            without blocking once the oldest pending one is this old.
        propagate_context: make each open step, layer and brick the current OTel
            span, so spans user code starts inside it get it as their parent.
        time_kernels: GPU-time kernel scopes too (two more events per kernel).
        sync_timeout_millis: the most a sync point on the hot path (a scope end in
            ``immediate``/``per_layer``, a forced sync) waits for the GPU; scopes not
            complete by then stay pending (``stats()["sync_timeouts"]``).
        step_sampling: which steps produce spans (:class:`StepSampling`), or None:
            every step the OTel sampler keeps.
        aggregate_unsampled: bricks that produce no span (unsampled trace or step)
            are still timed and resolved for the metrics of the provider's
            CategoryAggregator; False drops them at close (nothing to aggregate into).
        resolver: ``"inline"`` (resolution at sync points, on the thread that reaches
            them) or ``"thread"``: a resolver thread resolves, builds and aggregates,
            woken at each step end and every ``max_delay_millis``; the recording
            thread only records (``sync()``, flush and shutdown still resolve
            everything before they return).
        unsampled_values: hand each unsampled brick's self time to the aggregators too,
            for a duration histogram of every brick (``duration_histogram="all"``); by
            default they get exact sums only.
        host_intervals: emit ``overhead`` spans for sync points on application threads
            and ``gc`` spans for garbage-collection pauses inside sampled scopes
            (:mod:`~brickscope.sdk.trace._overhead`).

    Raises:
        ValueError: unknown ``sync_mode`` or a non-positive bound.
        TypeError: ``tracer_provider`` is not an SDK ``TracerProvider``.

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        tracer_provider: TracerProvider,
        *,
        sync_mode: str = "deferred",
        timer: Any = None,
        max_pending: int = 16384,
        max_delay_millis: float = 1000.0,
        propagate_context: bool = True,
        time_kernels: bool = False,
        sync_timeout_millis: float = 1000.0,
        step_sampling: StepSampling | None = None,
        aggregate_unsampled: bool = True,
        resolver: str = "inline",
        unsampled_values: bool = False,
        host_intervals: bool = True,
    ) -> None:
        if not isinstance(tracer_provider, TracerProvider):
            raise TypeError(
                "brickscope: tracer_provider must be an opentelemetry.sdk.trace.TracerProvider, "
                f"got {type(tracer_provider).__name__}"
            )
        if sync_mode not in SYNC_MODES:
            raise ValueError(f"brickscope: unknown sync_mode {sync_mode!r}; expected one of {SYNC_MODES}")
        if not isinstance(max_pending, int) or max_pending < 1:
            raise ValueError(f"brickscope: max_pending must be a positive int, got {max_pending!r}")
        if not max_delay_millis > 0:
            raise ValueError(f"brickscope: max_delay_millis must be > 0, got {max_delay_millis!r}")
        if not sync_timeout_millis > 0:
            raise ValueError(f"brickscope: sync_timeout_millis must be > 0, got {sync_timeout_millis!r}")
        if step_sampling is not None and not isinstance(step_sampling, StepSampling):
            raise TypeError(f"brickscope: step_sampling must be a StepSampling, got {type(step_sampling).__name__}")
        if resolver not in RESOLVERS:
            raise ValueError(f"brickscope: unknown resolver {resolver!r}; expected one of {RESOLVERS}")
        self.sync_mode = sync_mode
        self.counters = Counters()
        self.recorder = Recorder(
            tracer_provider,
            sync_mode=sync_mode,
            timer=None if sync_mode == "none" else timer,
            max_pending=max_pending,
            max_delay_millis=max_delay_millis,
            propagate_context=propagate_context,
            time_kernels=time_kernels,
            counters=self.counters,
            sync=self.sync,
            sync_timeout_millis=sync_timeout_millis,
            step_sampling=step_sampling,
            aggregate_unsampled=aggregate_unsampled,
        )
        #: Unsampled bricks' sums between resolution batches (see ``_unsampled``).
        self.unsampled = UnsampledBricks(self.counters.values, keep_values=unsampled_values)
        if timer is None or sync_mode == "none":  # nothing to wait for: fold where they end
            self.recorder.fold_closed = self.unsampled.on_close
        self.recorder.poll_without_pending = unsampled_values  # kept values: handed over by time
        #: GC pauses inside sampled scopes, queued for the next sync point (``_overhead``).
        self.gc_pauses = GcPauses(self.counters.values, self.recorder) if host_intervals else None
        self._resolver = Resolver(
            self.recorder,
            SpanBuilder(tracer_provider, self.recorder, self.counters),
            Downstream(tracer_provider, self, self.counters),
            self.counters,
            self.unsampled,
            handover_interval_s=max_delay_millis / 1e3,
            intervals=HostIntervals(tracer_provider, self.recorder) if host_intervals else None,
            gc_pauses=self.gc_pauses,
        )
        if self.gc_pauses is not None:
            self.gc_pauses.install()
            self.recorder.step_cpu = {}
        self._shutdown = False
        self._worker: ResolverThread | None = None
        if resolver == "thread":
            recorder = self.recorder
            self._worker = ResolverThread(
                self.sync, max_delay_millis / 1e3, lambda: len(recorder.pending), recorder.arm_wake
            )
            self.recorder.hand_off(self._worker.wake)
            self._resolver.worker_ident = self._worker.start()
        self._provider = tracer_provider
        self._accounts: list[_delivery.Account] = []
        #: CPU ns of one record on this machine, calibrated once per process (an estimate:
        #: see ``_record_cost``); ``stats()["record_cpu_ns_estimated"]`` is records x this.
        self.record_ns = per_record_ns()

    @property
    def resolver(self) -> str:
        """``"inline"`` or ``"thread"``."""
        return "thread" if self._worker is not None else "inline"

    @property
    def timer(self) -> Any:
        """The GPU timer scopes are timed with, or None on the host clock."""
        return self.recorder.timer

    @property
    def clock(self) -> str:
        """``"cuda"`` or ``"host"``."""
        return self.recorder.clock

    def hand_over_unsampled(self) -> None:
        """Fold the unsampled bricks held here into the aggregators (at a metric collection)."""
        self._resolver.hand_over()

    def sync(
        self, block: bool = True, timeout_millis: float | None = None, streams: tuple = (), overhead: bool = True
    ) -> bool:
        """Resolve pending records into spans and emit them.

        With ``block`` the GPU is waited for (up to ``timeout_millis``); without it
        only the already-complete prefix is resolved. Returns True when nothing is
        left pending. Never raises. ``overhead``: a sync on an application thread that
        resolved something becomes an ``overhead`` span (see ``_overhead``).
        """
        return self._resolver.sync(block, timeout_millis, streams, overhead)

    # ---- SpanProcessor ---------------------------------------------------------

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        """Other instrumentation's spans: nothing to do."""

    def on_end(self, span: ReadableSpan) -> None:
        """Other instrumentation's spans: nothing to do."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Resolve and emit everything pending, waiting for the GPU up to the timeout."""
        return self.sync(block=True, timeout_millis=timeout_millis)

    def shutdown(self, timeout_millis: int = 30000) -> None:
        """Flush, then emit anything still unresolved with host timing; idempotent."""
        if self._shutdown:
            return
        self._shutdown = True
        if self._worker is not None:  # its batch in progress ends first; the rest is resolved here
            self._worker.stop(timeout_millis / 1e3)
        # Scopes still open now (brickscope reconfigured or shut down mid-scope) are
        # resolved one by one as they close, into the provider, instead of waiting
        # for a sync point that will not come.
        self.recorder.close_actions = (LATE,) * 4
        if not self.sync(block=True, timeout_millis=timeout_millis, overhead=False):  # the program is done
            self._resolver.emit_unresolved()
        if self.gc_pauses is not None:
            self.gc_pauses.remove()
        timer = self.recorder.timer
        if timer is not None:
            try:
                timer.close()
            except Exception:
                self.counters.log_once("timer_close", "brickscope: closing the GPU timer failed")

    # ---- introspection -----------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counters of everything this processor did: recorded, emitted, forced syncs, errors,
        and what became of the spans in the export pipelines (see ``_delivery``)."""
        self.recorder.flush_counts()  # the C recorder's scopes_unsampled, counted aside
        counts = dict(self.counters.values)
        counts["pending"] = len(self.recorder.pending)
        records = counts["spans_emitted"] + counts["span_build_errors"] + counts["scopes_unsampled"]
        counts["record_cpu_ns_estimated"] = int(records * self.record_ns)
        for key, value in _delivery.totals(self._accounts).items():
            counts[key] = counts.get(key, 0) + value
        return counts

    def track_deliveries(self) -> None:
        """Count what the provider's export pipelines deliver of our spans, from now on."""
        self._accounts = _delivery.wrap_exporters(self._provider)

    def close_deliveries(self) -> int:
        """Close the books (a shutdown deadline): what is still queued or being exported is
        counted lost. Returns how many."""
        return sum(account.close(hand_over=False) for account in self._accounts)

    def count(self, what: str) -> None:
        """Count one event of ``what``."""
        self.counters.add(what)

    def _forget_after_fork(self) -> None:
        """In a forked child: drop the parent's pending scopes and its CUDA state (CUDA
        does not survive fork); the child times on the host clock."""
        self.recorder.forget_after_fork()
        self._resolver.forget_after_fork()
        if self.gc_pauses is not None:
            self.gc_pauses.take()  # the parent's scopes
        self.unsampled.forget_after_fork()
        if self._worker is not None:  # threads do not survive fork: resolve inline
            self._worker = None
            self.recorder.resolve_inline(self.sync_mode)
