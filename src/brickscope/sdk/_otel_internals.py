# SPDX-License-Identifier: Apache-2.0
"""Every private OpenTelemetry SDK attribute brickscope's core reads or writes, under one policy.

brickscope plugs into the OpenTelemetry Python SDK's ``TracerProvider`` and
``MeterProvider``. A few things it needs have no public API (handing resolved spans to
the provider's processors, putting its processor first), and a few public paths cost
far more than the span they carry (a histogram value per ``record()``, a
``ReadableSpan.__init__`` per span). Each such access is a *fast path* declared here,
and no other module of the core touches an SDK private (tests/unit/test_layers.py
checks it). The one policy every fast path follows:

(a) **Checked releases.** Each fast path names the ``opentelemetry-sdk`` releases its
    private layout was read against and tested with (:data:`CHECKED`, by minor release,
    both ends included). Outside them a fast path whose fallback only costs speed is off;
    the two whose fallback loses a function (listing and ordering the provider's
    processors, below) let the probe decide and say, in one warning and in
    :func:`brickscope.implementations`, that they run on an unchecked release. The release is ``opentelemetry.sdk.version.__version__``
    (:data:`SDK_VERSION`); the API and the official exporters are released with the
    SDK and pinned to it, so one version covers the few API and OTLP exporter privates too.
(b) **A probe at first use.** The first time a fast path is asked, its probe checks the
    layout on the object at hand (the attributes exist, with the expected types or
    shape); the answer is kept for the process.
(c) **A fallback.** Outside the checked releases, or when the probe fails, the fast path
    is off and the public (reference) path runs: the same spans and counts, slower or
    with a weaker guarantee that the fast path's entry says.
(d) **One log line** per fast path turned off, naming it and why (INFO where only speed
    is lost, WARNING where a guarantee is weaker). Each fast path's state is in
    :func:`brickscope.implementations` as ``sdk.<name>``: ``"fast"``, or
    ``"reference"`` and the reason.

Two accesses have no public fallback at all, and a library should not guess there:

- ``sdk.span_processors``: brickscope builds ended spans itself and hands them to the
  provider's processors, as the SDK does when a span ends; the SDK has no public way to
  list them (``SynchronousMultiSpanProcessor._span_processors``). Without it brickscope
  could only drop its spans, so when the layout probe fails constructing its processor
  **raises** ``ValueError`` at configure time, saying which release is installed and
  which were checked. On a newer release whose layout still passes the probe it runs,
  with one warning: an SDK upgrade must not stop a program whose SDK still has the layout. Failing at
  setup is the SDK's own error policy; silently exporting nothing is not an option.
- ``sdk.processor_order`` *has* a fallback: brickscope's processor goes first so that
  the provider's ``force_flush``/``shutdown`` resolve pending scopes before the export
  processors flush. The SDK only appends (``add_span_processor``), so the fallback
  appends and logs that a provider-level flush or shutdown may miss what was pending
  (``brickscope``'s own ``session.shutdown()`` and ``sync()`` still deliver it); at
  shutdown the processors are then left on the provider, shut down, since the SDK
  cannot remove one either.

The SDK's configuration helpers (``opentelemetry.sdk._configuration``: exporter, sampler
and id-generator lookup by name, and ``_OTelSDKConfigurator``, the base class every
distro's configurator subclasses) are imported here too, so this module lists every
private name the core uses; they are used as the SDK's own distros use them, not read
around, and have no fast path.

The API layer (``brickscope._otel_context``) keeps its two reads of OpenTelemetry *API*
privates (the contextvars runtime's ``ContextVar``, ``_SPAN_KEY``): it must import
without the SDK, so it cannot import this module; it probes and falls back the same way.

Example::

    from brickscope.sdk import _otel_internals

    _otel_internals.install_first(provider, processor)   # first, or appended (and logged)
    for processor in _otel_internals.provider_processors(provider): ...
    brickscope.implementations()["sdk.batch_queue"]       # Implementation('fast', None)
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, StaticSampler
from opentelemetry.sdk.version import __version__ as _INSTALLED_SDK_VERSION
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode

from brickscope import native

try:  # the SDK's queue behind BatchSpanProcessor (1.34+); older SDKs: spans go one by one
    from opentelemetry.sdk._shared_internal import BatchProcessor as _SdkBatchProcessor
except ImportError:  # pragma: no cover - depends on the SDK version
    _SdkBatchProcessor = None

try:  # the metrics SDK's view storage and histogram aggregation (1.45 layout)
    from opentelemetry.sdk.metrics import MeterProvider as _SdkMeterProvider
    from opentelemetry.sdk.metrics._internal._view_instrument_match import _hash_attributes
    from opentelemetry.sdk.metrics._internal.aggregation import _ExplicitBucketHistogramAggregation
except ImportError:  # pragma: no cover - exercised only on other SDK versions
    _SdkMeterProvider = None  # type: ignore[assignment,misc]

try:  # the point that takes what is over the cardinality limit (1.45.2 has it; 1.45.0 has no limit)
    from opentelemetry.sdk.metrics._internal._view_instrument_match import _OVERFLOW_KEY
except ImportError:  # pragma: no cover - depends on the SDK version
    _OVERFLOW_KEY = None

try:  # the API's proxy instruments (what the global meter provider gives before an SDK is set)
    from opentelemetry.metrics._internal.instrument import _ProxyInstrument
except ImportError:  # pragma: no cover - depends on the API version
    _ProxyInstrument = None

# The SDK's configuration helpers, used as opentelemetry-distro uses them (no fast path).
from opentelemetry.sdk._configuration import (
    _get_exporter_names as get_exporter_names,
    _get_id_generator as get_id_generator,
    _get_sampler as get_sampler,
    _import_exporters as import_exporters,
    _import_id_generator as import_id_generator,
    _import_sampler as import_sampler,
    _OTelSDKConfigurator as SdkConfigurator,
)

logger = logging.getLogger(__name__)

__all__ = [
    "CHECKED",
    "PRIVATE_NAMES",
    "SDK_VERSION",
    "SdkConfigurator",
    "add_to_points",
    "batch_exporter",
    "batch_queues",
    "can_add_points",
    "enqueue",
    "get_exporter_names",
    "get_id_generator",
    "get_sampler",
    "import_exporters",
    "import_id_generator",
    "import_sampler",
    "install_first",
    "otlp_http_transport",
    "provider_processors",
    "proxy_without_sdk",
    "queue_fill",
    "readable_span_fields",
    "readable_span_type",
    "remove_processors",
    "require_span_processors",
    "sdk_batch_queue",
    "static_root_decision",
    "swap_batch_exporter",
    "update_provider_resource",
    "wake_worker",
]

#: The installed ``opentelemetry-sdk`` release, read once; tests set it to fake another one.
SDK_VERSION = _INSTALLED_SDK_VERSION

#: Fast path -> (oldest, newest) SDK minor release its private layout was checked on.
CHECKED: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    # SynchronousMultiSpanProcessor._span_processors (a tuple), unchanged 1.30 to 1.45.
    "sdk.span_processors": ((1, 30), (1, 45)),
    # ... and its _lock, replaced under which the tuple is rewritten.
    "sdk.processor_order": ((1, 30), (1, 45)),
    # BatchSpanProcessor._batch_processor: _shared_internal.BatchProcessor, new in 1.34.
    "sdk.batch_queue": ((1, 34), (1, 45)),
    # BatchProcessor._exporter (BatchSpanProcessor.span_exporter is a read-only property, which
    # the probe compares it with: 1.34 has no span_exporter yet; checked on 1.45).
    "sdk.batch_exporter": ((1, 45), (1, 45)),
    # ParentBased._root, StaticSampler._decision: unchanged 1.30 to 1.45.
    "sdk.static_sampler": ((1, 30), (1, 45)),
    # What ReadableSpan.__init__ stores (the C span maker writes the fields): 1.30 to 1.45.
    "sdk.readable_span": ((1, 30), (1, 45)),
    # TracerProvider._update_resource (1.45; the tracers handed out follow) or _resource.
    "sdk.resource_rewrite": ((1, 30), (1, 45)),
    # The metrics SDK's view storage and histogram aggregation: read and tested on 1.45 only
    # (1.45.0 has no cardinality-overflow point yet, 1.45.2 has).
    "sdk.histogram": ((1, 45), (1, 45)),
    # The metrics API's _ProxyInstrument._real_instrument: 1.30 to 1.45.
    "sdk.proxy_instrument": ((1, 30), (1, 45)),
    # opentelemetry-exporter-otlp-proto-http's exporter._client._transport (1.45, pinned to the SDK).
    "sdk.otlp_http_bytes": ((1, 45), (1, 45)),
}

#: Every private attribute name of an OpenTelemetry object that the core reads or
#: writes, all here (tests/unit/test_layers.py fails on any other module using one).
PRIVATE_NAMES = frozenset({
    "_active_span_processor", "_span_processors", "_batch_processor", "_exporter", "_max_queue_size",
    "_max_export_batch_size", "_worker_awaken", "_pid", "_root", "_decision", "_update_resource",
    "_measurement_consumer", "_reader_storages", "_get_or_init_view_instrument_match", "_attribute_keys",
    "_attributes_aggregation", "_boundaries", "_record_min_max", "_get_empty_bucket_counts",
    "_real_instrument", "_client", "_transport", "_instrumentation_info", "_instrumentation_scope",
    "_start_time", "_end_time",
})  # fmt: skip


def _release(version: str) -> tuple[int, int] | None:
    try:
        major, minor = version.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


class _FastPath:
    """One fast path's state: decided at first use (release, then probe), kept after."""

    def __init__(
        self,
        name: str,
        fallback: str,
        probe: Callable[[Any], str | None],
        level: int = logging.INFO,
        *,
        each: bool = False,
        probe_unchecked: bool = False,
    ) -> None:
        self.name = name
        self.fallback = fallback
        self.probe = probe
        self.level = level
        #: Probe every object asked about, not only the first (set-up paths: cheap, rare).
        self.each = each
        #: On a release outside CHECKED, let the probe decide (with a warning) instead of
        #: turning the path off: for paths whose fallback loses a function, not just speed.
        self.probe_unchecked = probe_unchecked
        self.on: bool | None = None

    def usable(self, subject: Any) -> bool:
        on = self.on
        if on is None or (on and self.each):
            on = self._decide(subject)
        return on

    def _decide(self, subject: Any) -> bool:
        (lo, hi) = CHECKED[self.name]
        release = _release(SDK_VERSION)
        unchecked = release is None or not lo <= release <= hi
        if unchecked and not self.probe_unchecked:
            reason = f"opentelemetry-sdk {SDK_VERSION} is outside the releases checked ({lo[0]}.{lo[1]}-{hi[0]}.{hi[1]})"
        else:
            try:
                reason = self.probe(subject)
            except Exception as exc:  # any surprise is a failed probe
                reason = f"layout probe failed: {type(exc).__name__}: {exc}"
        if reason is None and unchecked:
            self.on = True
            note = (
                f"opentelemetry-sdk {SDK_VERSION} is outside the releases checked ({lo[0]}.{lo[1]}-{hi[0]}.{hi[1]}); "
                "its layout probe passed"
            )
            if native.implementations().get(self.name) != native.Implementation("fast", note):
                native.note(self.name, "fast", note)
                logger.warning("brickscope: fast path %s on an unchecked release: %s", self.name, note)
            return True
        if reason is None:
            self.on = True
            native.note(self.name, "fast")
        else:
            self.on = False
            native.note(self.name, "reference", reason)
            logger.log(self.level, "brickscope: fast path %s off: %s; %s", self.name, reason, self.fallback)
        return self.on

    def reset(self) -> None:
        """Forget the decision (tests: after faking another release or layout)."""
        self.on = None
        native._parts.pop(self.name, None)  # brickscope's own register


