# SPDX-License-Identifier: Apache-2.0
"""Spans to rows of the Parquet span format and back: the one mapping both ways.

Example::

    batch = SpanBatch(run="baseline")
    for span in spans:
        batch.add(span)
    record_batch = batch.take()              # a pyarrow.RecordBatch of parquet_schema()
    spans_again = list(spans_of(record_batch))

A span is appended as one tuple; a batch is turned into columns at once (``zip``), and
each column into an Arrow array, so the cost per span stays a few microseconds. A typed
column takes an attribute only when the value has the column's type (an ``int`` for an
int64 column, 16 hex digits for a hash...): any other value is kept as it was in the
``attributes`` JSON, so reading back gives the span's attributes unchanged (a list comes
back as a tuple, ``flops`` as a float, a short scope keyword under its full name).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from brickscope.trace import attributes as A

from ._parquet_schema import (
    ATTRIBUTE_COLUMNS,
    CLOCKS,
    FLOAT64,
    HASH64,
    INT64,
    INT64_LIST,
    KIND_OTHER,
    KINDS,
    PARQUET_COLUMNS,
    SHORT_KEYWORDS,
    STRING,
    import_pyarrow,
    parquet_schema,
    to_signed,
    to_unsigned,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan

_EMPTY: dict[str, Any] = {}
_KEYS = tuple(column.key for column in ATTRIBUTE_COLUMNS)
#: Each attribute column's short keyword, or None.
_SHORTS = tuple(SHORT_KEYWORDS.get(key) for key in _KEYS)
_SHORT_KEYS = tuple(short for short in _SHORTS if short is not None)
#: Keys a typed column may take: anything else goes to ``attributes`` as it is.
_TYPED_KEYS = frozenset(_KEYS) | frozenset(_SHORT_KEYS)
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_NONE = type(None)


def _json_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _dumps(mapping: Mapping[str, Any]) -> str:
    return json.dumps({key: _json_value(value) for key, value in mapping.items()}, separators=(",", ":"))


def _attribute_value(value: Any) -> Any:
    """A JSON value read back as an attribute value: lists become tuples (as the SDK keeps them)."""
    return tuple(value) if isinstance(value, list) else value


def _loads(text: str) -> dict[str, Any]:
    return {key: _attribute_value(value) for key, value in json.loads(text).items()}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class _ResourceRow:
    """The columns a resource fills, computed once per resource."""

    __slots__ = ("values", "models", "kernel_sources")

    def __init__(self, resource: Resource | None, run: str | None) -> None:
        attributes = getattr(resource, "attributes", None) or _EMPTY
        instance = attributes.get("service.instance.id")
        pid = attributes.get("process.pid")
        rank = attributes.get(A.RANK)
        self.values = (
            run if run is not None else _text(instance),
            _text(attributes.get("service.name")),
            _text(instance),
            _text(attributes.get(A.HOST_NAME)),
            pid if type(pid) is int and _INT64_MIN <= pid <= _INT64_MAX else None,
            None if rank is None or str(rank) == "" else str(rank),
            _dumps(attributes),
        )
        self.models = device_names(attributes.get(A.GPU_DEVICE_NAMES))
        sources = attributes.get(A.KERNEL_SOURCES)
        self.kernel_sources = sources if isinstance(sources, str) else None


def device_names(value: Any) -> tuple[str, ...]:
    """GPU model names from the resource: a sequence, or its text form ``[a, b]`` (a label
    read back from a .pftrace); anything else, none. The one rule: the analysis table reads
    them with it too."""
    if value is None:
        return ()
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            return tuple(part.strip() for part in text[1:-1].split(",") if part.strip())
        return (text,)
    if isinstance(value, (tuple, list)):
        return tuple(str(v) for v in value)
    return ()


class SpanBatch:
    """Spans gathered into one Arrow record batch of :func:`parquet_schema` (not thread-safe).

    Args:
        run: the ``run`` column of every row; None: each resource's ``service.instance.id``.
    """

    def __init__(self, run: str | None = None) -> None:
        self.run = run
        self._rows: list[tuple[Any, ...]] = []
        self._resources: dict[int, tuple[Any, _ResourceRow]] = {}
        #: Spans left out because their times cannot be written (no start or end time).
        self.skipped_spans = 0
        #: The kernel source registries (JSON text) of the resources seen, by text.
        self.kernel_sources: dict[str, None] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, span: ReadableSpan) -> bool:
        """Append one ended span; False (counted in ``skipped_spans``) when it has no start or end time."""
        start, end = span.start_time, span.end_time
        if start is None or end is None or not (_INT64_MIN <= start <= _INT64_MAX and _INT64_MIN <= end <= _INT64_MAX):
            self.skipped_spans += 1
            return False
        context, parent, status = span.context, span.parent, span.status
        self._rows.append((
            context.trace_id, context.span_id, 0 if parent is None else parent.span_id, span.name, start, end,
            span.resource, span.kind.value, status.status_code.value, status.description,
            span.instrumentation_scope, span.events, span.links, span.attributes or _EMPTY,
        ))  # fmt: skip
        return True

    def extend(self, spans: Any) -> int:
        """Append every span of an iterable; how many were kept."""
        return sum(map(self.add, spans))

    def take(self, pace: Callable[[], object] | None = None) -> Any:
        """The spans appended so far as one ``pyarrow.RecordBatch``; the batch is then empty.
        ``pace`` is called between columns."""
        pace = pace or _nothing
        pa = import_pyarrow()
        rows, self._rows = self._rows, []
        n = len(rows)
        schema = parquet_schema()
        if not n:
            return pa.RecordBatch.from_pylist([], schema=schema)
        (
            trace_ids, span_ids, parent_ids, names, starts, ends, resources, span_kinds, codes, messages,
            scopes, events, links, attributes,
        ) = zip(*rows)  # fmt: skip
        out: dict[str, Any] = {}
        out["trace_id"] = pa.array([t.to_bytes(16, "big") for t in trace_ids], pa.binary(16))
        out["span_id"] = _id_array(pa, span_ids)
        out["parent_span_id"] = _id_array(pa, parent_ids)
        out["name"] = pa.array(names, pa.string())
        out["start_ns"] = pa.array(starts, pa.int64())
        out["end_ns"] = pa.array(ends, pa.int64())

        entries = [self._resource(resource) for resource in resources]
        resource_columns = ("run", "service_name", "service_instance_id", "host_name", "pid", "rank", "resource")
        for name, values in zip(resource_columns, zip(*(entry.values for entry in entries))):
            out[name] = pa.array(values, pa.int64() if name == "pid" else pa.string())

        spilled: list[dict[str, Any] | None] = [None] * n
        values_by_key = dict(
            zip(_KEYS + _SHORT_KEYS, zip(*(tuple(map(a.get, _KEYS + _SHORT_KEYS)) for a in attributes)))
        )
        for column, short in zip(ATTRIBUTE_COLUMNS, _SHORTS):
            values = list(values_by_key[column.key])
            if short is not None:
                _take_short(values, values_by_key[short], short, spilled)
            out[column.name] = _typed_array(pa, column, values, spilled)
            pace()

        pace()
        ordinals = out["device_ordinal"].to_pylist()
        out["device_model"] = pa.array(
            [
                entry.models[o] if o is not None and 0 <= o < len(entry.models) else None
                for entry, o in zip(entries, ordinals)
            ],
            pa.string(),
        )
        out["span_kind"] = pa.array(span_kinds, pa.int8())
        out["status_code"] = pa.array(codes, pa.int8())
        out["status_message"] = pa.array(messages, pa.string())
        out["scope_name"] = pa.array([s.name if s is not None else None for s in scopes], pa.string())
        out["scope_version"] = pa.array([s.version if s is not None else None for s in scopes], pa.string())
        out["events"] = pa.array([_events_json(e) if e else None for e in events], pa.string())
        out["links"] = pa.array([_links_json(li) if li else None for li in links], pa.string())
        pace()
        out["attributes"] = pa.array(_rest(attributes, spilled), pa.string())
        return pa.RecordBatch.from_arrays([out[c.name] for c in PARQUET_COLUMNS], schema=schema)

    def _resource(self, resource: Any) -> _ResourceRow:
        entry = self._resources.get(id(resource))
        if entry is None or entry[0] is not resource:
            row = _ResourceRow(resource, self.run)
            self._resources[id(resource)] = entry = (resource, row)
            if row.kernel_sources is not None:
                self.kernel_sources[row.kernel_sources] = None
        return entry[1]


def _nothing() -> None:
    return None


def _id_array(pa: Any, ids: tuple[int, ...]) -> Any:
    """Unsigned 64-bit ids as their int64 bits (no Python loop: a uint64 array viewed as int64)."""
    return pa.array(ids, pa.uint64()).view(pa.int64())


def _take_short(values: list[Any], shorts: tuple[Any, ...], short: str, spilled: list[dict[str, Any] | None]) -> None:
    """Where the full key is absent, the column takes the short keyword's value; a short
    keyword beside its full key stays an ordinary attribute."""
    if shorts.count(None) == len(shorts):
        return
    for row, value in enumerate(shorts):
        if value is None:
            continue
        if values[row] is None:
            values[row] = value
        else:
            _spill(spilled, row, short, value)


def _spill(spilled: list[dict[str, Any] | None], row: int, key: str, value: Any) -> None:
    kept = spilled[row]
    if kept is None:
        kept = spilled[row] = {}
    kept[key] = value


def _fits(column: Any, value: Any) -> bool:
    """Whether a column of this type holds ``value`` exactly."""
    kind = column.type
    if kind == INT64:
        return type(value) is int and _INT64_MIN <= value <= _INT64_MAX
    if kind == STRING:
        return type(value) is str
    if kind == FLOAT64:
        return type(value) in (float, int)
    if kind == INT64_LIST:
        return type(value) in (tuple, list) and all(type(v) is int and _INT64_MIN <= v <= _INT64_MAX for v in value)
    if kind == HASH64:
        return type(value) is str and len(value) == 16 and value == value.lower() and _is_hex(value)
    return False


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return text.isalnum()


_FAST_TYPES = {INT64: {int, _NONE}, STRING: {str, _NONE}, FLOAT64: {float, int, _NONE}}


def _typed_array(pa: Any, column: Any, values: list[Any], spilled: list[dict[str, Any] | None]) -> Any:
    """One attribute column as an Arrow array; values it cannot hold are spilled to ``attributes``."""
    arrow_type = parquet_schema().field(column.name).type
    n = len(values)
    key = column.key
    if column.name == "kind":  # never null: "other" where the span is no brickscope scope
        for row, value in enumerate(values):
            if value not in KINDS:
                if value is not None:
                    _spill(spilled, row, key, value)
                values[row] = KIND_OTHER
        return pa.array(values, arrow_type)
    if values.count(None) == n:
        return pa.nulls(n, arrow_type)
    if column.name == "clock":
        kept = [value if value in CLOCKS else None for value in values]
        for row, value in enumerate(values):
            if value is not None and kept[row] is None:
                _spill(spilled, row, key, value)
        return pa.array(kept, arrow_type)
    allowed = _FAST_TYPES.get(column.type)
    if allowed is not None and set(map(type, values)) <= allowed:
        try:
            return pa.array(values, arrow_type)
        except (OverflowError, pa.ArrowInvalid):  # an int beyond int64: spilled below
            pass
    for row, value in enumerate(values):
        if value is not None and not _fits(column, value):
            _spill(spilled, row, key, value)
            values[row] = None
    if column.type == HASH64:
        values = [None if v is None else to_signed(int(v, 16)) for v in values]
    return pa.array(values, arrow_type)


def _rest(attributes: tuple[Mapping[str, Any], ...], spilled: list[dict[str, Any] | None]) -> list[str | None]:
    """Each span's ``attributes`` JSON: its untyped attributes and the values no column could hold."""
    out: list[str | None] = []
    for mapping, kept in zip(attributes, spilled):
        extra = mapping.keys() - _TYPED_KEYS
        if not extra and kept is None:
            out.append(None)
            continue
        rest = {key: mapping[key] for key in mapping if key in extra}
        if kept:
            rest.update(kept)
        out.append(_dumps(rest))
    return out


