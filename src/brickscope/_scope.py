# SPDX-License-Identifier: Apache-2.0
"""Scopes: brick, kernel, layer, step. Context managers and decorators (the hot path).

Each scope object is stateless between uses: the open record lives on the
per-context scope stack, so one object (or one decorated function) serves every
call, thread, task and recursion level. Enter and exit only append a compact
record; spans are built later, at a sync point.

Example::

    import brickscope as bs

    with bs.layer(0):
        with bs.brick("rms_norm", elements=4096):
            y = rms_norm(x)

    @bs.brick("ffn_down")
    def ffn_down(x): ...
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any, Callable, TypeVar

from brickscope import _catalog, _record, _state
from brickscope._gpu._streams import stream_handle
from brickscope._record import KIND_BRICK, KIND_KERNEL, KIND_LAYER, KIND_NAMES, KIND_STEP, Record

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
_warned: set[str] = set()
_TOP_get = _record.TOP.get


def _warn_once(key: str, message: str, *args: object, exc_info: bool = False) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(message, *args, exc_info=exc_info)


def _enter(scope: _Scope) -> Record | None:
    """Open a record for ``scope`` if brickscope is on. Never raises."""
    recorder = _state.recorder
    if recorder is None:
        return None
    try:
        return recorder.open(scope)
    except Exception:
        _enter_failed(recorder)
        return None


def _exit(rec: Record, error: BaseException | None) -> None:
    """Close ``rec``. Never raises."""
    try:
        rec.recorder.close(rec, error)
    except Exception:
        _exit_failed(rec)


def _enter_failed(recorder: Any) -> None:
    recorder.count("scope_errors")
    _warn_once("enter", "brickscope: opening a scope failed; it will not be recorded", exc_info=True)


def _exit_failed(rec: Record) -> None:
    rec.recorder.count("scope_errors")
    _warn_once("exit", "brickscope: closing a scope failed", exc_info=True)


class _Scope:
    """Common machinery of every scope kind: with-statement and decorator."""

    __slots__ = ("_name", "_category", "_elements", "_stream", "_index", "_attributes")
    _kind = KIND_BRICK
    _propagates = True

    # __enter__/__exit__ inline _enter/_exit: a call less on the hottest path.
    def __enter__(self) -> _Scope:
        recorder = _state.recorder
        if recorder is not None:
            try:
                recorder.open(self)
            except Exception:
                _enter_failed(recorder)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        rec = _TOP_get()
        if rec is not None and rec.owner is self:
            try:
                rec.recorder.close(rec, exc)
            except Exception:
                _exit_failed(rec)

    def __call__(self, func: F) -> F:
        """Decorate ``func``: each call runs inside this scope (coroutines: each await)."""
        scope = self
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                rec = _enter(scope)
                if rec is None:
                    return await func(*args, **kwargs)
                try:
                    result = await func(*args, **kwargs)
                except BaseException as exc:
                    _exit(rec, exc)
                    raise
                _exit(rec, None)
                return result

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            rec = _enter(scope)  # per-call state in locals, never on the shared scope
            if rec is None:
                return func(*args, **kwargs)
            try:
                result = func(*args, **kwargs)
            except BaseException as exc:
                _exit(rec, exc)
                raise
            _exit(rec, None)
            return result

        return wrapper  # type: ignore[return-value]

    def brick_info(self) -> _catalog.BrickInfo | None:
        """The catalog entry for this scope's brick, resolved on first use."""
        return None


class Brick(_Scope):
    """One logical operation (rms_norm, attention_score, an all-reduce...).

    Args:
        name: the brick's name; built-in names carry their category.
        category: overrides the catalog (new categories are fine).
        elements: work items processed (tokens, rows), for throughput. >= 0.
        stream: the CUDA stream the work runs on (``__cuda_stream__`` object,
            int handle, ``CUstream``, torch/cupy stream); default: legacy stream.
        **attributes: extra span attributes.

    Raises:
        TypeError: ``name`` or ``category`` is not a str, ``elements`` not an int.
        ValueError: empty name or negative ``elements``.

    .. versionadded:: 0.1.0
    """

    __slots__ = ()

    def __init__(
        self, name: str, category: str | None = None, elements: int = 0, stream: Any = None, **attributes: Any
    ) -> None:
        # One chained test on the common path (a brick is often built per call); the
        # precise error comes from the slow path.
        if (
            type(name) is not str
            or not name
            or type(elements) is not int
            or elements < 0
            or (category is not None and type(category) is not str)
        ):
            _check_brick(name, category, elements)
        if stream is not None:
            stream_handle(stream)  # TypeError/ValueError now, not at the first enter
        self._name = name
        self._category = category
        self._elements = elements
        self._stream = stream
        self._attributes = attributes or None

    def brick_info(self) -> _catalog.BrickInfo:
        return _catalog.resolve(self._name, self._category)