def _missing(obj: Any, fields: Sequence[str]) -> str | None:
    absent = [field for field in fields if not hasattr(obj, field)]
    return f"layout probe failed: {type(obj).__name__} has no {', '.join(absent)}" if absent else None


# --- the provider's span processors ------------------------------------------------------


def _probe_span_processors(provider: Any) -> str | None:
    multi = getattr(provider, "_active_span_processor", None)
    if multi is None:
        return "layout probe failed: TracerProvider has no _active_span_processor"
    if not isinstance(getattr(multi, "_span_processors", None), tuple):
        return f"layout probe failed: {type(multi).__name__}._span_processors is not a tuple"
    return None


def _probe_processor_order(provider: Any) -> str | None:
    problem = _probe_span_processors(provider)
    if problem is not None:
        return problem
    if not isinstance(getattr(provider._active_span_processor, "_lock", None), _LOCK_TYPES):
        return f"layout probe failed: {type(provider._active_span_processor).__name__}._lock is not a lock"
    return None


_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


_span_processors = _FastPath(
    "sdk.span_processors", "brickscope cannot hand its spans to the provider's processors", _probe_span_processors,
    logging.ERROR, each=True, probe_unchecked=True,
)  # fmt: skip
_processor_order = _FastPath(
    "sdk.processor_order",
    "brickscope's processor is appended with add_span_processor: a provider-level force_flush or shutdown "
    "may miss scopes still pending (brickscope's sync() and session.shutdown() deliver them), and it stays "
    "on the provider after its session ends",
    _probe_processor_order,
    logging.WARNING,
    each=True,
    probe_unchecked=True,
)


