# SPDX-License-Identifier: Apache-2.0
"""The hot path: what an instrumented module's call does.

Each instrumented module gets an instance attribute ``forward`` (an
:class:`InstrumentedForward`) that opens the module's scope around the module's own
``forward``; ``remove()`` deletes it again. ``type(module)`` is never touched, so
torch.profiler (which numbers modules per class: ``nn.Module: GPT2Attention_3``),
``repr``, ``state_dict``, ``torch.compile``'s guards and ``type(m) is nn.Linear`` see
the model as it is. Why not a pair of module hooks:

- cost: torch takes its slow path in ``_call_impl`` as soon as one forward hook
  exists; the same enter/exit in hooks costs more per call than in ``forward``
  (benchmarks/hot_path.py: ``torch_module_hooks`` against ``torch_module_instrumented``;
  docs/benchmarks.md);
- robustness: an ``always_call=True`` hook is not called on a ``KeyboardInterrupt``
  (``_call_impl`` catches ``Exception`` only), which would leave bricks open; a
  ``try``/``except BaseException`` closes exactly the scope it opened;
- nothing is left behind: the hook dicts are not touched, and ``remove()`` gives
  ``__dict__`` back as it was.

Everything per module (the scope objects by the first argument's shape, dtype and stream, NVTX
attributes, whether CUDA streams can occur at all) is decided once, at
``instrument()``, and kept in closures (a :class:`Choice`); per-call state lives in locals.

Where the C accelerator is built, the call runs in C (``brickscope._hotpath.module_call``:
the partial wraps it with the module's ``forward`` and a ``ModuleCall`` holding the
:class:`Choice`), without a Python frame of ours; the Python ``call`` below is the reference,
and runs instead under ``BRICKSCOPE_PURE_PYTHON=1``, with NVTX ranges, and while a frame
evaluator is installed (torch.compile's, so that Dynamo traces it as before). torch.compile
traces :func:`_module_call_in_graph` in its place.
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

from brickscope import _state, native
from brickscope._record import hotpath
from brickscope._scope import Brick, Layer, exit_scope, open_scope
from brickscope.torch import _losses
from brickscope.torch._plan import Mapped
from brickscope.trace.attributes import GPU_TIMING_SKIPPED, TORCH_MODULE_PATH

_COMPILING_FLAG = "_is_compiling_flag"  # the module global torch.compiler.is_compiling returns


def compiling_probe(is_compiling: Callable[[], bool]) -> Callable[[], bool]:
    """``is_compiling`` (``torch.compiler.is_compiling``), or its C twin where the accelerator is
    built and ``is_compiling`` is a function returning its module's ``_is_compiling_flag``.

    The twin (``brickscope._hotpath.torch_compiling``) reads that flag, which is the answer of
    ``is_compiling()`` whenever it runs as Python (its other branch is TorchScript's), without
    its two Python calls (about 1,100 instructions, once a module call); torch.compile's
    tracing calls a substitute that answers True, as it folds ``is_compiling()`` itself
    (``brickscope._scope._compile``)."""
    code = getattr(is_compiling, "__code__", None)
    scope = getattr(is_compiling, "__globals__", None)
    if hotpath is None or code is None or _COMPILING_FLAG not in code.co_names:
        return is_compiling
    if not isinstance(scope, dict) or _COMPILING_FLAG not in scope:
        return is_compiling
    hotpath.init_torch_compiling(scope, _COMPILING_FLAG, is_compiling)
    return hotpath.torch_compiling  # type: ignore[no-any-return]


_is_compiling = compiling_probe(torch.compiler.is_compiling)
_Tensor = torch.Tensor
_SCOPES_PER_MODULE = 64  # distinct (shape, dtype, stream) scopes cached per module; beyond: built per call
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


class Choice(NamedTuple):
    """What a module call's scope is chosen from, decided once per module (:func:`scope_choice`)."""

    #: A layer's scope; for a brick, the one a call without a readable tensor argument opens.
    plain: Any
    #: A brick's scopes by the first argument's (shape, dtype[, stream]); None for a layer.
    scopes: dict[Any, Any] | None
    #: ``make(key)``: the brick of a key not in ``scopes`` (kept there while it holds fewer
    #: than 64); None for a layer.
    make: Callable[[tuple[Any, ...]], Any] | None
    #: The key has the current CUDA stream (or marks a graph capture): ``stream="current"``
    #: where CUDA tensors can occur.
    follow_stream: bool


def scope_choice(mapped: Mapped, stream: Any, cuda: bool | None = None) -> Choice:
    """The :class:`Choice` for one module: how the scope its call opens is picked.

    Layers have one scope. A brick's scope carries the element count of the call's
    first tensor argument (rows: all dimensions but the last of a floating-point
    tensor, every element of an index tensor, so tokens for a transformer) and, on
    CUDA with ``stream="current"``, the current torch stream.

    ``cuda``: whether CUDA tensors can occur in this process (default:
    ``torch.cuda.is_available()``, asked once); without CUDA the stream is never looked at.
    """
    if mapped.kind == "layer":
        return Choice(Layer(mapped.layer), None, None, False)

    name, category = mapped.name, mapped.category
    attributes = {TORCH_MODULE_PATH: mapped.path}
    fixed_stream = None if stream == "current" else stream
    plain = Brick(name, category, 0, fixed_stream, **attributes)
    if cuda is None:
        cuda = torch.cuda.is_available()
    # Keyed by the first argument's (shape, dtype[, stream]): two attribute reads a call, where
    # numel(), is_floating_point() and dim() were three calls through torch's argument parser;
    # the element count is worked out once per key, when its scope is made.
    scopes: dict[Any, Any] = {}

    def make(key: tuple) -> Any:
        shape, dtype = key[0], key[1]
        handle = key[2] if len(key) > 2 else None
        elements = math.prod(shape)
        if elements and dtype.is_floating_point and len(shape) > 1:
            elements //= shape[-1]
        if handle is _CUDA_GRAPH_CAPTURE:
            scope = HostOnlyBrick(name, category, elements, None, **attributes, **{GPU_TIMING_SKIPPED: handle})
        else:
            scope = Brick(name, category, elements, fixed_stream if handle is None else handle, **attributes)
        if len(scopes) < _SCOPES_PER_MODULE:
            scopes[key] = scope
        return scope

    return Choice(plain, scopes, make, stream == "current" and cuda)


def scope_chooser(choice: Choice) -> Callable[[tuple], Any]:
    """``choose(args) -> scope``: the scope a call with positional arguments ``args`` opens,
    picked as ``choice`` says. Never raises an ``Exception``: a call it cannot read opens the
    plain brick."""
    plain, scopes, make = choice.plain, choice.scopes, choice.make
    if scopes is None or make is None:

        def choose_layer(args: tuple) -> Any:
            return plain

        return choose_layer

    if not choice.follow_stream:

        def choose_host_brick(args: tuple) -> Any:
            if not args:
                return plain
            x = args[0]
            if not isinstance(x, _Tensor):
                return plain
            try:
                key = (x.shape, x.dtype)
                scope = scopes.get(key)
                return scope if scope is not None else make(key)
            except Exception:  # a tensor subclass or fake tensor we cannot read: the plain brick
                return plain

        return choose_host_brick

    stream_of, capturing = current_stream_handle, is_capturing

    def choose_brick(args: tuple) -> Any:
        if not args:
            return plain
        x = args[0]
        if not isinstance(x, _Tensor):
            return plain
        try:
            handle = None
            if x.is_cuda:
                handle = _CUDA_GRAPH_CAPTURE if capturing() else stream_of(x)
            key = (x.shape, x.dtype, handle)
            scope = scopes.get(key)
            return scope if scope is not None else make(key)
        except Exception:  # a tensor subclass or fake tensor we cannot read: the plain brick
            return plain

    return choose_brick


class InstrumentedForward(functools.partial):
    """An instrumented module's ``forward`` (an instance attribute, set by :func:`wrap_forward`).

    A ``functools.partial`` so that ``inspect.signature`` follows ``__wrapped__`` to the
    module's own ``forward`` (HuggingFace's ``Trainer`` and ``generate`` read it), and so
    that pickling or deep-copying the module rebuilds the module's plain ``forward``:
    a copy is not instrumented, and nothing needs this object to load.
    """

    module: nn.Module
    replaced: Any  # the instance attribute ``forward`` the module had before, or None
    owner: Any  # weakref to the Instrumentation that set it

    def __reduce__(self) -> Any:
        return (_plain_forward, (self.module, self.replaced))


def _plain_forward(module: nn.Module, replaced: Any) -> Any:
    """The ``forward`` a copy of an instrumented module gets: what it had before instrumenting."""
    return replaced if replaced is not None else types.MethodType(type(module).forward, module)


def wrap_forward(
    module: nn.Module, choice: Choice, nvtx: Any = None, losses: bool | None = None
) -> InstrumentedForward:
    """An :class:`InstrumentedForward` running ``module``'s forward inside the scope ``choice`` picks.

    ``nvtx``: ``(push_range, pop_range, attributes)`` to mirror the scope into an NVTX range.
    ``losses``: True for the model itself (functional losses inside its call are bricks),
    False for a loss module (they are not: the module's brick times them), None otherwise.
    The caller sets it as ``module.forward``.
    """
    replaced = module.__dict__.get("forward")
    forward = module.forward  # bound once: the class's forward, or the instance's own
    timed = forward if losses is None else _losses.arming(forward, losses)

    choose = scope_chooser(choice)
    if nvtx is None:

        def call(*args: Any, **kwargs: Any) -> Any:
            # is_compiling() first: while torch.compile traces, the call goes straight
            # through and the branch folds away (no graph break, nothing recorded); asked
            # once a call (open_scope does not ask again).
            if _is_compiling() or _state.recorder is None:
                return forward(*args, **kwargs)
            token = open_scope(choose(args))
            try:
                result = timed(*args, **kwargs)
            except BaseException as exc:  # KeyboardInterrupt too: close exactly what we opened
                exit_scope(token, exc)
                raise
            exit_scope(token)
            return result

    else:
        push_range, pop_range, range_attributes = nvtx

        def call(*args: Any, **kwargs: Any) -> Any:
            if _is_compiling() or _state.recorder is None:
                return forward(*args, **kwargs)
            token = open_scope(choose(args))
            push_range(range_attributes)
            try:
                result = timed(*args, **kwargs)
            except BaseException as exc:
                pop_range()
                exit_scope(token, exc)
                raise
            pop_range()
            exit_scope(token)
            return result

    if nvtx is None and _accelerated is not None:  # the same call in C (_MODULE_CALL)
        follow = choice.follow_stream
        state = _accelerated.ModuleCall(
            timed=timed, plain=choice.plain, scopes=None if follow else choice.scopes,
            make=None if follow else choice.make, choose=choose if follow else None, reference=call,
        )  # fmt: skip
        return _finish(InstrumentedForward(_accelerated.module_call, forward, state), module, replaced, forward)
    return _finish(InstrumentedForward(call), module, replaced, forward)


def _finish(wrapper: InstrumentedForward, module: nn.Module, replaced: Any, forward: Any) -> InstrumentedForward:
    wrapper.module = module
    wrapper.replaced = replaced
    wrapper.owner = None
    wrapper.__wrapped__ = forward  # type: ignore[attr-defined]
    return wrapper


def _module_call_in_graph(forward: Any, state: Any, *args: Any, **kwargs: Any) -> Any:
    """What torch.compile traces for the C module call: the plain forward, as the Python
    ``call`` does while compiling (nothing recorded, no graph break)."""
    return forward(*args, **kwargs)


def _load_module_call() -> types.ModuleType | None:
    """``brickscope._hotpath`` with its ``module_call`` registered, or None (the Python ``call``
    runs), with the reason noted in ``brickscope.implementations()``."""
    if hotpath is None:
        native.note(_MODULE_CALL, "python", native.implementations()["brickscope._hotpath"].reason)
        return None
    substitute = getattr(torch.compiler, "substitute_in_graph", None)
    if not hasattr(hotpath, "module_call"):
        native.refuse(_MODULE_CALL, "this build of brickscope._hotpath has no module_call (rebuild it)")
        return None
    if substitute is None:  # Dynamo would break the graph at the C call
        native.refuse(_MODULE_CALL, "torch.compiler.substitute_in_graph is missing (torch < 2.5)")
        return None
    hotpath.init_module_calls(calls_globals=globals(), compiling_name="_is_compiling", tensor=_Tensor)
    substitute(hotpath.module_call, skip_signature_check=True)(_module_call_in_graph)
    native.note(_MODULE_CALL, "c")
    return hotpath


#: The part's name in ``brickscope.implementations()``: an instrumented module's call in C
#: (``module_call``; the NVTX-mirroring call stays the Python one).
_MODULE_CALL = "brickscope._hotpath.ModuleCall"
_accelerated = _load_module_call()