class Kernel(_Scope):
    """One kernel launch inside a brick, with its launch configuration.

    Args:
        name: the kernel's name (stays on spans; never a metric label).
        grid: grid dimensions, 1 to 3 positive ints.
        block: block dimensions, 1 to 3 positive ints.
        shared_mem_bytes: dynamic shared memory per block, >= 0.
        stream: the stream of the launch; default: the enclosing brick's.
        **attributes: extra span attributes.

    Raises:
        TypeError, ValueError: malformed name or launch configuration.

    .. versionadded:: 0.1.0
    """

    __slots__ = ()
    _kind = KIND_KERNEL

    def __init__(
        self,
        name: str,
        grid: Any = None,
        block: Any = None,
        shared_mem_bytes: int | None = None,
        stream: Any = None,
        **attributes: Any,
    ) -> None:
        _catalog.check_name(name)
        if stream is not None:
            stream_handle(stream)
        launch: dict[str, Any] = {}
        if grid is not None:
            launch["brickscope.kernel.grid"] = _dims(grid, "grid")
        if block is not None:
            launch["brickscope.kernel.block"] = _dims(block, "block")
        if shared_mem_bytes is not None:
            if shared_mem_bytes.__class__ is not int or shared_mem_bytes < 0:
                raise ValueError(f"brickscope: shared_mem_bytes must be an int >= 0, got {shared_mem_bytes!r}")
            launch["brickscope.kernel.shared_mem_bytes"] = shared_mem_bytes
        launch.update(attributes)
        self._name = name
        self._category = None
        self._elements = 0
        self._stream = stream
        self._attributes = launch or None


class _Grouping(_Scope):
    """A scope that groups bricks and is identified by a number (layers, steps)."""

    __slots__ = ()
    _index_name = ""

    def __init__(self, index: int, **attributes: Any) -> None:
        _check_index(index, self._index_name)
        self._name = KIND_NAMES[self._kind]
        self._category = None
        self._elements = 0
        self._index = index
        self._stream = None
        self._attributes = attributes or None


class Layer(_Grouping):
    """A transformer layer: groups the bricks inside it (trueno's Layer -> Brick -> Kernel).

    Args:
        index: the layer's index, an int >= 0 (``brickscope.layer.index``).

    .. versionadded:: 0.1.0
    """

    __slots__ = ()
    _kind = KIND_LAYER
    _index_name = "layer index"


class Step(_Grouping):
    """One step (a decode step, a training iteration). Its end is a sync point in deferred mode.

    Args:
        number: the step number, an int >= 0 (``brickscope.step.number``).

    .. versionadded:: 0.1.0
    """

    __slots__ = ()
    _kind = KIND_STEP
    _index_name = "step number"


# Scope objects are immutable and stateless, so the factories hand out one shared
# object per name (or index) for the plain forms, ``brick("rms_norm")`` and
# ``brick("rms_norm", stream=s)``: building a
# scope per call is the common idiom and the object's construction was the bulk of
# a disabled scope's cost (171 -> 104 ns, benchmarks/hot_path.py). Bounded, so
# names built from data cannot grow it without limit.
_CACHE_LIMIT = 4096
_bricks: dict[Any, Brick] = {}  # name, or (name, stream)
_kernels: dict[str, Kernel] = {}
_layers: dict[int, Layer] = {}
_steps: dict[int, Step] = {}


def brick(name: str, category: str | None = None, elements: int = 0, stream: Any = None, **attributes: Any) -> Brick:
    """A brick scope: one logical operation (``rms_norm``, ``attention_score``, an all-reduce).

    A context manager and a decorator. Arguments as :class:`Brick`.

    .. versionadded:: 0.1.0
    """
    if category is None and not elements and not attributes:
        key = name if stream is None else (name, stream)
        try:
            return _bricks[key]
        except (KeyError, TypeError):  # new, or unhashable (Brick() says what is wrong)
            scope = Brick(name, stream=stream)
            if len(_bricks) < _CACHE_LIMIT:
                try:
                    _bricks[key] = scope
                except TypeError:  # an unhashable stream object: not cached
                    pass
            return scope
    return Brick(name, category, elements, stream, **attributes)


