# SPDX-License-Identifier: Apache-2.0
"""The brick catalog: which category each brick name belongs to.

Names resolve to a :class:`BrickInfo` once and are cached, so a scope built per
call costs one dictionary lookup. Unknown names become dynamic bricks in
``other`` unless the caller gives a category.

Example::

    from brickscope import register_brick
    register_brick("flash_decode", "attention")
"""

from __future__ import annotations

import threading
from typing import NamedTuple

#: Built-in categories. Any other non-empty string is accepted as a new category.
CATEGORIES = ("norm", "attention", "ffn", "embedding", "sampling", "communication", "memory", "other")

#: trueno's standard LLM brick set, plus common neighbours, with their categories.
BUILTIN_BRICKS: dict[str, str] = {
    "rms_norm": "norm",
    "layer_norm": "norm",
    "qkv_projection": "attention",
    "rope": "attention",
    "attention_score": "attention",
    "attention_softmax": "attention",
    "attention_output": "attention",
    "output_projection": "attention",
    "kv_cache_update": "memory",
    "ffn_gate": "ffn",
    "ffn_up": "ffn",
    "ffn_down": "ffn",
    "activation": "ffn",
    "residual": "other",
    "embedding": "embedding",
    "lm_head": "embedding",
    "sampling": "sampling",
    "all_reduce": "communication",
    "all_gather": "communication",
    "reduce_scatter": "communication",
    "memcpy_h2d": "memory",
    "memcpy_d2h": "memory",
}


class BrickInfo(NamedTuple):
    """A brick name resolved once: its name, its category, whether it is built in."""

    name: str
    category: str
    builtin: bool


_lock = threading.Lock()
_registry: dict[str, str] = dict(BUILTIN_BRICKS)
# (name, category or None) -> BrickInfo; filled on first use of each pair.
_resolved: dict[tuple[str, str | None], BrickInfo] = {}


def check_name(name: object, what: str = "name") -> str:
    """Return ``name`` if it is a non-empty str; raise TypeError/ValueError otherwise."""
    if not isinstance(name, str):
        raise TypeError(f"brickscope: {what} must be a str, got {type(name).__name__}: {name!r}")
    if not name:
        raise ValueError(f"brickscope: {what} must not be empty")
    return name


def check_category(category: object) -> str | None:
    """Return ``category`` if it is None or a non-empty str; raise otherwise."""
    if category is None:
        return None
    return check_name(category, "category")


def register_brick(name: str, category: str) -> None:
    """Add (or re-categorise) a brick name, for every scope created afterwards.

    Raises:
        TypeError, ValueError: ``name`` or ``category`` is not a non-empty str.
    """
    check_name(name)
    check_name(category, "category")
    with _lock:
        _registry[name] = category
        for key in [key for key in _resolved if key[0] == name]:
            del _resolved[key]


def resolve(name: str, category: str | None) -> BrickInfo:
    """The brick for ``name``; an explicit ``category`` overrides the catalog's."""
    key = (name, category)
    info = _resolved.get(key)
    if info is None:
        known = _registry.get(name)
        info = BrickInfo(name, category or known or "other", name in BUILTIN_BRICKS)
        _resolved[key] = info
    return info


def reset() -> None:
    """Forget registered bricks (tests)."""
    with _lock:
        _registry.clear()
        _registry.update(BUILTIN_BRICKS)
        _resolved.clear()
