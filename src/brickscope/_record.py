# SPDX-License-Identifier: Apache-2.0
"""The compact record a scope leaves on the hot path, and the per-context scope stack.

A record is what exists of a scope until its timing is resolved at a sync point:
no span object, no attribute dict of our own, no span id unless something needs
it early. The stack of open scopes is a linked list of records in a ContextVar,
so it follows asyncio tasks and threads the way OpenTelemetry's context does
(DESIGN.md: one task's brick must never become another task's parent).
"""

from __future__ import annotations

from contextvars import ContextVar

KIND_STEP = 0
KIND_LAYER = 1
KIND_BRICK = 2
KIND_KERNEL = 3
KIND_NAMES = ("step", "layer", "brick", "kernel")


class Record:
    """One scope, open or ended but not yet turned into a span."""

    # Every slot is written by GpuSyncSpanProcessor.open() (no __init__: the hot path
    # writes each field once). What the scope object already knows (kind, name,
    # brick, elements, attributes) is read from ``owner`` at resolution instead.
    __slots__ = (
        "owner",  # the scope object that opened it (closing checks it; resolution reads it)
        "recorder",  # the GpuSyncSpanProcessor it was opened on
        "link",  # the record below on the scope stack
        "parent",  # the brickscope parent record, or None under a foreign span
        "otel_parent",  # SpanContext of the foreign parent span, if any
        "otel_context",  # the OTel context current inside this scope
        "trace_id",
        "span_id",  # 0 until someone needs it (a child, a user span, resolution)
        "span_context",  # SpanContext, made at resolution and shared by the children
        "sampled",
        "thread_id",
        "host_start",  # perf_counter_ns
        "host_end",
        "stream",  # timer StreamRef or None
        "start_mark",  # GPU timer marks; -1 when the GPU is not timing this scope
        "end_mark",
        "gpu_error",  # str: why GPU timing failed, or None
        "error",  # (type name, message, stacktrace) when the body raised
        "ended",
        "context_token",  # token of the OTel context this scope attached, or None
        "nested_ns",  # durations of bricks nested in this brick, summed at resolution
        "gpu_first",  # extent of GPU-timed scopes inside this one, epoch ns (0: none yet)
        "gpu_last",
        "enclosing",  # (brick, layer index, step number) around and including it; at resolution
    )

    def __repr__(self) -> str:
        return f"<Record {KIND_NAMES[self.owner._kind]} {self.owner._name!r}>"


#: The innermost open scope of the current context (thread or asyncio task).
TOP: ContextVar[Record | None] = ContextVar("brickscope_top", default=None)