def kernel(
    name: str,
    grid: Any = None,
    block: Any = None,
    shared_mem_bytes: int | None = None,
    stream: Any = None,
    **attributes: Any,
) -> Kernel:
    """A kernel scope: one launch inside a brick, with its launch configuration.

    A context manager and a decorator. Arguments as :class:`Kernel`.

    .. versionadded:: 0.1.0
    """
    if grid is None and block is None and shared_mem_bytes is None and stream is None and not attributes:
        try:
            return _kernels[name]
        except (KeyError, TypeError):
            scope = Kernel(name)
            if len(_kernels) < _CACHE_LIMIT:
                _kernels[name] = scope
            return scope
    return Kernel(name, grid, block, shared_mem_bytes, stream, **attributes)


def layer(index: int, **attributes: Any) -> Layer:
    """A layer scope grouping bricks (trueno's Layer -> Brick -> Kernel). Arguments as :class:`Layer`.

    .. versionadded:: 0.1.0
    """
    return _indexed(Layer, _layers, index, attributes)


def step(number: int, **attributes: Any) -> Step:
    """A step scope (decode step, training iteration); its end is a sync point in deferred mode.

    Arguments as :class:`Step`.

    .. versionadded:: 0.1.0
    """
    return _indexed(Step, _steps, number, attributes)


def _indexed(cls: Any, cache: dict[int, Any], index: int, attributes: dict[str, Any]) -> Any:
    if attributes:
        return cls(index, **attributes)
    scope = cache.get(index) if type(index) is int else None
    if scope is None:
        scope = cls(index)
        if len(cache) < _CACHE_LIMIT:
            cache[index] = scope
    return scope


class BrickHandle:
    """An open brick started with :func:`start_brick`; close it with :func:`end_brick`."""

    __slots__ = ("_record", "_scope")

    def __init__(self, scope: Brick, record: Record | None) -> None:
        self._scope = scope
        self._record = record


class _HandleBrick(Brick):
    """A brick opened by start_brick: it never becomes the current OTel span, because
    its end may come from another task, out of order with the OTel context stack."""

    __slots__ = ()
    _propagates = False


def start_brick(
    name: str, category: str | None = None, elements: int = 0, stream: Any = None, **attributes: Any
) -> BrickHandle:
    """Open a brick that does not fit one lexical block; returns the handle for :func:`end_brick`.

    Scopes opened on this context while it is open nest under it. Arguments as :class:`brick`.

    .. versionadded:: 0.1.0
    """
    scope = _HandleBrick(name, category, elements, stream, **attributes)
    return BrickHandle(scope, _enter(scope))


def end_brick(handle: BrickHandle, error: BaseException | None = None) -> None:
    """Close a brick opened with :func:`start_brick` (optionally recording ``error``).

    Ending a handle twice, or something that is not a handle, logs one warning and is ignored.

    .. versionadded:: 0.1.0
    """
    rec = handle._record if isinstance(handle, BrickHandle) else None
    if not isinstance(handle, BrickHandle):
        _warn_once("end_brick_type", "brickscope: end_brick() expects a handle from start_brick(), got %r", handle)
        return
    if rec is None:
        return
    if rec.ended:
        rec.recorder.count("misuse")
        _warn_once("end_brick_twice", "brickscope: brick %r ended twice; ignored", rec.owner._name)
        return
    _exit(rec, error)


def sync(timeout_millis: float | None = None) -> bool:
    """A sync point: resolve every pending scope (waiting for the GPU) and emit the spans.

    Returns True when nothing is left pending. Never raises.

    .. versionadded:: 0.1.0
    """
    recorder = _state.configured
    if recorder is None:
        return True
    return recorder.sync(block=True, timeout_millis=timeout_millis)


def _check_brick(name: object, category: object, elements: object) -> None:
    _catalog.check_name(name)
    _catalog.check_category(category)
    if not isinstance(elements, int) or isinstance(elements, bool):
        raise TypeError(f"brickscope: elements must be an int, got {type(elements).__name__}")
    if elements < 0:
        raise ValueError(f"brickscope: elements must be >= 0, got {elements}")


def _check_index(value: object, what: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"brickscope: {what} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"brickscope: {what} must be >= 0, got {value}")


def _dims(value: object, what: str) -> tuple[int, int, int]:
    """Normalise a launch dimension (int or 1-3 ints) to (x, y, z)."""
    dims = (value,) if isinstance(value, int) else value
    if (
        not isinstance(dims, (tuple, list))
        or not 1 <= len(dims) <= 3
        or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims)
    ):
        raise ValueError(f"brickscope: {what} must be 1 to 3 positive ints, got {value!r}")
    return tuple(dims) + (1,) * (3 - len(dims))  # type: ignore[return-value]