def require_span_processors(provider: TracerProvider) -> None:
    """Check, at setup, that brickscope can hand spans to ``provider``'s processors.

    Raises:
        ValueError: this SDK release was not checked, or its layout is not the one
            known; the SDK has no public way to list a provider's processors.
    """
    if not _span_processors.usable(provider):
        raise ValueError(
            f"brickscope: cannot hand spans to the TracerProvider's span processors "
            f"({native.implementations()['sdk.span_processors'].reason}); the OpenTelemetry SDK has no "
            "public way to list them: install an opentelemetry-sdk release brickscope was checked with"
        )


def provider_processors(provider: TracerProvider) -> tuple:
    """The provider's processors in order (the SDK keeps them in a private tuple); empty
    when :func:`require_span_processors` refused (it probed this provider at set-up)."""
    if _span_processors.on is False:
        return ()
    return provider._active_span_processor._span_processors


def install_first(provider: TracerProvider, processor: SpanProcessor) -> None:
    """Put ``processor`` in front of the provider's processors (the SDK only appends); on
    the reference path, append it with the public ``add_span_processor``."""
    if not _processor_order.usable(provider):
        provider.add_span_processor(processor)
        return
    multi = provider._active_span_processor
    with multi._lock:
        multi._span_processors = (processor,) + multi._span_processors


