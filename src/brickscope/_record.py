# SPDX-License-Identifier: Apache-2.0
"""The compact record a scope leaves on the hot path, and the per-context scope stack.

A record is what exists of a scope until its timing is resolved at a sync point:
no span object, no attribute dict of our own, no span id unless something needs
it early. The stack of open scopes is a linked list of records in a ContextVar,
so it follows asyncio tasks and threads the way OpenTelemetry's context does
(docs/design.md: one task's brick must never become another task's parent).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from brickscope import native
from brickscope._context_trie import slots_in_use, variable_apart

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

KIND_STEP = 0
KIND_LAYER = 1
KIND_BRICK = 2
KIND_KERNEL = 3
KIND_NAMES = ("step", "layer", "brick", "kernel")


class Record:
    """One scope, open or ended but not yet turned into a span.

    Every field is written by ``Recorder.open()`` (no ``__init__``: the
    hot path writes each field once). What the scope object already knows (kind,
    name, brick, elements, attributes) is read from ``owner`` at resolution instead.
    """

    owner: Any  # the scope object it records (resolution reads name, kind, brick... from it)
    opener: Any  # what a ``with`` exit matches it by: the entry or shared scope that opened it, or None
    recorder: Any  # the Recorder it was opened on
    link: Record | None  # the record below on the scope stack
    parent: Record | None  # the brickscope parent record, or None under a foreign span
    otel_parent: SpanContext | None  # the foreign parent span's context, if any
    otel_context: Any  # the OTel context current inside this scope
    trace_id: int
    span_id: int  # 0 until someone needs it (a child, a user span, resolution)
    span_context: SpanContext | None  # made at resolution and shared by the children
    sampled: bool
    thread_id: int
    thread_name: str  # the thread's name when the scope opened (an ended thread's id may be reused)
    host_start: int  # perf_counter_ns
    host_end: int
    stream: Any  # the timer's StreamRef, or None
    start_mark: int  # GPU timer marks; -1 when the GPU is not timing this scope
    end_mark: int
    gpu_error: str | None  # why GPU timing failed
    error: tuple[str, str, str] | None  # (type name, message, stacktrace) when the body raised
    ended: bool
    context_token: Any  # token of the OTel context this scope attached, or None
    nested_ns: int  # durations of bricks nested in this brick, summed at resolution
    gpu_first: int  # extent of GPU-timed scopes inside this one, epoch ns (0: none yet)
    gpu_last: int
    enclosing: tuple[Any, int | None, int | None] | None  # (brick, layer, step) around it; memo
    notes: Any  # ScopeNotes: attributes/events user code added while open (_scope_data), or None

    __slots__ = (
        "owner", "opener", "recorder", "link", "parent", "otel_parent", "otel_context", "trace_id",
        "span_id", "span_context", "sampled", "thread_id", "thread_name", "host_start", "host_end", "stream",
        "start_mark", "end_mark", "gpu_error", "error", "ended", "context_token", "nested_ns",
        "gpu_first", "gpu_last", "enclosing", "notes",
    )  # fmt: skip

    def __repr__(self) -> str:
        owner = getattr(self, "owner", None)
        if owner is None:
            return "<brickscope scope token (inert)>"
        return f"<brickscope scope token: {KIND_NAMES[owner._kind]} {owner._name!r}>"


#: The innermost open scope of the current context (thread or asyncio task); in its own slot
#: of the context's trie (``_context_trie``).
TOP: ContextVar[Record | None] = variable_apart("brickscope_top", slots_in_use())

#: The ``ABI_VERSION`` of ``brickscope._hotpath`` this Python code was written for (what its
#: registration calls pass, its key tables, its types' layouts): another build is refused.
HOTPATH_ABI = 4
#: The scope hot path in C (``brickscope._hotpath``), or None: the Python code here, in
#: ``_scope`` and in ``trace._recorder`` runs (the reference; see ``brickscope.native``).
hotpath = native.load("brickscope._hotpath", abi=HOTPATH_ABI)
#: The pure-Python record (the reference layout).
PyRecord = Record
if hotpath is not None:
    hotpath.init_stack(top=TOP, kind_names=KIND_NAMES)
    Record = hotpath.Record  # type: ignore[misc]  # same attributes, in C
