# SPDX-License-Identifier: Apache-2.0
"""Impossible spans: the one rule every reader applies before it yields a span.

Example::

    from brickscope.offline import impossible

    reason = impossible(span.start_time, span.end_time, span.attributes)
    if reason is not None:
        source.drop(reason)        # counted by reason, not yielded

A span whose times cannot be true would turn into impossible figures (a total of
``-1759999999999.840 ms`` from a span that never ended), so a reader leaves it out
and counts it under one of :data:`IMPOSSIBLE_REASONS`, in this order of precedence:

- ``no_end_time``: the end is missing (0, OTLP's "unknown") and the start is not.
- ``no_start_time``: the start is missing while the end is a wall-clock date (at or after
  :data:`WALL_CLOCK_MIN_NS`): its duration would be the decades since 1970. Times that are
  both small (a span at the clock's origin, as tests write them) are not judged.
- ``end_before_start``: the end is earlier than the start.
- ``negative_duration``: a duration attribute (``brickscope.brick.self_duration_ns``,
  ``brickscope.gpu.duration_ns``, ``brickscope.host.duration_ns``,
  ``brickscope.tile.<level>.duration_ns``) is below zero.
- ``negative_amount``: a work amount (``brickscope.work.bytes``, ``brickscope.work.flops``,
  ``brickscope.step.tokens``, ``brickscope.brick.elements``, ``brickscope.tile.<level>.elements``,
  or the short ``bytes``, ``flops``, ``tokens`` a scope's keywords give) is below zero: it
  would make a negative total, rate or share.
- ``inconsistent_duration``: ``brickscope.gpu.duration_ns`` differs from end - start by
  more than :data:`GPU_DURATION_TOLERANCE_NS` (the conventions make them equal), or ``brickscope.brick.self_duration_ns`` exceeds
  end - start (self time is the duration less nested bricks).

Attributes that are not numbers are not judged here (the analysis reads them as absent).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from brickscope.trace.attributes import (
    BRICK_ELEMENTS,
    BRICK_SELF_DURATION_NS,
    GPU_DURATION_NS,
    HOST_DURATION_NS,
    SCOPE_KEYWORDS,
    STEP_TOKENS,
    TILE_DURATION_NS,
    TILE_ELEMENTS,
    TILE_LEVELS,
    WORK_BYTES,
    WORK_FLOPS,
)

NO_END_TIME = "no_end_time"
NO_START_TIME = "no_start_time"
END_BEFORE_START = "end_before_start"
NEGATIVE_DURATION = "negative_duration"
NEGATIVE_AMOUNT = "negative_amount"
INCONSISTENT_DURATION = "inconsistent_duration"
#: Every reason a span is impossible, in order of precedence.
IMPOSSIBLE_REASONS = (
    NO_END_TIME,
    NO_START_TIME,
    END_BEFORE_START,
    NEGATIVE_DURATION,
    NEGATIVE_AMOUNT,
    INCONSISTENT_DURATION,
)

_WORDS = {
    NO_END_TIME: "no end time",
    NO_START_TIME: "no start time",
    END_BEFORE_START: "end before start",
    NEGATIVE_DURATION: "negative duration attribute",
    NEGATIVE_AMOUNT: "negative work amount",
    INCONSISTENT_DURATION: "duration attribute disagreeing with end - start",
}
#: 2001-09-09 in nanoseconds since the Unix epoch: an end at or after it with no start is
#: a span whose start was lost, not one that began in 1970.
WALL_CLOCK_MIN_NS = 10**18
#: How far ``brickscope.gpu.duration_ns`` may be from end - start: two ticks of the CUDA event
#: clock (0.5 µs), so that a producer that rounded is not called impossible.
GPU_DURATION_TOLERANCE_NS = 1000
_NUMBERS = frozenset((int, float))  # not bool: True is not a duration
_TILE_DURATIONS = tuple(TILE_DURATION_NS.format(level) for level in TILE_LEVELS)
_AMOUNTS = (
    WORK_BYTES,
    WORK_FLOPS,
    STEP_TOKENS,
    BRICK_ELEMENTS,
    *(TILE_ELEMENTS.format(level) for level in TILE_LEVELS),
    *(short for short, full in SCOPE_KEYWORDS.items() if full in (WORK_BYTES, WORK_FLOPS, STEP_TOKENS)),
)
#: The attributes the rule wants never below zero, besides the self, GPU and host durations it
#: names one by one: a reader that checks these keys hold non-negative integers (the .pftrace
#: reader's C loop, with the three durations) may skip the rule for a span whose times are in order.
NONNEGATIVE_KEYS = (*_TILE_DURATIONS, *_AMOUNTS)


def impossible(start: int | None, end: int | None, attributes: Mapping[str, Any] | None) -> str | None:
    """The reason (one of :data:`IMPOSSIBLE_REASONS`) a span with these times and attributes cannot be
    true, or None when it can. Times are nanoseconds since the Unix epoch, 0 or None: absent."""
    start, end = start or 0, end or 0
    if start and not end:
        return NO_END_TIME
    if not start and end >= WALL_CLOCK_MIN_NS:
        return NO_START_TIME
    if end < start:
        return END_BEFORE_START
    if not attributes:
        return None
    get = attributes.get
    self_ns, gpu_ns, host_ns = get(BRICK_SELF_DURATION_NS), get(GPU_DURATION_NS), get(HOST_DURATION_NS)
    if type(self_ns) not in _NUMBERS:
        self_ns = None
    if type(gpu_ns) not in _NUMBERS:
        gpu_ns = None
    if (
        self_ns is not None and self_ns < 0
        or gpu_ns is not None and gpu_ns < 0
        or type(host_ns) in _NUMBERS and host_ns < 0
    ):  # fmt: skip
        return NEGATIVE_DURATION
    for key in _TILE_DURATIONS:
        tile_ns = get(key)
        if tile_ns is not None and type(tile_ns) in _NUMBERS and tile_ns < 0:
            return NEGATIVE_DURATION
    for key in _AMOUNTS:
        amount = get(key)
        if amount is not None and type(amount) in _NUMBERS and amount < 0:
            return NEGATIVE_AMOUNT
    duration = end - start
    if self_ns is not None and self_ns > duration or gpu_ns is not None and not (
        -GPU_DURATION_TOLERANCE_NS <= gpu_ns - duration <= GPU_DURATION_TOLERANCE_NS
    ):
        return INCONSISTENT_DURATION
    return None


def describe_impossible(counts: Mapping[str, int]) -> str:
    """``counts`` (reason -> spans) in words, in the order of :data:`IMPOSSIBLE_REASONS`:
    ``"2 with no end time, 1 with end before start"``."""
    return ", ".join(f"{counts[r]:,} with {_WORDS[r]}" for r in IMPOSSIBLE_REASONS if counts.get(r))