def remove_processors(provider: TracerProvider, processors: tuple) -> None:
    """Take ``processors`` off the provider; on the reference path (the SDK cannot remove
    one) they stay there, shut down by their session."""
    if not _processor_order.usable(provider):
        return
    multi = provider._active_span_processor
    with multi._lock:
        multi._span_processors = tuple(p for p in multi._span_processors if p not in processors)


# --- BatchSpanProcessor's queue and exporter -----------------------------------------------

_QUEUE_FIELDS = ("_queue", "_max_queue_size", "_max_export_batch_size", "_worker_awaken", "_shutdown", "_pid")


def _probe_batch_queue(processor: Any) -> str | None:
    if _SdkBatchProcessor is None:
        return "layout probe failed: no opentelemetry.sdk._shared_internal.BatchProcessor"
    batch = getattr(processor, "_batch_processor", None)
    if not isinstance(batch, _SdkBatchProcessor):
        return "layout probe failed: BatchSpanProcessor._batch_processor is not the SDK's BatchProcessor"
    problem = _missing(batch, _QUEUE_FIELDS)
    if problem is None and not (hasattr(batch._queue, "extendleft") and isinstance(batch._max_queue_size, int)):
        problem = "layout probe failed: BatchProcessor._queue is not a deque with an int capacity"
    return problem


