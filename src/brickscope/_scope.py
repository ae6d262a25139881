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

from brickscope import _catalog, _otel_context, _record, _scope_data, _state
from brickscope._clock import perf_counter_ns as _perf_counter_ns
from brickscope._gpu._streams import stream_handle
from brickscope._record import KIND_BRICK, KIND_KERNEL, KIND_LAYER, KIND_NAMES, KIND_STEP, Record

# The C accelerator of everything below that runs per scope (None: the Python here runs).
_hot = _record.hotpath

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


_ScopeBase: Any = _PyScopeBase if _hot is None else _hot.ScopeBase


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


class _PyEntry:
    """One use of a shared scope object: what the factories return while brickscope records.

    The factories share one immutable scope object per name, so that building a scope
    per call stays cheap; a ``with`` needs to close exactly the record it opened,
    though (two nested same-name bricks, two generators interleaving the same brick),
    which a shared object cannot remember. The entry remembers it. (In Python: the
    reference; ``brickscope._hotpath.Entry`` is the same in C.)
    """

    __slots__ = ("_scope", "_record")

    def __enter__(self) -> _PyEntry:
        recorder = _state.recorder
        compiling = _state.compiling
        if recorder is None or (compiling is not None and compiling()):
            self._record = None
        else:
            try:
                self._record = recorder.open(self._scope, self)
            except Exception:
                self._record = None
                _enter_failed(recorder)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        rec = self._record
        if rec is None:
            return
        if _TOP_get() is rec:
            try:
                rec.recorder.close(rec, exc)
            except Exception:
                _exit_failed(rec)
        else:
            _exit_entry_out_of_order(self, rec, exc)

    def __call__(self, func: F) -> F:
        """Decorate ``func`` with the shared scope (each call opens its own record)."""
        return self._scope(func)

    def __repr__(self) -> str:
        return f"<brickscope {KIND_NAMES[self._scope._kind]} {self._scope._name!r}>"


def _exit_entry_out_of_order(entry: Any, rec: Record, error: BaseException | None) -> None:
    """The entry's record is not the innermost open one: close it where it is (counted
    as a repair), unless it is not on this context's stack (the entry was entered
    again, here or on another thread): then close the innermost record this entry
    opened in this context."""
    top = _TOP_get()
    if rec.ended or not _on_stack(top, rec):
        rec = _innermost_open(top, entry)
        if rec is None:
            return
    _exit(rec, error)


_new_entry = object.__new__


def _py_make_entry(scope: _Scope) -> _PyEntry:
    entry = _new_entry(_PyEntry)
    entry._scope = scope
    return entry


_Entry: Any = _PyEntry if _hot is None else _hot.Entry
#: A fresh entry for a scope object.
_make_entry: Callable[[_Scope], Any] = _py_make_entry if _hot is None else _hot.Entry


def _entry(scope: _Scope) -> Any:
    """``scope`` itself when brickscope is off (nothing to remember), else a fresh entry."""
    if _state.recorder is None:
        return scope
    return _make_entry(scope)


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
            scope = _bricks[key]
        except (KeyError, TypeError):  # new, or unhashable (Brick() says what is wrong)
            scope = Brick(name, stream=stream)
            if len(_bricks) < _CACHE_LIMIT:
                try:
                    _bricks[key] = scope
                except TypeError:  # an unhashable stream object: not cached
                    pass
        if _state.recorder is None:
            return scope
        return _make_entry(scope)
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
            scope = _kernels[name]
        except (KeyError, TypeError):
            scope = Kernel(name)
            if len(_kernels) < _CACHE_LIMIT:
                _kernels[name] = scope
        return _entry(scope)
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
    return _entry(scope)


if _hot is not None:
    # The one-argument forms (``brick("rms_norm")``, ``layer(3)``) are a cache lookup in C,
    # and ``brick(name, category, elements)`` builds its Brick in C (as ``Brick.__init__``
    # would, valid arguments only); every other form, and a miss, runs the Python factory above.
    brick = _hot.factory("brick", _bricks, brick, False, Brick)  # type: ignore[assignment]
    kernel = _hot.factory("kernel", _kernels, kernel, False)  # type: ignore[assignment]
    layer = _hot.factory("layer", _layers, layer, True)  # type: ignore[assignment]
    step = _hot.factory("step", _steps, step, True)  # type: ignore[assignment]


class _InGraph:
    """What the factories give inside torch.compile'd code in C mode: records nothing (as
    every scope while compiling), and is plain Python, which Dynamo can trace."""

    __slots__ = ()

    def __enter__(self) -> _InGraph:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __call__(self, func: F) -> F:
        return func


_substitutes_registered = False


def _in_graph(*args: Any, **kwargs: Any) -> _InGraph:
    return _InGraph()  # made inside the compiled region: Dynamo traces its with-statement


def register_compile_substitutes(torch: Any) -> None:
    """Give torch.compile Python stand-ins for the C factories (Dynamo cannot trace C, and a
    C call is a graph break): inside compiled code a factory returns a scope that records
    nothing, which is what every scope does while compiling. Idempotent; no-op in pure Python."""
    global _substitutes_registered
    substitute = getattr(getattr(torch, "compiler", None), "substitute_in_graph", None)
    if _hot is None or _substitutes_registered or substitute is None:
        return
    for factory in (brick, kernel, layer, step):
        substitute(factory, skip_signature_check=True)(_in_graph)
    substitute(enter_scope, skip_signature_check=True)(_enter_in_graph)
    substitute(exit_scope, skip_signature_check=True)(_exit_in_graph)
    _substitutes_registered = True


