# SPDX-License-Identifier: Apache-2.0
"""The hot path: what an instrumented module's call does.

Each instrumented module gets a class of its own, derived from its class, whose
``__call__`` opens the module's scope around the original call; ``remove()`` puts
the original class back. That is what ``torch.nn.utils.parametrize`` does too, and
it is why this is not a pair of module hooks:

- cost: torch takes its slow path in ``_call_impl`` as soon as one forward hook
  exists; the same enter/exit in hooks costs more per call than in the class's
  ``__call__`` (benchmarks/hot_path.py: ``torch_module_hooks`` against
  ``torch_module_instrumented``; docs/benchmarks.md);
- robustness: an ``always_call=True`` hook is not called on a ``KeyboardInterrupt``
  (``_call_impl`` catches ``Exception`` only), which would leave bricks open; a
  ``try``/``except BaseException`` closes exactly the scope it opened;
- nothing is left behind: the module's hook dicts and ``__dict__`` are not touched.

Per-call state lives in locals; the per-module choices (scope objects by element
count and stream, NVTX attributes) are made once and kept in closures.
"""

from __future__ import annotations

import copyreg
from collections.abc import Callable
from typing import Any

import torch

from brickscope import _state
from brickscope._scope import Brick, Layer, enter_scope, exit_scope
from brickscope.torch._plan import Mapped
from brickscope.trace.attributes import GPU_TIMING_SKIPPED, TORCH_MODULE_PATH

_is_compiling = torch.compiler.is_compiling
_Tensor = torch.Tensor
_SCOPES_PER_MODULE = 64  # distinct (elements, stream) scopes cached per module; beyond: built per call
_CUDA_GRAPH_CAPTURE = "cuda_graph_capture"


class HostOnlyBrick(Brick):
    """A brick that records no CUDA events: used while a CUDA graph is being captured,
    when an event recorded on the capturing stream would become part of the graph."""

    __slots__ = ()
    _host_only = True


def current_stream_handle(tensor: Any) -> int:
    """The raw handle of the current torch stream on ``tensor``'s device."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # 10x cheaper than a Stream object
    if raw is not None:
        return raw(tensor.get_device())
    return torch.cuda.current_stream(tensor.device).cuda_stream


def is_capturing() -> bool:
    """Whether the current CUDA stream is capturing a graph."""
    return torch.cuda.is_current_stream_capturing()


def scope_chooser(mapped: Mapped, stream: Any) -> Callable[[tuple], Any]:
    """``choose(args) -> scope`` for one module: the scope object its call opens.

    Layers have one scope. A brick's scope carries the element count of the call's
    first tensor argument (rows: all dimensions but the last of a floating-point
    tensor, every element of an index tensor, so tokens for a transformer) and, on
    CUDA with ``stream="current"``, the current torch stream. Never raises: a call it
    cannot read opens the module's plain brick.
    """
    if mapped.kind == "layer":
        layer = Layer(mapped.layer)

        def choose_layer(args: tuple) -> Any:
            return layer

        return choose_layer

    name, category = mapped.name, mapped.category
    attributes = {TORCH_MODULE_PATH: mapped.path}
    fixed_stream = None if stream == "current" else stream
    plain = Brick(name, category, 0, fixed_stream, **attributes)
    follow_stream = stream == "current"
    scopes: dict[Any, Any] = {}
    stream_of, capturing = current_stream_handle, is_capturing

    def make(key: Any) -> Any:
        elements, handle = key
        if handle is _CUDA_GRAPH_CAPTURE:
            scope = HostOnlyBrick(name, category, elements, None, **attributes, **{GPU_TIMING_SKIPPED: handle})
        else:
            scope = Brick(name, category, elements, fixed_stream if handle is None else handle, **attributes)
        if len(scopes) < _SCOPES_PER_MODULE:
            scopes[key] = scope
        return scope

    def choose_brick(args: tuple) -> Any:
        if not args:
            return plain
        x = args[0]
        if not isinstance(x, _Tensor):
            return plain
        try:
            elements = x.numel()
            if elements and x.dim() > 1 and x.is_floating_point():
                elements //= x.shape[-1]
            handle = None
            if follow_stream and x.is_cuda:
                handle = _CUDA_GRAPH_CAPTURE if capturing() else stream_of(x)
            key = (elements, handle)
            scope = scopes.get(key)
            return scope if scope is not None else make(key)
        except Exception:  # a tensor subclass or fake tensor we cannot read: the plain brick
            return plain

    return choose_brick


def instrumented_class(cls: type, choose: Callable[[tuple], Any], nvtx: Any = None) -> type:
    """A subclass of ``cls`` whose calls run inside the scope ``choose`` picks.

    ``nvtx``: ``(push_range, pop_range, attributes)`` to mirror the scope into an NVTX range.
    """

    if nvtx is None:

        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
            # is_compiling() first: while torch.compile traces, the call goes straight
            # through and the branch folds away (no graph break, nothing recorded).
            if _is_compiling() or _state.recorder is None:
                return cls.__call__(self, *args, **kwargs)
            token = enter_scope(choose(args))
            try:
                result = cls.__call__(self, *args, **kwargs)
            except BaseException as exc:  # KeyboardInterrupt too: close exactly what we opened
                exit_scope(token, exc)
                raise
            exit_scope(token)
            return result

    else:
        push_range, pop_range, range_attributes = nvtx

        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
            if _is_compiling() or _state.recorder is None:
                return cls.__call__(self, *args, **kwargs)
            token = enter_scope(choose(args))
            push_range(range_attributes)
            try:
                result = cls.__call__(self, *args, **kwargs)
            except BaseException as exc:
                pop_range()
                exit_scope(token, exc)
                raise
            pop_range()
            exit_scope(token)
            return result

    def __reduce_ex__(self: Any, protocol: Any) -> Any:
        # Pickled and deep-copied as the original class: a copy is not instrumented,
        # and loading a pickle never needs this dynamically made class.
        return _as_original(cls.__reduce_ex__(self, protocol), subclass, cls)

    subclass = type(
        cls.__name__,
        (cls,),
        {
            "__call__": __call__,
            "__reduce_ex__": __reduce_ex__,
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "_brickscope_original_class": cls,
        },
    )
    return subclass


def _as_original(reduced: Any, subclass: type, cls: type) -> Any:
    """``reduced`` (a ``__reduce_ex__`` value) rebuilding an instance of ``cls``, not ``subclass``.

    Protocol 2+ gives ``copyreg.__newobj__``, which pickle refuses for another class
    than the object's; ``copyreg._reconstructor`` (what protocols 0-1 use) builds
    ``object.__new__(cls)`` and takes the same state.
    """
    if isinstance(reduced, tuple) and len(reduced) >= 2 and isinstance(reduced[1], tuple) and reduced[1]:
        constructor, args = reduced[0], reduced[1]
        if args[0] is subclass:
            if constructor is copyreg.__newobj__ and len(args) == 1:
                return (copyreg._reconstructor, (cls, object, None), *reduced[2:])
            if constructor is copyreg._reconstructor:
                return (constructor, (cls, *args[1:]), *reduced[2:])
    return reduced
