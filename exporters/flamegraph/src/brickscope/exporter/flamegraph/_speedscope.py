# SPDX-License-Identifier: Apache-2.0
"""speedscope's JSON file format (https://www.speedscope.app/file-format-schema.json).

Example::

    document = speedscope_document(profile)
    json.dump(document, out, ensure_ascii=False)

One *sampled* profile per timeline: a host thread, or a GPU stream for
GPU-weighted spans. Each distinct stack of that timeline is one sample whose
weight is its exact self weight (nanoseconds for time, the raw amount for an
attribute), ordered by the earliest start of a span on that stack, so
speedscope's "Time Order" view follows the run while "Left Heavy" and
"Sandwich" aggregate it. Frames are shared between profiles; names are kept as
they were (JSON quotes them), except that empty names become ``(unnamed)``.
The profile with the largest total opens first.
"""

from __future__ import annotations

from typing import Any

from brickscope.exporter.flamegraph._names import speedscope_frame
from brickscope.exporter.flamegraph._stacks import Profile
from brickscope.exporter.flamegraph.version import __version__

__all__ = ["SCHEMA_URL", "speedscope_document"]

SCHEMA_URL = "https://www.speedscope.app/file-format-schema.json"


def speedscope_document(profile: Profile, name: str | None = None) -> dict[str, Any]:
    """The speedscope file for a profile, as JSON-ready Python objects."""
    frame_index: dict[str, int] = {}
    frames: list[dict[str, str]] = []
    by_timeline: dict[int, list[Any]] = {}
    for row in profile.rows:
        by_timeline.setdefault(row.timeline, []).append(row)
    unit = "nanoseconds" if profile.weight.is_time else "none"
    profiles = []
    for timeline in sorted(by_timeline, key=lambda t: _timeline_order(profile.timelines[t])):
        rows = sorted(by_timeline[timeline], key=lambda r: (r.first_start, r.frames))
        samples = []
        for row in rows:
            sample = []
            for frame in row.frames:
                index = frame_index.get(frame)
                if index is None:
                    index = frame_index[frame] = len(frames)
                    frames.append({"name": speedscope_frame(frame)})
                sample.append(index)
            samples.append(sample)
        weights = [_number(row.weight) for row in rows]
        profiles.append(
            {
                "type": "sampled",
                "name": speedscope_frame(_timeline_name(profile.timelines[timeline])),
                "unit": unit,
                "startValue": 0,
                "endValue": _number(sum(weights)),
                "samples": samples,
                "weights": weights,
            }
        )
    active = max(range(len(profiles)), key=lambda i: profiles[i]["endValue"], default=0)
    weight = profile.weight.name
    return {
        "$schema": SCHEMA_URL,
        "name": name
        or f"brickscope: self {weight} {'time' if profile.weight.is_time else ''}".rstrip(),
        "exporter": f"brickscope-exporter-flamegraph@{__version__}",
        "activeProfileIndex": active,
        "shared": {"frames": frames},
        "profiles": profiles,
    }


def _timeline_name(timeline: tuple[Any, ...]) -> str:
    kind, service, first, second = timeline
    if kind == "gpu":
        stream = f"{second:#x}" if isinstance(second, int) else second
        return f"{service} cuda:{first} stream:{stream}"
    if first is None and second is None:
        return f"{service} thread ?"
    return f"{service} thread {second if second is not None else '?'} ({first})"


def _timeline_order(timeline: tuple[Any, ...]) -> tuple[Any, ...]:
    # GPU streams first, then threads; None sorts before values.
    kind, service, first, second = timeline
    return (kind != "gpu", str(service), _sortable(first), _sortable(second))


def _sortable(value: Any) -> tuple[int, int, str]:
    if value is None:
        return (0, 0, "")
    return (1, value, "") if isinstance(value, int) else (2, 0, str(value))


def _number(value: float) -> float:
    """Whole floats as ints, so nanosecond weights print without a '.0'."""
    return int(value) if isinstance(value, float) and value.is_integer() else value
