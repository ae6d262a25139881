# SPDX-License-Identifier: Apache-2.0
"""A ContextVar placed apart from the variables it is set beside, in CPython's context mapping.

A context (``contextvars``) maps variables to values in a hash array mapped trie whose
first level takes 5 bits of each variable's hash, and a variable's hash is drawn from its
address: random per process. Where two variables set on every scope share a first-level
slot, each set and reset copies a second-level node as well: about 125 ns more a set and
reset on CPython 3.11, some 25 % of an unsampled brick's record, in one process in 32
(docs/benchmarks.md, "The record on CPython 3.11-3.13"). The scope stack's variable is
made until its slot is one no variable already set in the context takes (OpenTelemetry's
current context among them), so every process records at the same cost.

Example::

    TOP = variable_apart("brickscope_top", slots_in_use())
"""

from __future__ import annotations

import contextvars
from collections.abc import Collection
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as _otel

#: Variables made before one fits: where every slot is taken (32 variables set), the first.
_TRIES = 64


def trie_slot(var: ContextVar[Any]) -> int:
    """The first-level slot of ``var`` in a context's trie: the low 5 bits of its hash folded
    to 32 bits, as CPython's ``hamt_hash`` folds it."""
    h = hash(var) & 0xFFFF_FFFF_FFFF_FFFF
    return ((h & 0xFFFF_FFFF) ^ (h >> 32)) & 31


def slots_in_use() -> set[int]:
    """The slots of the variables set in the current context, with OpenTelemetry's
    current-context variable set too (through the public API: it is set on every scope that
    propagates context)."""
    token = _otel.attach(_otel.get_current())
    try:
        return {trie_slot(var) for var in contextvars.copy_context()}
    finally:
        _otel.detach(token)


def variable_apart(name: str, avoid: Collection[int]) -> ContextVar[Any]:
    """A new ``ContextVar(name, default=None)`` whose slot is not in ``avoid`` (the first one
    made, where none of ``_TRIES`` is)."""
    made = []  # held until one is chosen: a freed variable's address, so its hash, comes back
    for _ in range(_TRIES):
        var: ContextVar[Any] = ContextVar(name, default=None)
        made.append(var)
        if trie_slot(var) not in avoid:
            return var
    return made[0]
