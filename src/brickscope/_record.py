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
from typing import Any

KIND_STEP = 0
KIND_LAYER = 1
KIND_BRICK = 2
KIND_KERNEL = 3
KIND_NAMES = ("step", "layer", "brick", "kernel")


class Record:
    """One scope, open or ended but not yet turned into a span."""

    __slots__ = (
        "owner",  # the scope object that opened it (closing checks it)
        "recorder",  # the GpuSyncSpanProcessor it was opened on
        "kind",
        "name",
        "brick",  # BrickInfo of this brick or of the enclosing brick (kernels)
        "elements",
        "attributes",  # the user's attributes, or None
        "link",  # the record below on the scope stack
        "parent",  # the brickscope parent record, or None under a foreign span
        "otel_parent",  # SpanContext of the foreign parent span, if any
        "otel_context",  # OTel context object current when the tree was entered
        "trace_id",
        "span_id",  # 0 until assigned (lazily, at resolution, unless propagated)
        "sampled",
        "layer",
        "step",
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
    )

    def __init__(self) -> None:
        self.span_id = 0
        self.start_mark = -1
        self.end_mark = -1
        self.gpu_error = None
        self.error = None
        self.ended = False
        self.context_token = None
        self.nested_ns = 0

    def __repr__(self) -> str:
        return f"<Record {KIND_NAMES[self.kind]} {self.name!r} ended={self.ended}>"


#: The innermost open scope of the current context (thread or asyncio task).
TOP: ContextVar[Record | None] = ContextVar("brickscope_top", default=None)


def pop(record: Record) -> None:
    """Remove ``record`` from the top of the stack, skipping ancestors ended out of order."""
    below: Any = record.link
    while below is not None and below.ended:
        below = below.link
    TOP.set(below)
