# SPDX-License-Identifier: Apache-2.0
"""The scope stack's ContextVar sits in a first-level slot of the context's trie of its own:
where two variables set on every scope share one, each set and reset copies a second-level
node too (about a quarter of an unsampled brick's record, in one process in 32)."""

from __future__ import annotations

import contextvars

from opentelemetry.sdk.trace import TracerProvider

import brickscope as bs
from brickscope import _otel_context, _record
from brickscope._context_trie import slots_in_use, trie_slot, variable_apart


def test_a_slot_is_five_bits_of_the_hash_folded_to_32_bits():
    var: contextvars.ContextVar[int] = contextvars.ContextVar("x")
    h = hash(var) % (1 << 64)
    assert trie_slot(var) == ((h % (1 << 32)) ^ (h >> 32)) % 32
    assert all(0 <= trie_slot(contextvars.ContextVar(f"v{i}")) < 32 for i in range(100))


def test_the_variable_made_avoids_the_slots_given():
    evens = set(range(0, 32, 2))
    for _ in range(20):
        var = variable_apart("brickscope_test", evens)
        assert trie_slot(var) % 2 == 1
        assert var.get() is None  # a default of None, as the scope stack's


def test_with_every_slot_taken_it_still_makes_one():
    var = variable_apart("brickscope_test", set(range(32)))
    assert isinstance(var, contextvars.ContextVar)


def test_opentelemetrys_current_context_variable_is_among_the_slots_in_use():
    assert _otel_context.runtime_var is not None
    assert trie_slot(_otel_context.runtime_var) in slots_in_use()


def test_the_scope_stack_and_opentelemetrys_context_set_in_a_scope_have_slots_of_their_own():
    bs.configure(TracerProvider(), clock="host", propagate_context=True)
    with bs.step(0), bs.brick("b"):
        in_scope = set(contextvars.copy_context())
    assert {_record.TOP, _otel_context.runtime_var} <= in_scope
    assert trie_slot(_record.TOP) != trie_slot(_otel_context.runtime_var)