def _probe_batch_exporter(processor: Any) -> str | None:
    problem = _probe_batch_queue(processor)
    if problem is None and processor._batch_processor._exporter is not processor.span_exporter:
        problem = "layout probe failed: BatchProcessor._exporter is not the processor's span_exporter"
    return problem


_batch_queue = _FastPath(
    "sdk.batch_queue",
    "spans go to BatchSpanProcessor.on_end one by one, and sync points do not pace against its queue",
    _probe_batch_queue,
)
_batch_exporter = _FastPath(
    "sdk.batch_exporter",
    "BatchSpanProcessor pipelines are left out of brickscope's delivery counts",
    _probe_batch_exporter,
    logging.WARNING,
)


def _is_sdk_batch(processor: Any) -> bool:
    return isinstance(processor, BatchSpanProcessor) and hasattr(processor, "_batch_processor")


def batch_queues(provider: TracerProvider) -> list[Any]:
    """The SDK batch processors' queues (their private BatchProcessor) among the
    provider's processors, for :func:`queue_fill` and :func:`wake_worker`."""
    return [
        processor._batch_processor
        for processor in provider_processors(provider)
        if _is_sdk_batch(processor) and _batch_queue.usable(processor)
    ]


def queue_fill(batch: Any) -> tuple[int, int]:
    """(spans queued, capacity) of a queue from :func:`batch_queues`."""
    return len(batch._queue), batch._max_queue_size


def wake_worker(batch: Any) -> None:
    """Wake the export worker of a queue from :func:`batch_queues`."""
    batch._worker_awaken.set()


def sdk_batch_queue(processor: SpanProcessor) -> Any:
    """The SDK's BatchProcessor behind ``processor`` when its ``on_end`` is the SDK
    BatchSpanProcessor's (sampled spans go to ``emit``) and the queue is the SDK's own
    (``emit`` not overridden, every field :func:`enqueue` reads there); else None."""
    if _SdkBatchProcessor is None or type(processor).on_end is not BatchSpanProcessor.on_end:
        return None
    batch = getattr(processor, "_batch_processor", None)
    if type(batch).emit is not _SdkBatchProcessor.emit or not all(hasattr(batch, f) for f in _QUEUE_FIELDS):
        return None
    if not _batch_queue.usable(processor):
        return None
    return batch


def enqueue(batch: Any, spans: list) -> bool:
    """Append sampled spans to an SDK BatchProcessor's queue in one step, as its ``emit``
    does one at a time (``appendleft``; the worker woken once the queue holds a batch).
    Only when every span fits: a full queue, a processor shut down, or a forked child
    returns False, and the caller hands the spans over one by one so that the SDK logs,
    counts and drops them itself."""
    queue = batch._queue
    if batch._shutdown or batch._pid != os.getpid() or len(spans) > batch._max_queue_size - len(queue):
        return False
    queue.extendleft(spans)
    if len(queue) >= batch._max_export_batch_size and not batch._worker_awaken.is_set():
        batch._worker_awaken.set()
    return True


def batch_exporter(processor: SpanProcessor) -> Any:
    """The exporter of an SDK BatchSpanProcessor, or None (not one, or the fast path off)."""
    if not _is_sdk_batch(processor) or not _batch_exporter.usable(processor):
        return None
    return processor._batch_processor._exporter


def swap_batch_exporter(processor: SpanProcessor, wrap: Callable[[Any, Any], tuple[Any, Any]]) -> Any:
    """Replace an SDK BatchSpanProcessor's exporter by ``wrap(exporter, queue)[0]`` (the
    SDK has no setter) and return ``wrap``'s second value; None, nothing done, where the
    fast path is off or ``processor`` is not one."""
    if not _is_sdk_batch(processor) or not _batch_exporter.usable(processor):
        return None
    batch = processor._batch_processor
    batch._exporter, result = wrap(batch._exporter, batch._queue)
    return result


# --- a static sampler's decision -----------------------------------------------------------


