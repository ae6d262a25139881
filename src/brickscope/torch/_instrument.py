# SPDX-License-Identifier: Apache-2.0
"""``instrument(model)`` and the handle that undoes it."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from brickscope._gpu._streams import stream_handle
from brickscope.torch import _calls, _losses, _nvtx
from brickscope.torch._backward import BackwardBricks
from brickscope.torch._plan import BrickTarget, Mapped, make_plan

logger = logging.getLogger(__name__)


class Instrumentation:
    """What :func:`instrument` did to a model; :meth:`remove` undoes it exactly.

    Also a context manager: the model is instrumented inside the ``with`` block.

    Attributes:
        modules: the instrumented modules, parents before children (:class:`Mapped`).

    .. versionadded:: 0.2.0
    """

    def __init__(
        self, modules: tuple[Mapped, ...], wrapped: list[_calls.InstrumentedForward], backward: BackwardBricks | None
    ) -> None:
        self.modules = modules
        self._wrapped = wrapped
        self._backward = backward
        self.automatic = False  # made by the zero-code instrumentor

    def remove(self) -> None:
        """Take every instrumented module's ``forward`` away again. Idempotent.

        A module whose ``forward`` attribute was replaced since (by user code, while
        instrumented) is left as it is, with one warning.
        """
        wrapped, self._wrapped = self._wrapped, []
        if wrapped:
            _losses.uninstall()
        if self._backward is not None:
            self._backward.remove()
            self._backward = None
        for wrapper in wrapped:
            module = wrapper.module
            if module.__dict__.get("forward") is not wrapper:
                logger.warning(
                    "brickscope.torch: the forward of a %s was replaced while instrumented; left as it is",
                    type(module).__name__,
                )
            elif wrapper.replaced is None:
                del module.__dict__["forward"]
            else:
                module.__dict__["forward"] = wrapper.replaced

    def __enter__(self) -> Instrumentation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        state = "removed" if not self._wrapped else f"{len(self._wrapped)} modules"
        return f"<brickscope.torch.Instrumentation {state}>"


def instrument(
    model: nn.Module,
    bricks: Mapping[Any, BrickTarget] | None = None,
    layers: Any = "auto",
    skip: Iterable[Any] = (),
    max_depth: int | None = None,
    stream: Any = "current",
    nvtx: Any = "auto",
    backward: bool = False,
) -> Instrumentation:
    """Make each mapped module call of ``model`` a brick (or a layer), without editing it.

    Args:
        model: the model (an ``nn.Module``, also one returned by ``torch.compile``).
        bricks: module-path globs (``"layers.*.attn"``) or module types mapped to a
            brick name, a ``(name, category)`` pair, or None (not a brick; its children
            still are considered). Checked in order, before the defaults: the model
            itself as a brick named after its class; norms, embeddings, linear layers,
            losses by type; attention and MLP/feed-forward modules by class name. A
            catch-all ``"*": None`` last turns the defaults off.
        layers: ``"auto"`` (each numbered block of an ``nn.ModuleList`` that has
            children: ``model.layers.3`` is layer 3), None (no layers), or globs/types;
            a layer's index is the last number in its path. Layers do not nest.
        skip: globs or types whose modules and everything below are left alone.
        max_depth: instrument modules at most this deep (the model is 0,
            ``layers.3.attn`` is 3); None: no limit.
        stream: ``"current"`` (on CUDA, the current torch stream when the call
            starts), None (the enclosing scope's) or a stream object for every brick.
        nvtx: ``"auto"`` mirrors bricks into NVTX ranges (domain ``brickscope``) when
            the ``nvtx`` package is installed; True requires it; False never.
        backward: also time each brick module's backward pass as a brick
            ``<name>.backward`` (through full backward hooks; off by default, see docs/torch.md).

    Returns:
        The handle; ``.remove()`` (or leaving its ``with`` block) restores the model.

    Raises:
        TypeError, ValueError: a malformed argument, or a module already instrumented.

    .. versionadded:: 0.2.0
    """
    if stream != "current" and stream is not None:
        stream_handle(stream)  # TypeError/ValueError now, not at the first call
    plan = make_plan(model, bricks, layers, skip, max_depth)
    for mapped in plan:
        owner = _owner(mapped.module)
        if owner is not None and owner.automatic:
            owner.remove()  # the zero-code instrumentor's: the program's own settings win
        elif is_instrumented(mapped.module):
            raise ValueError(
                f"brickscope.torch: module {mapped.path or type(mapped.module).__name__!r} is already "
                "instrumented; remove() the first instrumentation before instrumenting again"
            )
    if not isinstance(backward, bool):
        raise TypeError(f"brickscope.torch: backward must be True or False, got {backward!r}")
    return apply_plan(plan, stream, _nvtx.load_domain(nvtx), backward)


def apply_plan(
    plan: list[Mapped], stream: Any, domain: Any, backward: bool = False, automatic: bool = False
) -> Instrumentation:
    """Give each planned module its instrumented ``forward`` (arguments already checked).

    ``automatic``: made by the zero-code instrumentor, which an explicit ``instrument()`` replaces.
    """
    wrapped: list[_calls.InstrumentedForward] = []
    backward_bricks = BackwardBricks() if backward else None
    cuda = torch.cuda.is_available()  # once: without CUDA no call looks at streams
    for mapped in plan:
        mirror = None
        if domain is not None:  # Nsight has no layer attribute: the index goes in the range's name
            label = mapped.name if mapped.kind == "brick" else f"layer {mapped.layer}"
            mirror = _nvtx.range_for(domain, label, mapped.category)
        # Functional losses: bricks inside the model's call, not inside a loss module's own brick.
        losses = False if mapped.category == "loss" else (True if not mapped.path else None)
        wrapper = _calls.wrap_forward(mapped.module, _calls.scope_choice(mapped, stream, cuda), mirror, losses)
        mapped.module.__dict__["forward"] = wrapper
        wrapped.append(wrapper)
    if backward_bricks is not None:
        backward_bricks.add_plan(plan)
    if wrapped:  # undone by remove(), which uninstalls when it finds modules to restore
        _losses.install(lambda loss: _calls.scope_chooser(_calls.scope_choice(loss, stream, cuda)))
    handle = Instrumentation(tuple(plan), wrapped, backward_bricks)
    handle.automatic = automatic
    owner = weakref.ref(handle)
    for wrapper in wrapped:
        wrapper.owner = owner
    return handle


def _owner(module: nn.Module) -> Instrumentation | None:
    """The live handle that instrumented ``module``, if any."""
    wrapper = module.__dict__.get("forward")
    if not isinstance(wrapper, _calls.InstrumentedForward) or wrapper.owner is None:
        return None
    return wrapper.owner()


def is_instrumented(module: nn.Module) -> bool:
    """Whether ``module`` currently has an instrumented ``forward``."""
    return isinstance(module.__dict__.get("forward"), _calls.InstrumentedForward)
