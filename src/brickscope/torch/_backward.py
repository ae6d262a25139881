# SPDX-License-Identifier: Apache-2.0
"""Backward bricks (``instrument(backward=True)``): one brick per module's backward pass.

Through the module's full backward hooks: the pre-hook (gradients with respect to
the outputs are ready: the module's backward starts) opens ``<name>.backward`` and
the hook (gradients with respect to the inputs are ready) closes it. Autograd runs
CPU work on the thread that called ``backward()``, so these bricks nest under
whatever scope is open there (a ``backward`` brick of your own, the step); CUDA
backward runs on autograd's device threads, where they are roots of their own.

Layers get the same pair of hooks opening their layer scope, so a block's backward
bricks nest under ``layer N`` as its forward bricks do. The model itself gets none
(unless it is a module of a recognised kind, such as a loss module instrumented on its
own): its backward is the whole backward pass (the caller's ``backward`` brick or step), it
often returns a dict-like output (HuggingFace's ``ModelOutput``) that full backward
hooks warn about, and with token ids as input it would end as soon as it starts.
Embeddings get none for that last reason.

Off by default: full backward hooks route every output of the module through an
autograd function (a cost, and an error for in-place changes of a module's output).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from brickscope._scope import Brick, Layer, enter_scope, exit_scope
from brickscope.torch._plan import Mapped
from brickscope.trace.attributes import LAYER_INDEX, TORCH_MODULE_PATH, TORCH_PASS

# Modules whose inputs are indices: no gradient flows into them, so torch would call their
# backward hook as soon as their backward starts (docs/torch.md); no backward brick.
_INDEX_INPUTS = (nn.Embedding, nn.EmbeddingBag)


class BackwardBricks:
    """The backward hooks of one model's modules, and the bricks they hold open."""

    def __init__(self) -> None:
        self._handles: list[Any] = []
        self._flags: list[tuple[nn.Module, Any]] = []  # each module's _is_full_backward_hook before
        self._open: dict[int, list[Any]] = {}  # id(module) -> tokens, innermost last

    def add_plan(self, plan: list[Mapped]) -> None:
        """Hook every planned module but a model of no recognised kind and index-input modules (embeddings)."""
        for mapped in plan:
            if (mapped.path or mapped.category != "other") and not isinstance(mapped.module, _INDEX_INPUTS):
                self.add(mapped)

    def add(self, mapped: Mapped) -> None:
        """Time ``mapped``'s backward pass: a brick ``<name>.backward``, or its layer scope."""
        if mapped.kind == "layer":
            scope: Any = Layer(mapped.layer)
        else:
            attributes = {TORCH_MODULE_PATH: mapped.path, TORCH_PASS: "backward"}
            if mapped.layer is not None:
                attributes[LAYER_INDEX] = mapped.layer
            scope = Brick(f"{mapped.name}.backward", mapped.category, 0, None, **attributes)
        tokens = self._open.setdefault(id(mapped.module), [])

        def started(module: nn.Module, grad_output: Any) -> None:
            tokens.append(enter_scope(scope))

        def finished(module: nn.Module, grad_input: Any, grad_output: Any) -> None:
            if tokens:
                exit_scope(tokens.pop())

        module = mapped.module
        self._flags.append((module, module.__dict__.get("_is_full_backward_hook")))
        self._handles.append(module.register_full_backward_pre_hook(started))
        self._handles.append(module.register_full_backward_hook(finished))

    def remove(self) -> None:
        """Remove the hooks, restore each module's hook flag, close bricks a failed backward left open."""
        for handle in self._handles:
            handle.remove()
        for module, flag in self._flags:
            module.__dict__["_is_full_backward_hook"] = flag
        for tokens in self._open.values():
            while tokens:
                exit_scope(tokens.pop(), RuntimeError("backward did not finish before remove()"))
        self._handles, self._flags, self._open = [], [], {}