def _probe_static_sampler(sampler: Any) -> str | None:
    if isinstance(sampler, ParentBased) and not hasattr(sampler, "_root"):
        return "layout probe failed: ParentBased has no _root"
    if isinstance(sampler, ParentBased):
        sampler = sampler._root
    if isinstance(sampler, StaticSampler) and not isinstance(getattr(sampler, "_decision", None), Decision):
        return "layout probe failed: StaticSampler._decision is not a Decision"
    return None


_static_sampler = _FastPath(
    "sdk.static_sampler", "the sampler is asked at every root scope", _probe_static_sampler
)


def static_root_decision(sampler: Any) -> bool | None:
    """The decision for a root span when the sampler's answer cannot depend on the span;
    None: ask the sampler (any other sampler, or the fast path off)."""
    if not isinstance(sampler, (ParentBased, StaticSampler)) or not _static_sampler.usable(sampler):
        return None
    if isinstance(sampler, ParentBased):
        sampler = getattr(sampler, "_root", None)
    if isinstance(sampler, StaticSampler):
        return getattr(sampler, "_decision", None) == Decision.RECORD_AND_SAMPLE
    return None


# --- what ReadableSpan.__init__ stores -----------------------------------------------------

#: What ReadableSpan.__init__ stores, in its order (the C span maker's ``F_*``).
READABLE_SPAN_FIELDS = (
    "_name", "_context", "_kind", "_instrumentation_info", "_instrumentation_scope", "_parent", "_start_time",
    "_end_time", "_attributes", "_events", "_links", "_resource", "_status",
)  # fmt: skip


class SlottedReadableSpan(ReadableSpan):
    """The spans brickscope builds: a ``ReadableSpan`` whose fields are slots.

    probe = ReadableSpan(
        name="n", context=context, parent=None, resource=resource, attributes={"a": 1}, events=(),
        kind=SpanKind.INTERNAL, status=status, start_time=1, end_time=2, instrumentation_scope=scope,
    )  # fmt: skip
    ``ReadableSpan.__init__`` and every property read them as on a ``ReadableSpan`` (the
    same names: exporters, ``to_json`` and ``copy`` see the same span), but they
    are struct members rather than entries of an instance dict: the C span maker stores
    each with one pointer write (13 attribute stores through the interpreter before), and
    an exporter tells brickscope's spans from the application's by their type alone.
    Used only where :func:`readable_span_type`'s probe passes.
    """

    __slots__ = READABLE_SPAN_FIELDS


def _probe_readable_span(scope: Any) -> str | None:
    status = Status(StatusCode.UNSET)
    context = SpanContext(0x1234, 0x5678, False)
    resource = object()
    expected = ("n", context, SpanKind.INTERNAL, None, scope, None, 1, 2, {"a": 1}, (), (), resource, status)
    if ReadableSpan.__new__ is not object.__new__:
        return "layout probe failed: ReadableSpan has its own __new__"
    plain, slotted = (
        span_type(
            name="n", context=context, parent=None, resource=resource, attributes={"a": 1}, events=(),
            kind=SpanKind.INTERNAL, status=status, start_time=1, end_time=2, instrumentation_scope=scope,
        )
        for span_type in (ReadableSpan, SlottedReadableSpan)
    )  # fmt: skip
    fields = dict(zip(READABLE_SPAN_FIELDS, expected))
    if vars(plain) != fields:
        return "layout probe failed: ReadableSpan.__init__ stores other fields"
    # an unset slot raises AttributeError here: a failed probe
    if vars(slotted) or {f: getattr(slotted, f) for f in READABLE_SPAN_FIELDS} != fields:
        return "layout probe failed: ReadableSpan.__init__ stores fields outside SlottedReadableSpan's slots"
    return None


_readable_span = _FastPath(
    "sdk.readable_span", "spans are built with ReadableSpan(...) in Python", _probe_readable_span
)


def readable_span_fields(instrumentation_scope: Any) -> tuple[str, ...] | None:
    """The fields ``ReadableSpan.__init__`` stores, in order, when a span may be made by
    writing them into a :class:`SlottedReadableSpan` (the C span maker); None: call
    ``ReadableSpan(...)``."""
    return READABLE_SPAN_FIELDS if _readable_span.usable(instrumentation_scope) else None


