# SPDX-License-Identifier: Apache-2.0
"""SpanBuilder: turns a resolved record into an ended ``ReadableSpan``.

The OTel SDK freezes a span before any processor can add to it
(opentelemetry-python#5614), and an SDK span costs 7-11 us to create, so
brickscope builds ``ReadableSpan`` objects directly once a record's timing is
known: GPU events or the host clock, the brickscope attributes, self time, the
real parent ids and the provider's resource. Ordinary records are built in C
(``brickscope._hotpath.SpanMaker``, ~1 us a span with everything around it on the
host clock); :meth:`SpanBuilder.build_py` is the reference and takes the rest.

Example::

    span, attributes, row = builder.build(rec)   # rec ended, its GPU events complete
"""

from __future__ import annotations

import logging
import random
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import DEFAULT_TRACE_STATE, SpanContext, SpanKind, Status, StatusCode

from brickscope import _catalog, _kernel_sources, _otel_context, native
from brickscope._clock import EPOCH_OFFSET_NS
from brickscope._record import KIND_BRICK, KIND_KERNEL, KIND_LAYER, KIND_NAMES, KIND_STEP, Record, hotpath
from brickscope.sdk import _otel_internals
from brickscope.sdk.trace._counters import Counters
from brickscope.sdk.trace._unsampled import self_time
from brickscope.trace import attributes as attribute_keys
from brickscope.trace.attributes import (
    BRICK_CATEGORY,
    BRICK_ELEMENTS,
    BRICK_NAME,
    BRICK_SELF_DURATION_NS,
    CLOCK,
    CLOCK_CUDA,
    CLOCK_GPU,
    CLOCK_HOST,
    GPU_DEVICE_ID,
    GPU_DURATION_NS,
    GPU_STREAM_ID,
    GPU_TIMING_ERROR,
    HOST_DURATION_NS,
    HOST_START_NS,
    KERNEL_NAME,
    KERNEL_SOURCE_HASH,
    LAYER_INDEX,
    SCOPE_KIND,
    STEP_NUMBER,
    THREAD_ID,
    THREAD_NAME,
    TILE_COUNT,
    TILE_DURATION_NS,
    TILE_ELEMENTS,
)
from brickscope.version import __version__

logger = logging.getLogger(__name__)
_UNSET = Status(StatusCode.UNSET)
#: The instrumentation scope of every span brickscope builds (one object: identity tells ours).
INSTRUMENTATION_SCOPE = InstrumentationScope("brickscope", __version__)
#: The class of every span brickscope builds: ``SlottedReadableSpan`` (its type tells
#: brickscope's spans from the application's), or ReadableSpan where its probe fails.
SPAN_TYPE = _otel_internals.readable_span_type(INSTRUMENTATION_SCOPE)


