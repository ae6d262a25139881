# SPDX-License-Identifier: Apache-2.0
"""Slices of other producers (TrackEvent without brickscope's ``otel`` annotation) as spans.

Example::

    piece = ForeignSlice(ts, event, sequence, attributes, parent)   # at its BEGIN
    ...                                                              # at its END:
    attributes = {**piece.attributes, **track_attributes(uuid, descriptors)}

A Perfetto trace written by another program (the Perfetto SDK, a profiler's own writer)
holds TrackEvent slices with a name, categories and debug annotations, on thread,
process or custom tracks. :mod:`._reader` makes each such slice a span of no brickscope
kind, named by its slice, as the trace processor would list it in its ``slice`` table:

- its parent is the slice open on the same track when it began (the trace processor's
  nesting), its trace id the id of its outermost slice, and its span id a number the
  reader gives out in file order (the trace has none);
- its attributes are its debug annotations (nested names joined with dots), its
  categories (:data:`CATEGORY`, comma-separated as the trace processor shows them), its
  thread (``thread.id``, ``thread.name``) and the name of the custom track it is on
  (:data:`TRACK_NAME`); its process goes into the resource (``service.name``,
  ``process.pid``);
- an instant (``TYPE_INSTANT``) is a zero-length slice, nested in the slice open on its
  track, as the trace processor stores it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from brickscope.trace.attributes import THREAD_ID, THREAD_NAME

#: str: the slice's TrackEvent categories, comma-separated (``"gpu,render"``).
CATEGORY = "perfetto.category"
#: str: the name of the track the slice is on when it is no thread's (a custom track, or a
#: process track that has a name of its own), the innermost one when tracks nest.
TRACK_NAME = "perfetto.track.name"

_PRIMITIVES = (bool, int, float, str)


class ForeignSlice:
    """A slice of another producer, begun and not yet ended (or an instant).

    It answers the attributes :mod:`._fastread`'s END reads of an open slice (``ours``,
    ``start``, ``flows``): until its sequence shows whether it is brickscope's, a slice
    without the ``otel`` annotation may be a GPU span's launch slice.
    """

    __slots__ = (
        "start", "name", "attributes", "flows", "sequence", "uuid", "span_id", "parent_id", "trace_id",
    )  # fmt: skip

    ours = False

    def __init__(
        self,
        start: int,
        name: str,
        categories: tuple[str, ...],
        attributes: dict[str, Any],
        flows: tuple[int, ...],
        sequence: Any,
        uuid: int,
        span_id: int,
        parent: ForeignSlice | None,
    ) -> None:
        self.start = start
        self.name = name
        self.attributes = {key: attribute_value(value) for key, value in attributes.items()}
        if categories:
            self.attributes[CATEGORY] = ",".join(categories)
        self.flows = flows
        self.sequence = sequence
        self.uuid = uuid
        self.span_id = span_id
        self.parent_id = parent.span_id if parent is not None else 0
        self.trace_id = parent.trace_id if parent is not None else span_id


def attribute_value(value: Any) -> Any:
    """A debug annotation's value as an OpenTelemetry attribute can hold it: bool, int, float,
    str, or a homogeneous tuple of one of them; anything else (a nested or proto value, a
    dictionary inside an array, a mixed array) as its ``str()``."""
    if isinstance(value, _PRIMITIVES):
        return value
    if isinstance(value, tuple) and all(isinstance(item, _PRIMITIVES) for item in value):
        if len({type(item) for item in value}) <= 1:
            return value
    return str(value)


def track_attributes(uuid: int, descriptors: Mapping[int, Any]) -> dict[str, Any]:
    """``thread.id`` and ``thread.name`` of the thread track ``uuid`` is (or is under), and
    :data:`TRACK_NAME` of the innermost named track on the way there that is no thread's."""
    out: dict[str, Any] = {}
    seen = set()
    descriptor = descriptors.get(uuid)
    while descriptor is not None and uuid not in seen:
        seen.add(uuid)
        if descriptor.HasField("thread"):
            out[THREAD_ID] = descriptor.thread.tid
            name = descriptor.thread.thread_name or track_name(descriptor)
            if name:
                out[THREAD_NAME] = name
            break
        name = track_name(descriptor)
        if name and TRACK_NAME not in out:
            out[TRACK_NAME] = name
        if descriptor.HasField("process"):
            break
        uuid = descriptor.parent_uuid
        descriptor = descriptors.get(uuid)
    return out


def track_name(descriptor: Any) -> str:
    """The track's name, whichever of ``name``, ``static_name`` and ``atrace_name`` it has."""
    which = descriptor.WhichOneof("static_or_dynamic_name")
    return getattr(descriptor, which) if which else ""