def _events_json(events: Any) -> str:
    return json.dumps(
        [
            {
                "name": e.name,
                "time_ns": e.timestamp,
                "attributes": {k: _json_value(v) for k, v in (e.attributes or _EMPTY).items()},
            }
            for e in events
        ],
        separators=(",", ":"),
    )


def _links_json(links: Any) -> str:
    return json.dumps(
        [
            {
                "trace_id": f"{link.context.trace_id:032x}",
                "span_id": f"{link.context.span_id:016x}",
                "attributes": {k: _json_value(v) for k, v in (link.attributes or _EMPTY).items()},
            }
            for link in links
        ],
        separators=(",", ":"),
    )


# --- back: rows to spans -----------------------------------------------------------------


class RowReader:
    """Rows of the format back into spans or :data:`~brickscope.offline.SpanRecord` tuples.

    Resources are made once per distinct ``resource`` text, so spans of one process share one.
    """

    def __init__(self) -> None:
        self._resources: dict[str | None, Any] = {}

    def resource(self, text: str | None) -> Any:
        resource = self._resources.get(text)
        if resource is None:
            from opentelemetry.sdk.resources import Resource

            resource = self._resources[text] = Resource(_loads(text) if text else {})
        return resource

    def rows(self, batch: Any) -> Iterator[tuple[Any, ...]]:
        """Per row: (trace_id, span_id, parent_id, name, start, end, resource, attributes,
        span_kind, status_code, status_message, scope_name, scope_version, events, links).

        Columns are converted whole (ids to unsigned, hashes to hex text, lists to tuples);
        a row's attributes are made from the attribute columns not null in this batch."""
        pa = import_pyarrow()
        n = batch.num_rows
        keys, typed = [], []
        for column in ATTRIBUTE_COLUMNS:
            array = batch.column(column.name)
            if array.null_count == n:
                continue
            values = array.to_pylist()
            if column.name == "kind":  # "other": the span had no brickscope kind
                values = [None if v == KIND_OTHER else v for v in values]
            elif column.type == HASH64:
                values = [None if v is None else f"{to_unsigned(v):016x}" for v in values]
            elif column.type == INT64_LIST:
                values = [None if v is None else tuple(v) for v in values]
            keys.append(column.key)
            typed.append(values)
        extras = batch.column("attributes").to_pylist()
        trace_ids = [int.from_bytes(t, "big") for t in batch.column("trace_id").to_pylist()]
        span_ids = batch.column("span_id").view(pa.uint64()).to_pylist()
        parent_ids = batch.column("parent_span_id").view(pa.uint64()).to_pylist()
        resources = list(map(self.resource, batch.column("resource").to_pylist()))
        rest = (
            batch.column(name).to_pylist()
            for name in ("span_kind", "status_code", "status_message", "scope_name", "scope_version", "events", "links")
        )
        for trace_id, span_id, parent_id, name, start, end, resource, values, extra, *more in zip(
            trace_ids, span_ids, parent_ids, batch.column("name").to_pylist(), batch.column("start_ns").to_pylist(),
            batch.column("end_ns").to_pylist(), resources, zip(*typed) if typed else [()] * n, extras, *rest,
        ):  # fmt: skip
            attributes = {key: value for key, value in zip(keys, values) if value is not None}
            if extra is not None:
                attributes.update(_loads(extra))
            yield (trace_id, span_id, parent_id, name, start, end, resource, attributes, *more)