def _enter_in_graph(scope: Any) -> Record:
    return _INERT  # what enter_scope gives while torch.compile traces


def _exit_in_graph(token: Any, error: BaseException | None = None) -> None:
    return None  # an inert token: nothing to close


#: What :func:`enter_scope` returns: opaque, for :func:`exit_scope` only.
ScopeToken = Record
#: The handle :func:`start_brick` returns (a :data:`ScopeToken`).
BrickHandle = Record

_INERT = Record()  # the token of a scope that recorded nothing (brickscope off)
_INERT.ended = True


def enter_scope(scope: Any) -> ScopeToken:
    """Open ``scope`` (from :func:`brick`, :func:`kernel`, :func:`layer` or :func:`step`)
    without a ``with`` block: for hooks and middleware, which get called at the start
    and at the end of the work. Close it with :func:`exit_scope`.

    Scopes opened on this thread or task while it is open nest under it. Returns an
    opaque token, an inert one when brickscope is off. Never raises.

    .. versionadded:: 0.2.0
    """
    if type(scope) is _Entry:
        scope = scope._scope
    recorder = _state.recorder
    if recorder is None or _tracing():
        return _INERT
    if not isinstance(scope, _Scope):
        _misuse("enter_scope_type", "brickscope: enter_scope() expects a brick, kernel, layer or step scope, got %r", scope)
        return _INERT
    try:
        token = recorder.open(scope)
    except Exception:
        _enter_failed(recorder)
        return _INERT
    return _INERT if token is None else token


def exit_scope(token: ScopeToken, error: BaseException | None = None) -> None:
    """Close the scope ``token`` was returned for (optionally recording ``error``).

    Exactly that scope ends, even when scopes opened after it are still open: they
    stay open, keep it as their parent, and the repair is counted
    (``stats()["scope_repairs"]``). Exiting a token twice, or something that is not
    a token, counts as misuse, logs one warning and is ignored. Never raises.

    .. versionadded:: 0.2.0
    """
    if type(token) is not Record:
        _misuse("exit_scope_type", "brickscope: exit_scope() expects a token from enter_scope(), got %r", token)
        return
    if token is _INERT:
        return
    if token.ended:
        token.recorder.count("misuse")
        _warn_once("exit_twice", "brickscope: scope %r ended twice (exit_scope/end_brick); ignored", token.owner._name)
        return
    _exit(token, error)


def _misuse(key: str, message: str, *args: object) -> None:
    recorder = _state.configured
    if recorder is not None:
        recorder.count("misuse")
    _warn_once(key, message, *args)


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
    Unlike :func:`enter_scope`, the brick never becomes the current OTel span, so its
    end may come from any task or thread.

    .. versionadded:: 0.1.0
    """
    return enter_scope(_HandleBrick(name, category, elements, stream, **attributes))


def end_brick(handle: BrickHandle, error: BaseException | None = None) -> None:
    """Close a brick opened with :func:`start_brick` (optionally recording ``error``): :func:`exit_scope`.

    .. versionadded:: 0.1.0
    """
    exit_scope(handle, error)


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
) -> None:
    """Record GPU work timed by other means (Vulkan or Metal timestamp queries, a vendor
    tool, a benchmark harness) as a GPU-timed span under the current scope.

    The span is a brick (or ``kind="kernel"``) with clock ``gpu``, the given interval as
    its start and end, on GPU ``device``'s ``stream`` track of a ``.pftrace`` like a
    CUDA-timed brick, with the call's host time as its launch side. Times are
    nanoseconds since the Unix epoch on the host's timeline: map device timestamps onto
    it first (e.g. Vulkan's calibrated timestamps). Does nothing while brickscope is off.

    Raises:
        TypeError, ValueError: a malformed argument (at the call).

    .. versionadded:: 0.2.0
    """
    for value, what in ((start_ns, "start_ns"), (end_ns, "end_ns"), (device, "device"), (stream, "stream")):
        if type(value) is not int:
            raise TypeError(f"brickscope: record_gpu {what} must be an int, got {type(value).__name__}")
    if start_ns <= 0 or end_ns < start_ns:
        raise ValueError(f"brickscope: record_gpu needs 0 < start_ns <= end_ns, got {start_ns}, {end_ns}")
    if device < 0 or stream < 0:
        raise ValueError("brickscope: record_gpu device and stream must be >= 0")
    if kind == "brick":
        owner: Any = _ExternalGpuBrick(name, category, elements, **attributes)
    elif kind == "kernel":
        owner = _ExternalGpuKernel(name, **attributes)
    else:
        raise ValueError(f"brickscope: record_gpu kind must be 'brick' or 'kernel', got {kind!r}")
    owner._device_id = device
    owner._stream_id = stream
    recorder = _state.recorder
    if recorder is None or _tracing():
        return
    try:
        rec = recorder.open(owner)
        rec.gpu_first, rec.gpu_last = start_ns, end_ns
        recorder.close(rec, None)
    except Exception:
        _enter_failed(recorder)


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


def tile(level: str, elements: int = 0) -> Any:
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


if _hot is not None:
    _hot.init_scopes(
        state_globals=vars(_state), enter_failed=_enter_failed, exit_failed=_exit_failed,
        exit_out_of_order=_exit_out_of_order, exit_entry_out_of_order=_exit_entry_out_of_order,
        inert=_INERT, enter_scope=enter_scope, exit_scope=exit_scope,
    )  # fmt: skip
    # Tokens in C too (brickscope.torch's module calls); misuse and the rest: the Python above.
    enter_scope = _hot.enter_scope  # type: ignore[assignment]  # noqa: F811
    exit_scope = _hot.exit_scope  # type: ignore[assignment]  # noqa: F811
