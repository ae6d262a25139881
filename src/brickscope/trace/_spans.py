# SPDX-License-Identifier: Apache-2.0
"""SpanBuilder: turns a resolved record into an ended ``ReadableSpan``.

The OTel SDK freezes a span before any processor can add to it
(opentelemetry-python#5614), and an SDK span costs 7-11 us to create, so
brickscope builds ``ReadableSpan`` objects directly (about 0.5 us each) once a
record's timing is known: GPU events or the host clock, the brickscope
attributes, self time, the real parent ids and the provider's resource.

Example::

    span, attributes = builder.build(rec)   # rec ended, its GPU events complete
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode

from brickscope import _kernel_sources, _otel_context
from brickscope._clock import EPOCH_OFFSET_NS
from brickscope._record import KIND_BRICK, KIND_KERNEL, KIND_LAYER, KIND_NAMES, KIND_STEP, Record
from brickscope.trace._counters import Counters
from brickscope.trace._unsampled import self_time
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

_UNSET = Status(StatusCode.UNSET)
#: The instrumentation scope of every span brickscope builds (one object: identity tells ours).
INSTRUMENTATION_SCOPE = InstrumentationScope("brickscope", __version__)


class SpanBuilder:
    """Builds the spans of one recorder's records, for one provider."""

    def __init__(self, tracer_provider: TracerProvider, recorder: Any, counters: Counters) -> None:
        self._recorder = recorder  # its timer: None after a fork
        self._thread_names = recorder.thread_names
        self._provider = tracer_provider  # its resource is read per span: the kernel source registry updates it
        self._id_generator = tracer_provider.id_generator
        self._counts = counters.values

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

    def build(self, rec: Record) -> tuple[ReadableSpan, dict[str, Any]]:
        """The ended span for a resolved record, and its attributes (a plain dict)."""
        owner = rec.owner
        kind = owner._kind
        host_start = rec.host_start + EPOCH_OFFSET_NS
        host_duration = rec.host_end - rec.host_start
        attributes: dict[str, Any] = {
            SCOPE_KIND: KIND_NAMES[kind],
            HOST_START_NS: host_start,
            HOST_DURATION_NS: host_duration,
            THREAD_ID: rec.thread_id,
            THREAD_NAME: self._thread_names.get(rec.thread_id, ""),
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
        span = ReadableSpan(
            name=owner._name,
            context=self._span_context(rec),
            parent=parent_context,
            resource=self._provider.resource,
            attributes=attributes,
            events=events,
            kind=SpanKind.INTERNAL,
            status=status,
            start_time=start,
            end_time=end,
            instrumentation_scope=INSTRUMENTATION_SCOPE,
        )
        return span, attributes

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