class SpanBuilder:
    """Builds the spans of one recorder's records, for one provider."""

    def __init__(self, tracer_provider: TracerProvider, recorder: Any, counters: Counters) -> None:
        self._recorder = recorder  # its timer: None after a fork
        self._provider = tracer_provider  # its resource is read per span (per drain in C): the kernel source registry updates it
        self._id_generator = tracer_provider.id_generator
        self._counts = counters.values
        maker = _span_maker(self)
        #: :meth:`build`'s common case in C (``brickscope._hotpath.SpanMaker.build``), or None.
        self._fast = None if maker is None else maker.build
        #: The resolver's loop over such records in C (``SpanMaker.drain``), or None.
        self.drain = None if maker is None else maker.drain

    def _gpu_interval(self, rec: Record) -> tuple[int, int] | None:
        """(start, end) epoch ns of rec's GPU work, or None with rec.gpu_error set.
        Releases rec's events either way."""
        timer = self._recorder.timer
        try:
            if rec.end_mark < 0:
                rec.gpu_error = rec.gpu_error or "mark_failed"
            elif rec.gpu_error is None:
                marker = getattr(timer, "_marker", None)  # the same in C (brickscope._hotpath), or None
                interval = None if marker is None else marker.interval(rec.start_mark, rec.end_mark)
                if interval is not None:
                    return interval
                start = timer.host_time_ns(rec.start_mark)
                return start, start + timer.elapsed_ns(rec.start_mark, rec.end_mark)
        except Exception as exc:
            rec.gpu_error = getattr(exc, "code_name", type(exc).__name__)
        finally:
            timer.release(rec.start_mark)
            timer.release(rec.end_mark)
        return None

    def build(self, rec: Record) -> tuple[ReadableSpan, dict[str, Any], tuple]:
        """The ended span for a resolved record, its attributes (a plain dict), and its
        row for the live report's table (a :data:`brickscope.offline.SpanRecord`'s fields:
        name, start, end, span id, parent span id or 0, resource, attributes).

        An ordinary record (no notes from user code, no exception, not a ``record_gpu``
        brick) is built in C when the accelerator is there; the C side answers None for
        anything else before touching the record, and :meth:`build_py` (the reference)
        builds it."""
        fast = self._fast
        if fast is not None:
            built = fast(rec)
            if built is not None:
                return built
        return self.build_py(rec)

    def build_py(self, rec: Record) -> tuple[ReadableSpan, dict[str, Any], tuple]:
        """:meth:`build` in Python: the reference, and every record the C side leaves."""
        owner = rec.owner
        kind = owner._kind
        host_start = rec.host_start + EPOCH_OFFSET_NS
        host_duration = rec.host_end - rec.host_start
        attributes: dict[str, Any] = {
            SCOPE_KIND: KIND_NAMES[kind],
            HOST_START_NS: host_start,
            HOST_DURATION_NS: host_duration,
            THREAD_ID: rec.thread_id,
            THREAD_NAME: rec.thread_name,
        }
        start, end = host_start, host_start + host_duration
        clock = CLOCK_HOST
        if rec.start_mark >= 0:
            interval = self._gpu_interval(rec)
            if interval is not None:
                start, end = interval
                clock = CLOCK_CUDA
                attributes[GPU_DURATION_NS] = end - start
                attributes[GPU_DEVICE_ID] = rec.stream.device
                attributes[GPU_STREAM_ID] = rec.stream.handle
        elif owner._external:
            # bs.record_gpu: a GPU interval measured elsewhere, on the host epoch timeline.
            start, end = rec.gpu_first, rec.gpu_last
            clock = CLOCK_GPU
            attributes[GPU_DURATION_NS] = end - start
            attributes[GPU_DEVICE_ID] = owner._device_id
            attributes[GPU_STREAM_ID] = owner._stream_id
        elif rec.gpu_first:
            # A step or layer: the extent of the GPU work timed inside it.
            start, end = rec.gpu_first, rec.gpu_last
            clock = CLOCK_CUDA
            attributes[GPU_DURATION_NS] = end - start
        if clock == CLOCK_CUDA and rec.link is not None:
            _widen_extent(rec.link, start, end)
        if rec.gpu_error is not None:
            attributes[GPU_TIMING_ERROR] = rec.gpu_error
            self._counts["gpu_timing_errors"] += 1
        attributes[CLOCK] = clock
        brick, layer_index, step_number = _enclosing(rec)
        if brick is not None:
            attributes[BRICK_NAME] = brick.name
            attributes[BRICK_CATEGORY] = brick.category
        if layer_index is not None:
            attributes[LAYER_INDEX] = layer_index
        if step_number is not None:
            attributes[STEP_NUMBER] = step_number
        if kind == KIND_BRICK:
            attributes[BRICK_SELF_DURATION_NS] = self_time(rec, end - start, self._counts)
            if owner._elements:
                attributes[BRICK_ELEMENTS] = owner._elements
        elif kind == KIND_KERNEL:
            attributes[KERNEL_NAME] = owner._name
            source = _kernel_sources.hash_of(owner._name)
            if source is not None:
                attributes[KERNEL_SOURCE_HASH] = f"{source:016x}"
        if owner._attributes:
            attributes.update(owner._attributes)
        events: tuple[Event, ...] = ()
        status = _UNSET
        if rec.notes is not None:
            events, status = _apply_notes(rec.notes, attributes)

        parent = rec.parent
        parent_context = self._span_context(parent) if parent is not None else rec.otel_parent
        if rec.error is not None:
            type_name, message, stacktrace = rec.error
            events += (
                Event(
                    "exception",
                    {
                        "exception.type": type_name,
                        "exception.message": message,
                        "exception.stacktrace": stacktrace,
                        "exception.escaped": True,
                    },
                    timestamp=rec.host_end + EPOCH_OFFSET_NS,
                ),
            )
            status = Status(StatusCode.ERROR, f"{type_name}: {message}")
        context = self._span_context(rec)
        resource = self._provider.resource
        span = SPAN_TYPE(
            name=owner._name,
            context=context,
            parent=parent_context,
            resource=resource,
            attributes=attributes,
            events=events,
            kind=SpanKind.INTERNAL,
            status=status,
            start_time=start,
            end_time=end,
            instrumentation_scope=INSTRUMENTATION_SCOPE,
        )
        parent_id = parent_context.span_id if parent_context is not None else 0
        return span, attributes, (owner._name, start, end, context.span_id, parent_id, resource, attributes)

    def measure(self, rec: Record) -> tuple[str, str | None, int, int]:
        """What the metrics need of an unsampled brick, without building its span:
        (brick name, category as recorded, self time ns, elements). Times it as
        :meth:`build` would (GPU events, else the host clock) and credits its enclosing
        brick the same way."""
        owner = rec.owner
        duration = rec.host_end - rec.host_start
        if rec.start_mark >= 0:
            interval = self._gpu_interval(rec)
            if interval is not None:
                duration = interval[1] - interval[0]
        elif owner._external:
            duration = rec.gpu_last - rec.gpu_first
        if rec.gpu_error is not None:
            self._counts["gpu_timing_errors"] += 1
        return owner._name, owner._category, self_time(rec, duration, self._counts), owner._elements

    def _span_context(self, rec: Record) -> SpanContext:
        """rec's SpanContext, made once: siblings share their parent's."""
        context = rec.span_context
        if context is None:
            span_id = _otel_context.assign_span_id(rec, self._id_generator)
            context = rec.span_context = _otel_context.sampled_context(rec.trace_id, span_id)
        return context