def readable_span_type(instrumentation_scope: Any) -> type[ReadableSpan]:
    """The class brickscope's spans are made of: :class:`SlottedReadableSpan` where the
    layout probe passes, else ``ReadableSpan`` itself."""
    return SlottedReadableSpan if _readable_span.usable(instrumentation_scope) else ReadableSpan


# --- the provider's resource ---------------------------------------------------------------


def _probe_resource(provider: Any) -> str | None:
    if callable(getattr(provider, "_update_resource", None)) or isinstance(getattr(provider, "_resource", None), Resource):
        return None
    return "layout probe failed: TracerProvider has neither _update_resource nor a _resource"


_resource_rewrite = _FastPath(
    "sdk.resource_rewrite",
    "the tracer provider's resource is left as built (no GPU device names or kernel sources on it)",
    _probe_resource,
    logging.WARNING,
    each=True,
)


def update_provider_resource(provider: TracerProvider, resource: Resource) -> bool:
    """Merge ``resource`` into the provider's (its values win); False where the fast path
    is off and the provider's resource is unchanged (the SDK has no public setter)."""
    if not _resource_rewrite.usable(provider):
        return False
    update = getattr(provider, "_update_resource", None)
    if update is not None:  # 1.45: also updates the tracers handed out
        update(resource)
    else:  # older SDKs keep the resource in a private attribute only
        provider._resource = provider.resource.merge(resource)
    return True


# --- the metrics SDK: pre-aggregated histogram points ----------------------------------------


def _probe_histogram(meter_provider: Any) -> str | None:
    if _SdkMeterProvider is None:
        return "layout probe failed: the metrics SDK's _internal modules are not the ones known"
    storages = meter_provider._measurement_consumer._reader_storages
    if not isinstance(storages, dict):
        return "layout probe failed: the measurement consumer's _reader_storages is not a dict"
    for storage in storages.values():
        if not callable(getattr(storage, "_get_or_init_view_instrument_match", None)):
            return "layout probe failed: a reader storage has no _get_or_init_view_instrument_match"
    return None


_histogram = _FastPath(
    "sdk.histogram", "the duration histogram records every value through Histogram.record", _probe_histogram
)


def _matches(meter_provider: Any, instrument: Any) -> list[list[Any]]:
    """The instrument's view matches in every reader storage (created if not yet)."""
    storages = meter_provider._measurement_consumer._reader_storages
    return [storage._get_or_init_view_instrument_match(instrument) for storage in storages.values()]


def _eligible(match: Any, bounds: Sequence[float]) -> bool:
    aggregation = match._aggregation  # the view's aggregation template
    return (
        type(aggregation) is _ExplicitBucketHistogramAggregation
        and tuple(aggregation._boundaries) == tuple(bounds)
        and match._view._attribute_keys is None
    )


def can_add_points(meter_provider: Any, instrument: Any, bounds: Sequence[float]) -> bool:
    """Whether pre-aggregated values of ``instrument`` can be added exactly to the SDK's
    points (:func:`add_to_points`): every aggregation the instrument feeds is an
    explicit-bucket histogram with ``bounds`` and no attribute filter. False on anything
    else (another view, another reader preference, the fast path off): record per value.

    The public API takes one value per ``record()`` (about 5 us each in SDK 1.45);
    brickscope aggregates its duration histogram itself and, once per collection,
    records one value per (labels, bucket) through the public API, so views, exemplars
    and aggregation creation stay the SDK's, then adds the bucket's other values here.
    """
    if _SdkMeterProvider is not None and not isinstance(meter_provider, _SdkMeterProvider):
        return False
    if not _histogram.usable(meter_provider):  # also where the metrics SDK's modules are not the known ones
        return False
    try:
        return all(_eligible(match, bounds) for matches in _matches(meter_provider, instrument) for match in matches)
    except Exception:  # a layout the probe did not catch: per value
        logger.debug("brickscope: the metrics SDK's layout is not the one known; histogram values recorded one by one")
        return False


