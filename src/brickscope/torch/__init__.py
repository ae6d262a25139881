# SPDX-License-Identifier: Apache-2.0
"""PyTorch integration: instrument a model in one line.

Example::

    import brickscope as bs
    import brickscope.torch

    session = bs.configure()
    with brickscope.torch.instrument(model):        # or handle = instrument(model) ... handle.remove()
        for n, batch in enumerate(loader):
            with bs.step(n):
                loss = model(batch)
                loss.backward()

Every mapped module call becomes a brick (attention, ffn, norm, embedding, linear,
loss by default), each numbered block of a ``ModuleList`` a layer, so the span
tree mirrors the module tree. See docs/torch.md for what is and is not covered
(torch.compile, CUDA graphs, NVTX, backward, cost).

Needs the ``torch`` extra (``pip install 'brickscope[torch]'``); ``import
brickscope`` alone never imports torch.
"""

from __future__ import annotations

try:
    import torch
except ImportError as exc:  # pragma: no cover - exercised without torch
    raise ImportError(
        "brickscope.torch needs PyTorch: pip install 'brickscope[torch]' (or any torch >= 2.4)"
    ) from exc

from brickscope import _scope, _state
from brickscope.torch._instrument import Instrumentation, instrument
from brickscope.torch._plan import Mapped

# Any brickscope scope traced by torch.compile records nothing and breaks no graph.
_state.compiling = torch.compiler.is_compiling
_scope.register_compile_substitutes(torch)  # the C accelerator's factories, if built

__all__ = ["Instrumentation", "Mapped", "instrument"]
