# SPDX-License-Identifier: Apache-2.0
"""Span attributes as typed Perfetto debug annotations, and back.

Example::

    attribute_tree({"brickscope.gpu.device.id": 0, "a..b": 1})
    # -> ({"brickscope": {"gpu": {"device": {"id": (0,)}}}}, [("a..b", 1)])
    decode_annotations(track_event.debug_annotations, lookup)  # -> (attributes, otel dict)

Dotted OpenTelemetry keys become nested dictionaries (the trace processor would
otherwise turn the dots of a flat name into ``_``), so the UI shows them as
``debug.brickscope.gpu.device.id``. A key that cannot nest (an empty segment, a
clash such as ``a`` and ``a.b`` both present, or the reserved ``otel.`` prefix)
is written flat under its full name. Decoding joins the path of every leaf with
dots, which gives back the original key either way: a leaf's name contains a dot
only when it was written flat at the top level.

Types are kept: ``bool``, ``int`` (int64; uint64 above that), ``float``, ``str``
and homogeneous arrays of them. An empty array is a leaf with no value. Values no
OpenTelemetry attribute can hold (bytes, dictionaries from OTLP ``kvlistValue``,
integers beyond 64 bits) are written as their ``str()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._schema import META

_RESERVED_PREFIX = META + "."


def attribute_tree(attributes: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """Split attributes into a nested tree (leaves are 1-tuples) and flat leftovers."""
    root: dict[str, Any] = {}
    flat: list[tuple[str, Any]] = []
    for key, value in attributes.items():
        if "." not in key:
            if key in root:
                flat.append((key, value))  # clashes with a branch of the same name
            else:
                root[key] = (value,)
            continue
        parts = key.split(".")
        if "" in parts or key.startswith(_RESERVED_PREFIX):
            flat.append((key, value))
            continue
        node: Any = root
        for part in parts[:-1]:
            node = node.get(part)
            if node is None:
                break
            if not isinstance(node, dict):
                node = False
                break
        if node is False or (isinstance(node, dict) and parts[-1] in node):
            flat.append((key, value))
            continue
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = (value,)
    return root, flat


#: Resolves an interned id: ``lookup(table, iid) -> str``; tables are
#: ``"names"`` (debug-annotation names) and ``"values"`` (string values).
Lookup = Callable[[str, int], str]


def decode_annotations(annotations: Iterable[Any], lookup: Lookup) -> tuple[dict[str, Any], dict[str, Any]]:
    """Attributes and the META dictionary (as a plain dict) from DebugAnnotations."""
    attributes: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    for annotation in annotations:
        name = annotation_name(annotation, lookup)
        if annotation.dict_entries:
            if name == META:
                meta = decode_dict(annotation, lookup)
            else:
                _collect(annotation.dict_entries, name + ".", attributes, lookup)
        else:
            attributes[name] = decode_value(annotation, lookup)
    return attributes, meta


def _collect(entries: Iterable[Any], prefix: str, out: dict[str, Any], lookup: Lookup) -> None:
    for annotation in entries:
        name = prefix + annotation_name(annotation, lookup)
        if annotation.dict_entries:
            _collect(annotation.dict_entries, name + ".", out, lookup)
        else:
            out[name] = decode_value(annotation, lookup)


def decode_dict(annotation: Any, lookup: Lookup) -> dict[str, Any]:
    """A dictionary annotation as a Python dict (nested dictionaries stay nested)."""
    out: dict[str, Any] = {}
    for entry in annotation.dict_entries:
        name = annotation_name(entry, lookup)
        out[name] = decode_dict(entry, lookup) if entry.dict_entries else decode_value(entry, lookup)
    return out


def annotation_name(annotation: Any, lookup: Lookup) -> str:
    """The annotation's name, interned or inline."""
    if annotation.HasField("name_iid"):
        return lookup("names", annotation.name_iid)
    return annotation.name


def decode_value(annotation: Any, lookup: Lookup) -> Any:
    """The typed Python value of an annotation (``()`` for an empty array, dicts as dicts)."""
    which = annotation.WhichOneof("value")
    if which is None:
        if annotation.dict_entries:
            return decode_dict(annotation, lookup)
        if annotation.array_values:
            return tuple(decode_value(item, lookup) for item in annotation.array_values)
        return ()
    if which == "string_value_iid":
        return lookup("values", annotation.string_value_iid)
    return getattr(annotation, which)
