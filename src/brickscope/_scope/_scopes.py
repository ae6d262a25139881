# SPDX-License-Identifier: Apache-2.0
"""The scope classes (brick, kernel, layer, step): with-statement and decorator, and the
enter/exit helpers and once-only warnings every module of the package shares (the hot path).

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
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from brickscope import _catalog, _record, _state
from brickscope._gpu._streams import stream_handle
from brickscope._record import KIND_BRICK, KIND_KERNEL, KIND_LAYER, KIND_NAMES, KIND_STEP, Record

# The C accelerator of everything below that runs per scope (None: the Python here runs).
_hot = _record.hotpath

# One logger for the whole package, under the name the module had before it was split.
logger = logging.getLogger("brickscope._scope")

F = TypeVar("F", bound=Callable[..., Any])
_warned: set[str] = set()
_TOP_get = _record.TOP.get



class Scope(Protocol):
    """What :func:`brick`, :func:`kernel`, :func:`layer` and :func:`step` return: a context
    manager and a decorator. While brickscope records it is a fresh entry for one use of a
    shared scope object; while it is off, the shared :class:`Brick`, :class:`Kernel`,
    :class:`Layer` or :class:`Step` itself. Either is accepted by :func:`enter_scope`.

    .. versionadded:: 0.2.0
    """

    def __enter__(self) -> Scope: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None, /
    ) -> None: ...

    def __call__(self, func: F, /) -> F:
        """Decorate ``func``: each call runs inside the scope (coroutines: each await)."""
        ...

def _warn_once(key: str, message: str, *args: object, exc_info: bool = False) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(message, *args, exc_info=exc_info)


def _enter(scope: _Scope) -> Record | None:
    """Open a record for ``scope`` if brickscope is on. Never raises."""
    recorder = _state.recorder
    if recorder is None or _tracing():
        return None
    try:
        return recorder.open(scope)
    except Exception:
        _enter_failed(recorder)
        return None


def _tracing() -> bool:
    """Whether torch.compile is tracing this call (see ``_state.compiling``)."""
    compiling = _state.compiling
    return compiling is not None and compiling()


def _exit(rec: Record, error: BaseException | None) -> None:
    """Close ``rec``. Never raises."""
    try:
        rec.recorder.close(rec, error)
    except Exception:
        _exit_failed(rec)


def _enter_failed(recorder: Any, exc: BaseException | None = None) -> None:
    """Opening a scope raised ``exc`` (default: the exception being handled): counted, logged once."""
    recorder.count("scope_errors")
    _warn_once("enter", "brickscope: opening a scope failed; it will not be recorded", exc_info=exc or True)


def _exit_failed(rec: Record, exc: BaseException | None = None) -> None:
    """Closing a scope raised ``exc`` (default: the exception being handled): counted, logged once."""
    rec.recorder.count("scope_errors")
    _warn_once("exit", "brickscope: closing a scope failed", exc_info=exc or True)


def _innermost_open(top: Record | None, opener: Any) -> Record | None:
    """The innermost open record of this context's stack that ``opener`` opened, or None."""
    while top is not None:
        if top.opener is opener:  # closing a record sets its opener None
            return top
        top = top.link
    return None


def _on_stack(top: Record | None, rec: Record) -> bool:
    """Whether ``rec`` is on this context's stack (open or ended out of order)."""
    while top is not None:
        if top is rec:
            return True
        top = top.link
    return False


def _exit_out_of_order(scope: _Scope, top: Record, error: BaseException | None) -> None:
    """A ``with`` on ``scope`` ends but its record is not the innermost: close the
    innermost record ``scope`` opened in this context (the stack is repaired and
    counted), or nothing if this entry recorded nothing (brickscope was off)."""
    rec = _innermost_open(top, scope)
    if rec is not None:
        _exit(rec, error)


class _PyScopeBase:
    """A scope object's fields and with-statement, in Python (the reference);
    ``brickscope._hotpath.ScopeBase`` is the same in C."""

    __slots__ = ("_name", "_category", "_elements", "_stream", "_index", "_attributes")

    # __enter__/__exit__ inline _enter/_exit: a call less on the hottest path.
    def __enter__(self) -> _Scope:
        recorder = _state.recorder
        compiling = _state.compiling
        if recorder is not None and (compiling is None or not compiling()):
            try:
                recorder.open(self, self)
            except Exception:
                _enter_failed(recorder)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        compiling = _state.compiling
        if compiling is not None and compiling():
            return
        rec = _TOP_get()
        if rec is not None and rec.opener is self:  # closing sets opener None
            try:
                rec.recorder.close(rec, exc)
            except Exception:
                _exit_failed(rec)
        elif rec is not None:
            _exit_out_of_order(self, rec, exc)


if TYPE_CHECKING:
    _ScopeBase = _PyScopeBase  # what type checkers see: the C type has the same fields and methods
else:
    _ScopeBase = _PyScopeBase if _hot is None else _hot.ScopeBase


class _Scope(_ScopeBase):
    """Common machinery of every scope kind: with-statement and decorator."""

    __slots__ = ()
    _kind = KIND_BRICK
    _propagates = True
    _host_only = False  # True: never GPU-timed (brickscope.torch, during CUDA graph capture)
    _external = False  # True: bs.record_gpu's interval measured elsewhere (see _ExternalGpu)

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
            or (category is not None and (type(category) is not str or not category))
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
    return tuple(dims) + (1,) * (3 - len(dims))
