# SPDX-License-Identifier: Apache-2.0
"""Brendan Gregg's folded-stack format: ``frame;frame;frame weight``, one line per stack.

Example::

    lines = folded_lines(profile, unit="us")
    # ['trainer;step;layer;rms_norm 12', 'trainer;step;layer;rms_norm;rms_norm_fwd 40']

Lines are sorted and each distinct stack appears once (stacks of all timelines
summed: the format has no timelines). Frames are escaped by
:func:`~brickscope.exporter.flamegraph._names.folded_frame`.

Weights are integers. Time is aggregated in exact nanoseconds and converted
once per line at the end, by largest remainder: every line is within one unit
of its exact value and the lines add up to the exact total rounded to the unit,
so the file's total never drifts with the number of lines. A stack whose weight
rounds to zero is left out (speedscope output keeps it, in nanoseconds).
Attribute weights are apportioned to integers the same way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TextIO

from brickscope.exporter.flamegraph._names import folded_frame
from brickscope.exporter.flamegraph._stacks import Profile

__all__ = ["UNITS", "folded_lines", "write_folded"]

#: Folded time units: nanoseconds per unit.
UNITS = {"us": 1_000, "ns": 1}


def folded_lines(profile: Profile, unit: str = "us") -> list[str]:
    """The folded lines of a profile, sorted, without line terminators."""
    exact: dict[str, float] = {}
    escaped: dict[str, str] = {}
    for row in profile.rows:
        parts = []
        for frame in row.frames:
            part = escaped.get(frame)
            if part is None:
                part = escaped[frame] = folded_frame(frame)
            parts.append(part)
        stack = ";".join(parts)
        exact[stack] = exact.get(stack, 0) + row.weight
    divisor = UNITS[unit] if profile.weight.is_time else 1
    integers = apportion(exact, divisor)
    return [f"{stack} {weight}" for stack, weight in sorted(integers.items()) if weight > 0]


def write_folded(lines: Iterable[str], out: TextIO) -> None:
    """Write folded lines, one per line, ``\\n``-terminated."""
    for line in lines:
        out.write(line)
        out.write("\n")


def apportion(exact: dict[str, float], divisor: int) -> dict[str, int]:
    """Integers ``exact[k] / divisor`` that sum to the rounded exact total.

    Largest remainder (Hamilton) apportionment: floor every value, then give one
    more unit to the values with the largest remainders (ties broken by key, so
    the output is deterministic) until the total matches.
    """
    floors: dict[str, int] = {}
    remainders: list[tuple[float, str]] = []
    total = 0
    for key, value in exact.items():
        whole = math.floor(value / divisor) if isinstance(value, float) else value // divisor
        floors[key] = int(whole)
        remainders.append((value - whole * divisor, key))
        total += value
    target = (
        math.floor(total / divisor + 0.5)
        if isinstance(total, float)
        else ((total + divisor // 2) // divisor)
    )
    missing = int(target) - sum(floors.values())
    if missing > 0:
        remainders.sort(key=lambda item: (-item[0], item[1]))
        for _, key in remainders[:missing]:
            floors[key] += 1
    return floors
