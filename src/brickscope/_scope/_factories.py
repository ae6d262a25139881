# SPDX-License-Identifier: Apache-2.0
"""The scope factories ``brick``, ``kernel``, ``layer`` and ``step``: one shared scope object
per name or index, and the C accelerator's factories bound over them at import."""

from __future__ import annotations

from typing import Any

from brickscope import _state
from brickscope._scope._entry import _entry, _make_entry
from brickscope._scope._scopes import Brick, Kernel, Layer, Scope, Step, _hot

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


def brick(name: str, category: str | None = None, elements: int = 0, stream: Any = None, **attributes: Any) -> Scope:
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
) -> Scope:
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


def layer(index: int, **attributes: Any) -> Scope:
    """A layer scope grouping bricks (trueno's Layer -> Brick -> Kernel). Arguments as :class:`Layer`.

    .. versionadded:: 0.1.0
    """
    return _indexed(Layer, _layers, index, attributes)


def step(number: int, **attributes: Any) -> Scope:
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
    brick = _hot.factory("brick", _bricks, brick, False, Brick)
    kernel = _hot.factory("kernel", _kernels, kernel, False)
    layer = _hot.factory("layer", _layers, layer, True)
    step = _hot.factory("step", _steps, step, True)
