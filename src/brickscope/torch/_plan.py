# SPDX-License-Identifier: Apache-2.0
"""Which modules of a model become bricks or layers, and under what names: decided once,
at ``instrument()``, so the hot path only reads the answer.

Example::

    plan = make_plan(model, bricks={"lm_head": ("lm_head", "embedding")}, layers="auto",
                     skip=(), max_depth=None)
    [(m.path, m.kind, m.name, m.category, m.layer) for m in plan]
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import torch
from torch import nn

#: What a ``bricks`` entry maps to: a brick name, ``(name, category)``, or None (not a brick).
BrickTarget = Any

_ATTENTION = re.compile(r"attention|attn", re.IGNORECASE)
_FFN = re.compile(r"mlp|feedforward|feed_forward|ffn|intermediate", re.IGNORECASE)
_EMBEDDING_NAME = re.compile(r"embed", re.IGNORECASE)
_NORM_TYPES: tuple[type, ...] = tuple(
    t
    for t in (
        getattr(nn, "RMSNorm", None),
        nn.LayerNorm,
        nn.GroupNorm,
        nn.LocalResponseNorm,
        nn.modules.batchnorm._NormBase,  # BatchNorm*, InstanceNorm*
    )
    if t is not None
)
_LINEAR_TYPES = (nn.Linear, nn.Bilinear)
_EMBEDDING_TYPES = (nn.Embedding, nn.EmbeddingBag)
_LOSS_TYPES = (nn.modules.loss._Loss,)  # every built-in loss derives from it


class Mapped(NamedTuple):
    """One instrumented module: where it is, and the scope its calls open."""

    #: the module's path in the model (``"layers.3.attn"``; ``""`` for the model itself)
    path: str
    #: ``"brick"`` or ``"layer"``
    kind: str
    #: brick name (the path below the enclosing layer, the class name for the model); ``"layer"`` for layers
    name: str
    #: brick category (None: the catalog's, from the name); None for layers
    category: str | None
    #: the layer index (of the layer itself, or of the layer the module is in), or None
    layer: int | None
    #: the module object
    module: nn.Module


def default_category(module: nn.Module) -> str | None:
    """The built-in category for a module, or None when it is not instrumented by default.

    Types first (norms, embeddings, linear layers, losses), then the class name
    (``CausalSelfAttention`` -> attention, ``LlamaMLP`` / ``FeedForward`` /
    ``BertIntermediate`` -> ffn, ``LlamaRMSNorm`` -> norm), then the shape of a leaf's
    parameters (:func:`is_linear_shaped`: HuggingFace's ``Conv1D`` -> linear).
    """
    if isinstance(module, nn.MultiheadAttention):
        return "attention"
    if isinstance(module, _NORM_TYPES):
        return "norm"
    if isinstance(module, _EMBEDDING_TYPES):
        return "embedding"
    if isinstance(module, _LINEAR_TYPES):
        return "linear"
    if isinstance(module, _LOSS_TYPES):
        return "loss"
    name = type(module).__name__
    if _ATTENTION.search(name):
        return "attention"
    if _FFN.search(name):
        return "ffn"
    if name.endswith("Norm"):
        return "norm"
    if is_linear_shaped(module):
        return "linear"
    return None


def is_linear_shaped(module: nn.Module) -> bool:
    """Whether ``module`` is a linear layer by its parameters, whatever its class.

    A module with no children whose parameters are exactly a 2-D ``weight`` and,
    optionally, a 1-D ``bias`` as long as one of the weight's dimensions
    (HuggingFace's ``Conv1D`` keeps ``weight`` as ``(in, out)``, ``nn.Linear`` as
    ``(out, in)``), and whose class name does not say it is an embedding table.
    """
    if next(module.children(), None) is not None or _EMBEDDING_NAME.search(type(module).__name__):
        return False
    parameters = dict(module.named_parameters(recurse=False))
    weight, bias = parameters.pop("weight", None), parameters.pop("bias", None)
    if parameters or weight is None or weight.dim() != 2:
        return False
    return bias is None or (bias.dim() == 1 and bias.shape[0] in weight.shape)


def make_plan(
    model: nn.Module,
    bricks: Mapping[Any, BrickTarget] | None,
    layers: Any,
    skip: Iterable[Any],
    max_depth: int | None,
) -> list[Mapped]:
    """The modules of ``model`` to instrument, parents before children.

    Raises:
        TypeError, ValueError: a malformed argument (named in the message).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"brickscope.torch: instrument() needs a torch.nn.Module, got {type(model).__name__}")
    if isinstance(model, torch.jit.ScriptModule):
        raise TypeError("brickscope.torch: a TorchScript module cannot be instrumented; instrument the eager model")
    rules = _brick_rules(bricks)
    skips = _matchers(skip, "skip")
    layer_rule = _layer_rule(layers)
    if max_depth is not None and (not isinstance(max_depth, int) or isinstance(max_depth, bool) or max_depth < 0):
        raise ValueError(f"brickscope.torch: max_depth must be an int >= 0 or None, got {max_depth!r}")

    plan: list[Mapped] = []
    root = _map("", model, None, rules, layer_rule, None, None)
    if root is not None:
        plan.append(root)
    # torch.compile's wrapper: its own calls run eagerly and stand for the compiled model;
    # the paths inside read as the model's own (no "_orig_mod." prefix).
    inner = _orig_mod(model)
    top = inner if inner is not None else model
    # (path, module, depth, parent, enclosing layer path, its index)
    todo: list[tuple[str, nn.Module, int, nn.Module, str | None, int | None]] = [
        (name, child, 1, top, None, None) for name, child in reversed(list(top.named_children()))
    ]
    seen = {id(model), id(top)}
    while todo:
        path, module, depth, parent, layer_path, layer_index = todo.pop()
        if id(module) in seen:
            continue  # shared (tied) modules: the first path names them
        seen.add(id(module))
        if _matches(skips, path, module) or (max_depth is not None and depth > max_depth):
            continue  # the whole subtree
        if isinstance(module, torch.jit.ScriptModule):
            continue  # TorchScript: its calls do not go through Python
        mapped = _map(path, module, parent, rules, layer_rule, layer_path, layer_index)
        if mapped is not None:
            plan.append(mapped)
            if mapped.kind == "layer":
                layer_path, layer_index = path, mapped.layer
        for name, child in reversed(list(module.named_children())):
            todo.append((f"{path}.{name}", child, depth + 1, module, layer_path, layer_index))
    return plan