def make_span(row: tuple[Any, ...]) -> ReadableSpan:
    """A ``ReadableSpan`` from one row of :meth:`RowReader.rows`."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
    from opentelemetry.trace.status import Status, StatusCode

    (
        trace_id, span_id, parent_id, name, start, end, resource, attributes,
        span_kind, status_code, status_message, scope_name, scope_version, events, links,
    ) = row  # fmt: skip
    flags = TraceFlags(TraceFlags.SAMPLED)
    parent = SpanContext(trace_id, parent_id, False, flags) if parent_id else None
    return ReadableSpan(
        name=name,
        context=SpanContext(trace_id, span_id, False, flags),
        parent=parent,
        resource=resource,
        attributes=attributes,
        events=[
            Event(e["name"], {k: _attribute_value(v) for k, v in e["attributes"].items()}, timestamp=e["time_ns"])
            for e in (json.loads(events) if events else ())
        ],
        links=[
            Link(
                SpanContext(int(li["trace_id"], 16), int(li["span_id"], 16), False, flags),
                {k: _attribute_value(v) for k, v in li["attributes"].items()},
            )
            for li in (json.loads(links) if links else ())
        ],
        kind=SpanKind(span_kind),
        status=Status(StatusCode(status_code), status_message if status_code == StatusCode.ERROR.value else None),
        start_time=start,
        end_time=end,
        instrumentation_scope=InstrumentationScope(scope_name, scope_version) if scope_name is not None else None,
    )
