# SPDX-License-Identifier: Apache-2.0
"""What goes into the current scope or session without a scope object of its own:
``record_gpu`` (GPU work timed elsewhere), ``tile`` (per-level totals of a cache-blocked
kernel), ``event`` (an instant event) and ``sync`` (a sync point)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, overload

from brickscope import _otel_context, _scope_data, _state
from brickscope._clock import perf_counter_ns as _perf_counter_ns
from brickscope._record import Record
from brickscope._scope._scopes import Brick, Kernel, _enter_failed, _exit_failed, _TOP_get, _tracing, _warn_once


def sync(timeout_millis: float | None = None) -> bool:
    """A sync point: resolve every pending scope (waiting for the GPU) and emit the spans.

    Returns True when nothing is left pending. Never raises.

    .. versionadded:: 0.1.0
    """
    recorder = _state.configured
    if recorder is None:
        return True
    return recorder.sync(block=True, timeout_millis=timeout_millis)


class _ExternalGpuBrick(Brick):
    """A brick whose GPU interval was measured elsewhere (``record_gpu``)."""

    __slots__ = ("_device_id", "_stream_id")
    _external = True
    _host_only = True  # no CUDA events of ours
    _propagates = False


class _ExternalGpuKernel(Kernel):
    """A kernel whose GPU interval was measured elsewhere (``record_gpu(kind="kernel")``)."""

    __slots__ = ("_device_id", "_stream_id")
    _external = True
    _host_only = True
    _propagates = False


@overload
def record_gpu(
    name: str,
    start_ns: int,
    end_ns: int,
    *,
    device: int = 0,
    stream: int = 0,
    kind: str = "brick",
    category: str | None = None,
    elements: int = 0,
    **attributes: Any,
) -> None: ...


@overload
def record_gpu(
    name: Sequence[tuple[str, int]],
    start_ns: int,
    end_ns: None = None,
    *,
    device: int = 0,
    stream: int = 0,
    kind: str = "brick",
    category: str | None = None,
    elements: int = 0,
    **attributes: Any,
) -> None: ...


def record_gpu(
    name: str | Sequence[tuple[str, int]],
    start_ns: int,
    end_ns: int | None = None,
    *,
    device: int = 0,
    stream: int = 0,
    kind: str = "brick",
    category: str | None = None,
    elements: int = 0,
    **attributes: Any,
) -> None:
    """Record GPU work timed by other means (Vulkan or Metal timestamp queries, a vendor
    tool, a benchmark harness) as a GPU-timed span under the current scope.

    The span is a brick (or ``kind="kernel"``) with clock ``gpu``, the given interval as
    its start and end, on GPU ``device``'s ``stream`` track of a ``.pftrace`` like a
    CUDA-timed brick, with the call's host time as its launch side. Times are
    nanoseconds since the Unix epoch on the host's timeline (:func:`brickscope.now_ns`):
    map device timestamps onto it first (e.g. Vulkan's calibrated timestamps). Does
    nothing while brickscope is off.

    Several passes of one submission, timed as durations (timestamp queries between
    passes), are given as a sequence of ``(name, duration_ns)`` and ``start_ns`` (the
    submit time, no ``end_ns``): they are laid back to back from ``start_ns``, one span
    each with the call's other arguments, in order. Every pass is checked before any is
    recorded. Example::

        bs.record_gpu([("shadow", 120_000), ("gbuffer", 340_000)], submit_ns, stream=1)

    Raises:
        TypeError, ValueError: a malformed argument (at the call).

    .. versionadded:: 0.2.0
    .. versionchanged:: 0.2.0 a sequence of passes laid out from one submit time.
    """
    if isinstance(name, str):
        if end_ns is None:
            raise TypeError("brickscope: record_gpu(name, start_ns, end_ns) needs end_ns")
        intervals = [(name, start_ns, end_ns)]
    else:
        if end_ns is not None:
            raise TypeError("brickscope: record_gpu(passes, start_ns) lays passes out from start_ns; give no end_ns")
        intervals = _lay_out(name, start_ns)
    for value, what in ((start_ns, "start_ns"), (device, "device"), (stream, "stream")):
        if type(value) is not int:
            raise TypeError(f"brickscope: record_gpu {what} must be an int, got {type(value).__name__}")
    owners = []
    for pass_name, start, end in intervals:
        if type(end) is not int:
            raise TypeError(f"brickscope: record_gpu end_ns must be an int, got {type(end).__name__}")
        if start <= 0 or end < start:
            raise ValueError(f"brickscope: record_gpu needs 0 < start_ns <= end_ns, got {start}, {end}")
        if device < 0 or stream < 0:
            raise ValueError("brickscope: record_gpu device and stream must be >= 0")
        if kind == "brick":
            owner: Any = _ExternalGpuBrick(pass_name, category, elements, **attributes)
        elif kind == "kernel":
            owner = _ExternalGpuKernel(pass_name, **attributes)
        else:
            raise ValueError(f"brickscope: record_gpu kind must be 'brick' or 'kernel', got {kind!r}")
        owner._device_id = device
        owner._stream_id = stream
        owners.append((owner, start, end))
    recorder = _state.recorder
    if recorder is None or _tracing():
        return
    for owner, start, end in owners:
        try:
            rec = recorder.open(owner)
            rec.gpu_first, rec.gpu_last = start, end
            recorder.close(rec, None)
        except Exception:
            _enter_failed(recorder)
            return


def _lay_out(passes: Sequence[tuple[str, int]], start_ns: int) -> list[tuple[str, int, int]]:
    """``(name, start, end)`` of each ``(name, duration_ns)`` pass, back to back from ``start_ns``."""
    if isinstance(passes, (str, bytes)) or not isinstance(passes, Sequence) or not passes:
        raise TypeError("brickscope: record_gpu passes must be a non-empty sequence of (name, duration_ns)")
    if type(start_ns) is not int:
        raise TypeError(f"brickscope: record_gpu start_ns must be an int, got {type(start_ns).__name__}")
    intervals, at = [], start_ns
    for item in passes:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError(f"brickscope: record_gpu passes must be (name, duration_ns) pairs, got {item!r}")
        pass_name, duration = item
        if type(duration) is not int:
            raise TypeError(f"brickscope: record_gpu pass {pass_name!r} duration_ns must be an int, got {duration!r}")
        if duration < 0:
            raise ValueError(f"brickscope: record_gpu pass {pass_name!r} needs duration_ns >= 0, got {duration}")
        intervals.append((pass_name, at, at + duration))
        at += duration
    return intervals


class Tile:
    """One tile of a cache-blocked CPU or SIMD kernel (see :func:`tile`). Per use, not shared."""

    __slots__ = ("_level", "_elements", "_start", "_record")

    def __init__(self, level: str, elements: int) -> None:
        self._level = level
        self._elements = elements
        self._record: Record | None = None

    def __enter__(self) -> Tile:
        rec = _TOP_get()
        while rec is not None and rec.ended:
            rec = rec.link
        self._record = rec if rec is not None and rec.sampled else None
        self._start = _perf_counter_ns()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        rec = self._record
        if rec is not None and not rec.ended:
            try:
                _scope_data.add_tile(rec, self._level, _perf_counter_ns() - self._start, self._elements)
            except Exception:
                _exit_failed(rec)


_TILE_LEVELS = ("macro", "midi", "micro")


def tile(level: str, elements: int = 0) -> AbstractContextManager[object]:
    """A tile of a cache-blocked CPU or SIMD kernel: ``level`` ``"macro"``, ``"midi"`` or ``"micro"``.

    No span per tile: each tile adds its host-clock duration and ``elements`` to the
    per-level totals of the innermost open scope, which its span carries as
    ``brickscope.tile.<level>.count`` / ``.duration_ns`` / ``.elements``; ``brickscope
    report`` aggregates them per level. About a microsecond per tile: for macro and midi
    tiles, or micro tiles of real work, not a loop of nanosecond iterations. Does nothing
    while brickscope is off.

    Example::

        with bs.brick("gemm_cpu"):
            for block in blocks:
                with bs.tile("macro", elements=block.size):
                    compute(block)

    Raises:
        ValueError: an unknown level; TypeError, ValueError: ``elements`` not an int >= 0.

    .. versionadded:: 0.2.0
    """
    if level not in _TILE_LEVELS:
        raise ValueError(f"brickscope: tile level must be one of {', '.join(_TILE_LEVELS)}, got {level!r}")
    if type(elements) is not int or elements < 0:
        raise ValueError(f"brickscope: tile elements must be an int >= 0, got {elements!r}")
    if _state.recorder is None:
        return _NO_TILE
    return Tile(level, elements)


class _NoTile:
    """What :func:`tile` returns while brickscope is off: an empty ``with``."""

    __slots__ = ()

    def __enter__(self) -> _NoTile:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


_NO_TILE = _NoTile()


def event(name: str, **attributes: Any) -> None:
    """An instant event, now, on the current scope's span (drawn as an instant in a ``.pftrace``).

    The current scope is the innermost open brickscope scope of this thread or task,
    or an OTel span the user started inside it. Attributes are OTel attribute values;
    others are dropped and counted (``stats()["scope_data_dropped"]``), as is an event
    with no open scope to go to. Does nothing while brickscope is off. Never raises.

    Example::

        with bs.brick("sampling"):
            bs.event("eos", token=token_id)

    .. versionadded:: 0.2.0
    """
    recorder = _state.recorder
    if recorder is None:
        return
    try:
        rec = _scope_data.innermost_open(_TOP_get())
        context = _otel_context.current()
        span = _otel_context.current_span(context)
        user_span = span is not None and not isinstance(span, _otel_context.ScopeSpan) and span.is_recording()
        if user_span and (rec is None or rec.otel_context is not context):
            span.add_event(name, {k: v for k, v in attributes.items() if _scope_data.clean_value(v) is not None})
        elif rec is not None:
            _scope_data.add_event(rec, name, attributes)
        else:
            recorder.count("scope_data_dropped")
            _warn_once("event_outside", "brickscope: bs.event(%r) outside any scope or span; dropped (counted)", name)
    except Exception:
        _enter_failed(recorder)
