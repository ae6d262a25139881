# SPDX-License-Identifier: Apache-2.0
"""Data added to an open scope: attributes, events and a status, reaching its span.

Inside a brick, ``trace.get_current_span()`` is brickscope's ``ScopeSpan``, which
stands for the innermost open scope of the context. OTel users call
``set_attribute``, ``add_event``, ``record_exception`` and ``set_status`` on it and
expect the data on the brick's span: the calls land here, on the record's
:class:`ScopeNotes`, and ``SpanBuilder.build`` puts them on the span at
resolution. ``bs.event(name, **attributes)`` lands here too.

Nothing is built on the scope hot path: a scope without data carries ``notes = None``.
Bounded like the SDK's default span limits (128 attributes, 128 events); what a
bound sheds, and values OTel cannot carry, are counted in
``stats()["scope_data_dropped"]``, with one warning.

Example::

    with bs.brick("attention"):
        trace.get_current_span().set_attribute("cache.hit", True)
        bs.event("kv_cache.evicted", blocks=4)
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from brickscope._clock import host_ns
from brickscope._record import Record

logger = logging.getLogger(__name__)

#: The SDK's default span limits (OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT, OTEL_SPAN_EVENT_COUNT_LIMIT).
MAX_ATTRIBUTES = 128
MAX_EVENTS = 128
_SCALARS = (str, bool, int, float)
_warned: set[str] = set()


class ScopeNotes:
    """What user code added to one open scope."""

    __slots__ = ("attributes", "events", "status", "tiles")

    def __init__(self) -> None:
        self.tiles: dict[str, list[int]] | None = None  # level -> [count, ns, elements] (bs.tile)
        self.attributes: dict[str, Any] = {}
        #: (name, attributes, timestamp in epoch ns)
        self.events: list[tuple[str, dict[str, Any], int]] = []
        #: (code name "OK"/"ERROR", description) or None
        self.status: tuple[str, str | None] | None = None


def innermost_open(top: Record | None) -> Record | None:
    """The innermost record of a scope stack that has not ended (an ended one may linger
    below scopes still open, see ``_recorder._repair_stack``)."""
    while top is not None and top.ended:
        top = top.link
    return top


def _notes(rec: Record) -> ScopeNotes:
    notes = rec.notes
    if notes is None:
        notes = rec.notes = ScopeNotes()
    return notes


def add_tile(rec: Record, level: str, duration_ns: int, elements: int) -> None:
    """Fold one tile into rec's per-level totals (put on its span as brickscope.tile.*)."""
    notes = _notes(rec)
    tiles = notes.tiles
    if tiles is None:
        tiles = notes.tiles = {}
    totals = tiles.get(level)
    if totals is None:
        tiles[level] = [1, duration_ns, elements]
    else:
        totals[0] += 1
        totals[1] += duration_ns
        totals[2] += elements


def set_attribute(rec: Record, key: Any, value: Any) -> None:
    """Put ``key = value`` on rec's span (a later value of the key wins). Never raises."""
    if not rec.sampled:
        return
    value = clean_value(value)
    if type(key) is not str or not key or value is None:
        _drop(rec, "value", "brickscope: attribute %r=%r is not an OpenTelemetry attribute; dropped", key, value)
        return
    attributes = _notes(rec).attributes
    if key not in attributes and len(attributes) >= MAX_ATTRIBUTES:
        _drop(rec, "attributes", "brickscope: more than %d attributes added to one scope; the rest dropped", MAX_ATTRIBUTES)
        return
    attributes[key] = value


def set_attributes(rec: Record, attributes: Any) -> None:
    """:func:`set_attribute` for each item of a mapping. Never raises."""
    try:
        items = list(attributes.items())
    except AttributeError:
        _drop(rec, "attributes_type", "brickscope: set_attributes() expects a mapping, got %r", attributes)
        return
    for key, value in items:
        set_attribute(rec, key, value)


def refuse_rename(rec: Record, name: Any) -> None:
    """``update_name`` on a scope: ignored, counted as misuse, one warning."""
    rec.recorder.count("misuse")
    if "rename" not in _warned:
        _warned.add("rename")
        logger.warning("brickscope: update_name(%r) on a brickscope scope ignored: its name identifies the operation", name)


def add_event(rec: Record, name: Any, attributes: Any = None, timestamp: Any = None) -> None:
    """Add an event to rec's span, at ``timestamp`` (epoch ns) or now on the host clock. Never raises."""
    if not rec.sampled:
        return
    if type(name) is not str or not name:
        _drop(rec, "event_name", "brickscope: event name %r is not a non-empty str; event dropped", name)
        return
    events = _notes(rec).events
    if len(events) >= MAX_EVENTS:
        _drop(rec, "events", "brickscope: more than %d events added to one scope; the rest dropped", MAX_EVENTS)
        return
    cleaned: dict[str, Any] = {}
    if attributes:
        try:
            items = list(attributes.items())
        except AttributeError:
            items = []
            _drop(rec, "attributes_type", "brickscope: event attributes must be a mapping, got %r", attributes)
        for key, value in items:
            value = clean_value(value)
            if type(key) is not str or not key or value is None:
                _drop(rec, "value", "brickscope: attribute %r=%r is not an OpenTelemetry attribute; dropped", key, value)
                continue
            cleaned[key] = value
    if timestamp is None or type(timestamp) is not int or timestamp < 0:
        timestamp = host_ns()
    events.append((name, cleaned, timestamp))


def record_exception(rec: Record, exception: BaseException, attributes: Any = None, timestamp: Any = None) -> None:
    """The OTel ``exception`` event, as the SDK's ``Span.record_exception`` makes it."""
    details = {
        "exception.type": type(exception).__qualname__,
        "exception.message": str(exception),
        "exception.stacktrace": "".join(traceback.format_exception(type(exception), exception, exception.__traceback__)),
        "exception.escaped": False,
    }
    if attributes:
        details.update(attributes)
    add_event(rec, "exception", details, timestamp)


def set_status(rec: Record, code_name: str, description: str | None) -> None:
    """The span's status: ``"OK"`` is final; ``"ERROR"`` unless already OK (the SDK's rule)."""
    if not rec.sampled:
        return
    notes = _notes(rec)
    if notes.status is not None and notes.status[0] == "OK":
        return
    notes.status = (code_name, description if code_name == "ERROR" else None)


def clean_value(value: Any) -> Any:
    """An OTel attribute value (str, bool, int, float, or a sequence of one of those
    types, as a tuple), or None when ``value`` is none of those."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, _SCALARS) for v in value):
        if len({_scalar_type(v) for v in value}) <= 1:  # the SDK drops mixed sequences too
            return tuple(value)
    return None


def _scalar_type(value: Any) -> type:
    for kind in (bool, str, int, float):  # bool before int: True is an int
        if isinstance(value, kind):
            return kind
    return type(value)


def _drop(rec: Record, key: str, message: str, *args: Any) -> None:
    rec.recorder.count("scope_data_dropped")
    if key not in _warned:
        _warned.add(key)
        logger.warning(message, *args)
