# SPDX-License-Identifier: Apache-2.0
"""Spans written as Chrome trace JSON, the Trace Event Format chrome://tracing and Perfetto's UI open.

Example::

    from brickscope.offline import AtomicOutput, open_spans, write_chrome_trace

    with open_spans("run.pftrace") as spans, AtomicOutput("run.json", overwrite=True) as output:
        with output.open() as out:
            write_chrome_trace(spans, out)
        output.commit()

The file is one object: ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``.

- Each span is a complete event (``"ph": "X"``) with ``ts`` and ``dur`` in microseconds,
  written with three decimals (exact nanoseconds), ``name``, ``cat`` (the brick category,
  else the scope kind, else the OTel span kind) and ``args`` (the span's attributes).
  Each span event (``bs.event``) is an instant event (``"ph": "i"``) on the same thread.
- ``ts`` counts from the earliest span start, written to ``otherData`` as
  ``time_origin_unix_ns``: epoch microseconds need 16 digits before the point, more than a
  double (how viewers read JSON numbers) keeps with sub-microsecond digits after it.
- Each distinct OTel resource (a process, a rank) is a ``pid`` (1, 2, ... in order of first
  appearance); host-timed spans go on their thread's ``tid`` (``thread.id``), GPU-timed spans
  (``brickscope.clock`` ``cuda`` or ``gpu``) on a ``tid`` per GPU device and stream, so the
  viewers draw them as lanes; metadata events (``"ph": "M"``) name every process and thread
  and sort GPU lanes after the threads.
- A viewer nests the X events of one ``tid`` by time and needs them properly nested; a
  span that partly overlaps another of its track (concurrent asyncio tasks on one thread)
  goes on an overflow lane of that track, named ``... (overlap N)``. Nothing is dropped.
- Complete events are sorted by ``ts``, an enclosing span before the spans it encloses.

Every span is held in memory until the end (the events are sorted): about a few hundred
bytes a span.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import IO, TYPE_CHECKING, Any

from brickscope.trace import attributes as A

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

#: ``thread_sort_index`` of the first GPU lane: after every thread of the process.
_GPU_SORT_BASE = 1 << 20


class _Track:
    """One thread or GPU stream of a process: its lanes (each a stack of open span ends)."""

    __slots__ = ("name", "sort", "lanes")

    def __init__(self, name: str, sort: int) -> None:
        self.name = name
        self.sort = sort
        self.lanes: list[list[int]] = []

    def place(self, start: int, end: int) -> int:
        """The first lane where ``[start, end]`` nests properly (spans come in (start, -end) order)."""
        for index, stack in enumerate(self.lanes):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
                stack.append(end)
                return index
        self.lanes.append([end])
        return len(self.lanes) - 1


def _micros(ns: int) -> str:
    """``ns`` (>= 0) as microseconds with three decimals: exact, a valid JSON number."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def _value(value: Any) -> Any:
    """An attribute value as JSON: sequences as lists, a NaN or infinity as its text (no JSON number)."""
    if isinstance(value, (tuple, list)):
        return [_value(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _category(attributes: Mapping[str, Any], span: ReadableSpan) -> str:
    for key in (A.BRICK_CATEGORY, A.SCOPE_KIND):
        value = attributes.get(key)
        if isinstance(value, str) and value:
            return value
    return span.kind.name.lower()


def _process_name(resource_attributes: Mapping[str, Any]) -> str:
    name = str(resource_attributes.get("service.name", "process"))
    rank = resource_attributes.get(A.RANK)
    pid = resource_attributes.get("process.pid")
    if rank is not None:
        name += f" rank {rank}"
    if pid is not None:
        name += f" pid {pid}"
    return name


def write_chrome_trace(spans: Iterable[ReadableSpan], out: IO[bytes]) -> int:
    """Write ``spans`` to the binary file ``out`` as Chrome trace JSON; returns how many spans.

    The layout (processes, threads, GPU lanes, time origin) is described in the module's
    documentation. ``out`` is written in one pass once every span has been read; give it
    a temporary file (:class:`~brickscope.offline.AtomicOutput`) so that a failure while
    reading leaves no partial output.
    """
    processes: dict[Any, int] = {}
    process_names: dict[int, str] = {}
    tracks: dict[tuple[int, Any], _Track] = {}
    rows: list[tuple[int, int, tuple[int, Any], str, str, dict[str, Any], list[tuple[int, str, dict[str, Any]]]]] = []
    for span in spans:
        start, end = span.start_time, span.end_time
        if start is None or end is None:
            continue
        attributes = dict(span.attributes or {})
        resource = span.resource
        key = tuple(sorted((k, repr(v)) for k, v in resource.attributes.items()))
        pid = processes.get(key)
        if pid is None:
            pid = processes[key] = len(processes) + 1
            process_names[pid] = _process_name(resource.attributes)
        if attributes.get(A.CLOCK) in A.GPU_CLOCKS:
            device, stream = attributes.get(A.GPU_DEVICE_ID, 0), attributes.get(A.GPU_STREAM_ID, 0)
            track_key: tuple[int, Any] = (pid, ("gpu", device, stream))
            if track_key not in tracks:
                gpus = sum(1 for p, k in tracks if p == pid and k[0] == "gpu")
                tracks[track_key] = _Track(f"GPU {device} stream {stream}", _GPU_SORT_BASE + gpus)
        else:
            thread = attributes.get(A.THREAD_ID)
            track_key = (pid, ("thread", thread))
            if track_key not in tracks:
                name = attributes.get(A.THREAD_NAME)
                if thread is None:
                    label = "spans without thread.id"
                else:
                    label = f"{name} ({thread})" if name else f"thread {thread}"
                tracks[track_key] = _Track(label, 0)
        instants = [(e.timestamp, e.name, dict(e.attributes or {})) for e in span.events]
        rows.append((start, end, track_key, span.name, _category(attributes, span), attributes, instants))
    rows.sort(key=lambda row: (row[0], -row[1]))
    origin = rows[0][0] if rows else 0
    tids: dict[tuple[tuple[int, Any], int], int] = {}
    events: list[str] = []
    for start, end, track_key, name, category, attributes, instants in rows:
        lane = tracks[track_key].place(start, end)
        tid = tids.get((track_key, lane))
        if tid is None:
            tid = tids[(track_key, lane)] = len(tids) + 1
        head = f'{{"ph":"X","ts":{_micros(start - origin)},"dur":{_micros(end - start)},"pid":{track_key[0]},"tid":{tid},'
        body = {"name": name, "cat": category, "args": {k: _value(v) for k, v in attributes.items()}}
        events.append(head + json.dumps(body, ensure_ascii=False, default=str)[1:])
        for timestamp, event_name, event_attributes in instants:
            at = _micros(max(timestamp - origin, 0))
            body = {"name": event_name, "cat": category, "args": {k: _value(v) for k, v in event_attributes.items()}}
            events.append(
                f'{{"ph":"i","s":"t","ts":{at},"pid":{track_key[0]},"tid":{tid},'
                + json.dumps(body, ensure_ascii=False, default=str)[1:]
            )
    metadata = [_meta("process_name", pid, 0, {"name": name}) for pid, name in process_names.items()]
    for (track_key, lane), tid in tids.items():
        track = tracks[track_key]
        name = track.name if lane == 0 else f"{track.name} (overlap {lane})"
        metadata.append(_meta("thread_name", track_key[0], tid, {"name": name}))
        metadata.append(_meta("thread_sort_index", track_key[0], tid, {"sort_index": track.sort + tid}))
    out.write(b'{"displayTimeUnit":"ns","otherData":')
    out.write(json.dumps({"time_origin_unix_ns": origin, "generator": "brickscope"}).encode())
    out.write(b',"traceEvents":[\n')
    for index, line in enumerate(metadata + events):
        out.write((",\n" if index else "").encode() + line.encode("utf-8"))
    out.write(b"\n]}\n")
    return len(rows)


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> str:
    return json.dumps({"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}, ensure_ascii=False)
