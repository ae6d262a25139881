# SPDX-License-Identifier: Apache-2.0
"""Scopes: brick, kernel, layer, step. Context managers and decorators (the hot path).

One module per concern:

- ``_scopes``: the scope classes, the enter/exit helpers and once-only warnings;
- ``_entry``: the Python twin of the C entry type (one use of a shared scope object);
- ``_factories``: ``brick``/``kernel``/``layer``/``step``, rebound to C at import;
- ``_compile``: torch.compile stand-ins for the C factories and tokens;
- ``_tokens``: ``enter_scope``/``exit_scope`` (and ``open_scope``, brickscope.torch's), ``start_brick``/``end_brick``, rebound to C at import;
- ``_additions``: ``record_gpu``, ``tile``, ``event``, ``sync``.

Example::

    import brickscope as bs

    with bs.layer(0):
        with bs.brick("rms_norm", elements=4096):
            y = rms_norm(x)

    @bs.brick("ffn_down")
    def ffn_down(x): ...
"""

from __future__ import annotations

from brickscope._scope._additions import Tile, event, record_gpu, sync, tile
from brickscope._scope._compile import register_compile_substitutes
from brickscope._scope._factories import brick, kernel, layer, step
from brickscope._scope._scopes import Brick, Kernel, Layer, Scope, Step
from brickscope._scope._tokens import (
    BrickHandle,
    ScopeToken,
    end_brick,
    enter_scope,
    exit_scope,
    open_scope,
    start_brick,
)

__all__ = [
    "Brick",
    "BrickHandle",
    "Kernel",
    "Layer",
    "Scope",
    "ScopeToken",
    "Step",
    "Tile",
    "brick",
    "end_brick",
    "enter_scope",
    "event",
    "exit_scope",
    "kernel",
    "layer",
    "open_scope",
    "record_gpu",
    "register_compile_substitutes",
    "start_brick",
    "step",
    "sync",
    "tile",
]