def _map(
    path: str,
    module: nn.Module,
    parent: nn.Module | None,
    rules: list[tuple[Any, BrickTarget]],
    layer_rule: Any,
    layer_path: str | None,
    layer_index: int | None,
) -> Mapped | None:
    if layer_path is None and _is_layer(layer_rule, path, module, parent):
        return Mapped(path, "layer", "layer", None, _layer_index(path), module)
    for matcher, target in rules:
        if _matches((matcher,), path, module):
            if target is None:
                return None
            name, category = target
            return Mapped(path, "brick", name, category, layer_index, module)
    if not path:  # the model itself: named after its class
        return Mapped(path, "brick", _class_name(module), default_category(module) or "other", None, module)
    category = default_category(module)
    if category is None:
        return None
    name = path[len(layer_path) + 1 :] if layer_path else path
    return Mapped(path, "brick", name, category, layer_index, module)


def _class_name(module: nn.Module) -> str:
    inner = _orig_mod(module)
    return type(inner if inner is not None else module).__name__


def _orig_mod(module: nn.Module) -> nn.Module | None:
    """The model inside a ``torch.compile`` wrapper (OptimizedModule), else None."""
    inner = getattr(module, "_orig_mod", None)
    return inner if isinstance(inner, nn.Module) and type(module).__name__ == "OptimizedModule" else None


def _is_layer(rule: Any, path: str, module: nn.Module, parent: nn.Module | None) -> bool:
    if rule is None or not path:
        return False
    if rule == "auto":
        # A numbered block in a ModuleList (model.layers.3, transformer.h.3), not a leaf.
        last = path.rsplit(".", 1)[-1]
        return last.isdigit() and isinstance(parent, nn.ModuleList) and next(module.children(), None) is not None
    return _matches(rule, path, module) and _layer_index(path) is not None


def _layer_index(path: str) -> int | None:
    numbers = [part for part in path.split(".") if part.isdigit()]
    return int(numbers[-1]) if numbers else None


def _brick_rules(bricks: Mapping[Any, BrickTarget] | None) -> list[tuple[Any, BrickTarget]]:
    if bricks is None:
        return []
    if not isinstance(bricks, Mapping):
        raise TypeError(f"brickscope.torch: bricks must be a mapping, got {type(bricks).__name__}")
    rules = []
    for key, target in bricks.items():
        (matcher,) = _matchers((key,), "bricks")
        rules.append((matcher, _target(key, target)))
    return rules


def _target(key: Any, target: BrickTarget) -> tuple[str, str | None] | None:
    if target is None:
        return None
    if isinstance(target, str) and target:
        return target, None
    if (
        isinstance(target, tuple)
        and len(target) == 2
        and isinstance(target[0], str)
        and target[0]
        and (target[1] is None or (isinstance(target[1], str) and target[1]))
    ):
        return target[0], target[1]
    raise ValueError(
        f"brickscope.torch: bricks[{key!r}] must be a brick name, a (name, category) pair or None, got {target!r}"
    )


def _matchers(keys: Iterable[Any], what: str) -> tuple[Any, ...]:
    if isinstance(keys, (str, type)):
        keys = (keys,)
    matchers = []
    for key in keys:
        if isinstance(key, str) and key:
            matchers.append(key)
        elif isinstance(key, type) and issubclass(key, nn.Module):
            matchers.append(key)
        else:
            raise TypeError(f"brickscope.torch: {what} entries must be module-path globs or nn.Module types, got {key!r}")
    return tuple(matchers)


def _layer_rule(layers: Any) -> Any:
    if layers is None or layers == "auto":
        return layers
    try:
        return _matchers(layers, "layers")
    except TypeError:
        raise ValueError(
            f"brickscope.torch: layers must be 'auto', None, or module-path globs / types, got {layers!r}"
        ) from None


def _matches(matchers: Iterable[Any], path: str, module: nn.Module) -> bool:
    for matcher in matchers:
        if isinstance(matcher, str):
            if fnmatch.fnmatchcase(path, matcher):
                return True
        elif isinstance(module, matcher):
            return True
    return False