def add_to_points(
    meter_provider: Any,
    instrument: Any,
    labels: dict[str, str],
    counts: Sequence[int],
    sum_s: float,
    min_s: float,
    max_s: float,
) -> bool:
    """Add ``counts`` (one per bucket), their sum, min and max to the points of ``labels``
    that a ``record()`` of the same labels just created or updated, in every reader.
    Returns False (nothing added to that reader) where the layout is not the eligible one."""
    ok = True
    key = _hash_attributes(dict(labels))
    for matches in _matches(meter_provider, instrument):
        for match in matches:
            if type(match._aggregation) is not _ExplicitBucketHistogramAggregation:
                ok = False
                continue
            points = match._attributes_aggregation
            aggregation = points.get(key)
            if aggregation is None and _OVERFLOW_KEY is not None:
                aggregation = points.get(_OVERFLOW_KEY)
            if aggregation is None or len(aggregation._boundaries) + 1 != len(counts):
                ok = False
                continue
            with aggregation._lock:
                if aggregation._value is None:  # collected meanwhile (delta): a fresh period
                    aggregation._value = aggregation._get_empty_bucket_counts()
                value = aggregation._value
                for index, count in enumerate(counts):
                    value[index] += count
                aggregation._sum += sum_s
                if aggregation._record_min_max:
                    aggregation._min = min(aggregation._min, min_s)
                    aggregation._max = max(aggregation._max, max_s)
    return ok


# --- the metrics API's proxy instruments -----------------------------------------------------


def _probe_proxy(histogram: Any) -> str | None:
    if _ProxyInstrument is None:
        return "layout probe failed: no opentelemetry.metrics._internal.instrument._ProxyInstrument"
    if isinstance(histogram, _ProxyInstrument) and not hasattr(histogram, "_real_instrument"):
        return "layout probe failed: _ProxyInstrument has no _real_instrument"
    return None


_proxy_instrument = _FastPath(
    "sdk.proxy_instrument",
    "values go to the global meter provider's proxy histogram even while no SDK is behind it",
    _probe_proxy,
)


def proxy_without_sdk(histogram: Any) -> bool:
    """Whether ``histogram`` is the API's proxy instrument with no SDK behind it yet
    (recording into it does nothing); False where that cannot be told."""
    if _ProxyInstrument is None or not isinstance(histogram, _ProxyInstrument):
        return False
    return _proxy_instrument.usable(histogram) and not histogram._real_instrument


# --- the OTLP/HTTP exporter's transport (bytes sent) -----------------------------------------


def _probe_otlp_http(exporter: Any) -> str | None:
    transport = getattr(getattr(exporter, "_client", None), "_transport", None)
    if transport is None or not callable(getattr(transport, "request", None)):
        return "layout probe failed: the OTLP/HTTP exporter has no _client._transport with request()"
    return None


_otlp_http_bytes = _FastPath(
    "sdk.otlp_http_bytes", "the bytes the OTLP/HTTP exporter sends are not reported", _probe_otlp_http
)


def otlp_http_transport(exporter: Any, wrap: Callable[[Any], Any]) -> Any:
    """The transport of the official OTLP/HTTP exporter (or a subclass), replaced once by
    ``wrap(transport)`` unless ``wrap`` made it (``isinstance`` of its class); None where
    it is not that exporter, or the fast path is off."""
    if not any(cls.__module__.startswith("opentelemetry.exporter.otlp.proto.http") for cls in type(exporter).__mro__):
        return None
    if not _otlp_http_bytes.usable(exporter):
        return None
    client = exporter._client
    transport = client._transport
    if transport is None or not callable(getattr(transport, "request", None)):
        return None  # this exporter's own layout: not knowable
    wrapped = wrap(transport)
    if wrapped is not transport:
        client._transport = wrapped
    return wrapped


#: Every fast path, by name (tests reset them after faking a release or a layout).
FAST_PATHS = {
    path.name: path
    for path in (
        _span_processors, _processor_order, _batch_queue, _batch_exporter, _static_sampler, _readable_span,
        _resource_rewrite, _histogram, _proxy_instrument, _otlp_http_bytes,
    )
}  # fmt: skip
