# SPDX-License-Identifier: Apache-2.0
"""Interning: each repeated string is written once per sequence, then referred to by id.

Example::

    interner = Interner(max_entries=1000)
    iid = interner.event_name("rms_norm")   # new: queued for the next packet
    packet.interned_data.CopyFrom(interner.take())

Perfetto keeps interned data per packet sequence and drops it when a packet
carries ``SEQ_INCREMENTAL_STATE_CLEARED``. The tables grow with the number of
distinct strings, so they are capped: when ``full`` turns true the writer starts
a new incremental-state generation and calls :meth:`clear`.
"""

from __future__ import annotations

from ._schema import pb

# Strings longer than this are written inline: a long value is rarely repeated,
# and interning it would only add an id and a table entry.
MAX_INTERNED_VALUE_CHARS = 96


def sanitize(text: str) -> str:
    """The string itself, or with lone surrogates replaced so it encodes as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


class Interner:
    """The interned tables of one packet sequence, and the entries not yet written."""

    __slots__ = (
        "_names",
        "_categories",
        "_annotation_names",
        "_values",
        "_correlations",
        "_pending",
        "_count",
        "max_entries",
    )

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._names: dict[str, int] = {}
        self._categories: dict[str, int] = {}
        self._annotation_names: dict[str, int] = {}
        self._values: dict[str, int] = {}
        self._correlations: dict[str, int] = {}
        self._pending: pb.InternedData | None = None
        self._count = 0

    @property
    def full(self) -> bool:
        """True when the tables hold ``max_entries`` strings: time for a new generation."""
        return self._count >= self.max_entries

    def clear(self) -> None:
        """Forget every table (the sequence's incremental state was cleared)."""
        self._names.clear()
        self._categories.clear()
        self._annotation_names.clear()
        self._values.clear()
        self._correlations.clear()
        self._pending = None
        self._count = 0

    def take(self) -> pb.InternedData | None:
        """The entries defined since the last call (for the packet about to be written)."""
        pending, self._pending = self._pending, None
        return pending

    def _new(self) -> pb.InternedData:
        self._count += 1
        if self._pending is None:
            self._pending = pb.InternedData()
        return self._pending

    def event_name(self, name: str) -> int:
        """Interned id of a TrackEvent name."""
        iid = self._names.get(name)
        if iid is None:
            iid = self._names[name] = len(self._names) + 1
            self._new().event_names.add(iid=iid, name=sanitize(name))
        return iid

    def category(self, name: str) -> int:
        """Interned id of a TrackEvent category."""
        iid = self._categories.get(name)
        if iid is None:
            iid = self._categories[name] = len(self._categories) + 1
            self._new().event_categories.add(iid=iid, name=sanitize(name))
        return iid

    def annotation_name(self, name: str) -> int:
        """Interned id of a debug-annotation name."""
        iid = self._annotation_names.get(name)
        if iid is None:
            iid = self._annotation_names[name] = len(self._annotation_names) + 1
            self._new().debug_annotation_names.add(iid=iid, name=sanitize(name))
        return iid

    def string_value(self, value: str) -> int:
        """Interned id of a debug-annotation string value."""
        iid = self._values.get(value)
        if iid is None:
            iid = self._values[value] = len(self._values) + 1
            self._new().debug_annotation_string_values.add(iid=iid, str=value.encode("utf-8", "replace"))
        return iid

    def correlation(self, value: str) -> int:
        """Interned id of a correlation string (the span's trace id)."""
        iid = self._correlations.get(value)
        if iid is None:
            iid = self._correlations[value] = len(self._correlations) + 1
            self._new().correlation_id_str.add(iid=iid, str=value.encode("ascii"))
        return iid