#: The attribute keys SpanMaker writes, by their constants' names in trace/attributes.py, in
#: its slot order; the C side checks them by name (``SPAN_KEYS`` in _hotpath_c/spans.c).
_MAKER_KEY_NAMES = (
    "SCOPE_KIND", "HOST_START_NS", "HOST_DURATION_NS", "THREAD_ID", "THREAD_NAME", "GPU_DURATION_NS",
    "GPU_DEVICE_ID", "GPU_STREAM_ID", "GPU_TIMING_ERROR", "CLOCK", "BRICK_NAME", "BRICK_CATEGORY", "LAYER_INDEX",
    "STEP_NUMBER", "BRICK_SELF_DURATION_NS", "BRICK_ELEMENTS", "KERNEL_NAME", "KERNEL_SOURCE_HASH",
)  # fmt: skip
_MAKER_KEYS = tuple(getattr(attribute_keys, name) for name in _MAKER_KEY_NAMES)
#: What ReadableSpan.__init__ stores, in its order (``F_*``), or None where the C maker may
#: not write them (the ``sdk.readable_span`` fast path, probed in _otel_internals).
_SPAN_FIELDS = _otel_internals.readable_span_fields(INSTRUMENTATION_SCOPE) if hotpath is not None else None


def _key_mismatch(names: Any) -> str | None:
    """Why the C span maker's key table (``SPAN_KEYS``) is not :data:`_MAKER_KEY_NAMES`, or None."""
    names = tuple(names)
    for i, (mine, theirs) in enumerate(zip(_MAKER_KEY_NAMES, names)):
        if mine != theirs:
            return f"its span key {i} is {theirs}, sdk/trace/_spans.py has {mine}"
    if len(names) != len(_MAKER_KEY_NAMES):
        return f"it writes {len(names)} span keys, sdk/trace/_spans.py {len(_MAKER_KEY_NAMES)}"
    return None


_MAKER_USABLE = (
    hotpath is not None
    and hasattr(hotpath, "SpanMaker")
    and _otel_context.sampled_context is _otel_context._fast_sampled_context
    and _SPAN_FIELDS is not None
)
if _MAKER_USABLE and (_mismatch := _key_mismatch(hotpath.SPAN_KEYS)) is not None:
    # a C build whose key table is not this Python's: the Python builder makes every span
    native.refuse("brickscope._hotpath.SpanMaker", _mismatch)
    _MAKER_USABLE = False


def _span_maker(builder: SpanBuilder) -> Any:
    """The C span maker for this builder, or None (pure Python, or an SDK whose
    ReadableSpan or SpanContext is not what the C side makes)."""
    if not _MAKER_USABLE:
        return None
    generator = builder._id_generator
    # RandomIdGenerator's span ids are random.getrandbits(64) (non-zero): drawn in C under
    # assign_span_id's lock; any other generator is called through assign_span_id.
    random_ids = type(generator) is RandomIdGenerator and type(generator).generate_span_id is RandomIdGenerator.generate_span_id
    try:
        maker = hotpath.SpanMaker(
            span_type=SPAN_TYPE, context_type=SpanContext, key_names=_MAKER_KEY_NAMES, keys=_MAKER_KEYS,
            fields=_SPAN_FIELDS, clock_host=CLOCK_HOST, clock_cuda=CLOCK_CUDA, epoch=EPOCH_OFFSET_NS,
            counts=builder._counts, gpu_interval=builder._gpu_interval,
            resolved=_catalog._resolved, resolve=_catalog.resolve, hash_of=_kernel_sources.hash_of,
            sampled=_otel_context.SAMPLED, trace_state=DEFAULT_TRACE_STATE, span_kind=SpanKind.INTERNAL,
            status=_UNSET, scope=INSTRUMENTATION_SCOPE, getrandbits=random.getrandbits if random_ids else None,
            id_lock=_otel_context._id_lock, assign_span_id=_otel_context.assign_span_id,
            id_generator=generator, provider=builder._provider, recorder=builder._recorder,
        )  # fmt: skip
    except Exception:  # an accelerator that does not fit: the Python builder
        logger.warning("brickscope: the C span builder could not be set up; spans are built in Python", exc_info=True)
        return None
    return maker


def _apply_notes(notes: Any, attributes: dict[str, Any]) -> tuple[tuple[Event, ...], Status]:
    """Put what user code added to an open scope (``_scope_data.ScopeNotes``) on its span:
    attributes (brickscope's own ``brickscope.*`` values win: analysis depends on them),
    events in the order added, and the status it set."""
    for key, value in notes.attributes.items():
        if key not in attributes or not key.startswith("brickscope."):
            attributes[key] = value
    if notes.tiles:
        for level, (count, duration_ns, elements) in notes.tiles.items():
            attributes[TILE_COUNT.format(level)] = count
            attributes[TILE_DURATION_NS.format(level)] = duration_ns
            attributes[TILE_ELEMENTS.format(level)] = elements
    events = tuple(Event(name, details, timestamp=ts) for name, details, ts in notes.events)
    status = _UNSET
    if notes.status is not None:
        code, description = notes.status
        status = Status(StatusCode[code], description)
    return events, status


def _widen_extent(rec: Record, start: int, end: int) -> None:
    """Grow the GPU extent of ``rec`` (a scope around GPU-timed work) to cover [start, end]."""
    if not rec.gpu_first or start < rec.gpu_first:
        rec.gpu_first = start
    if end > rec.gpu_last:
        rec.gpu_last = end


def _enclosing(rec: Record) -> tuple[Any, int | None, int | None]:
    """(brick info, layer index, step number) of rec or the nearest scopes around it.

    Memoised on each record, so siblings share their ancestors' answer.
    """
    found = rec.enclosing
    if found is None:
        brick, layer_index, step_number = _enclosing(rec.link) if rec.link is not None else (None, None, None)
        owner = rec.owner
        kind = owner._kind
        if kind == KIND_BRICK:
            brick = owner.brick_info()
        elif kind == KIND_LAYER:
            layer_index = owner._index
        elif kind == KIND_STEP:
            step_number = owner._index
        found = rec.enclosing = (brick, layer_index, step_number)
    return found
