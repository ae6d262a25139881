# SPDX-License-Identifier: Apache-2.0
"""The Chrome trace JSON format of :func:`brickscope.offline.open_spans` (``chrome-json``),
torch.profiler's Kineto traces included.

Example::

    from brickscope.offline import open_spans

    with open_spans("trace.json") as spans:      # torch.profiler's export_chrome_trace
        for span in spans:
            print(span.name, span.attributes["brickscope.scope.kind"])

What is read (docs/analysis.md, "Reading Chrome and Kineto traces", is the user's table):

- Phases ``X`` (complete: ``ts`` and ``dur``) and ``B``/``E`` (begin and end, matched per
  ``pid``/``tid`` as a stack: an ``E`` ends the latest open ``B`` of its thread) are slices.
  An ``X`` without ``dur`` or a ``B`` never ended is impossible (``no_end_time``), an ``E``
  with no open ``B`` too (``no_start_time``), a negative ``dur`` or an ``E`` before its
  ``B`` too (``end_before_start``): left out and counted, as every reader does.
- ``ts`` and ``dur`` are microseconds (``displayTimeUnit`` only sets how a viewer displays
  them), read to the nanosecond; ``baseTimeNanoseconds`` (Kineto) or
  ``otherData.time_origin_unix_ns`` (brickscope's writer) is added to ``ts``.
- Nesting: on each ``pid``/``tid`` a slice is the child of the innermost slice that
  contains it (start and end within), the rule torch.profiler's ``key_averages()`` uses.
  A slice that overlaps an open slice only partly is not its child: it goes under the
  innermost slice that does contain it, and is counted (a note of the reading).
  A Kineto slice whose parent has its name and no other child (the dispatcher records some
  operators twice, ``aten::sum`` in ``aten::sum``) is folded into its parent, as
  ``key_averages()`` folds it. A brick's self time is its duration less what its children
  cover, overlapping children (Python frames around ``record_function``) counted once.
- A GPU slice (``_kineto.classify``) is the child of the host operation that launched it:
  the slice around the launch call (``cuda_runtime``/``cuda_driver``) whose ``args.correlation``
  is the GPU slice's, else where its ``ac2g`` flow starts; it keeps the launch call's interval
  as its host start and duration. Other flows (``fwdbwd``...) are left out.
- ``i``/``I`` instants of thread scope become span events of the innermost slice of their
  thread around them (none: left out); global and process instants, counters, async and
  object events, samples are left out, counted by phase in a note.
- ``M`` metadata names processes (``process_name``: the resource's ``service.name``) and
  threads (``thread_name``); ``distributedInfo.rank`` and ``world_size`` go on every
  resource. GPU slices belong to the profiled process (Kineto's GPU ``pid`` is a device).
- ``args`` become attributes under their own names: numbers, strings, booleans and flat
  lists of one of those as they are, anything else as its JSON text. Slices whose args carry
  ``brickscope.scope.kind`` (written by brickscope) keep their attributes as they are.

Every slice is held (compactly) until the file ends: nesting needs all of a thread's
slices, and Kineto writes ``baseTimeNanoseconds`` after the events. The JSON itself is
parsed one event at a time (``_chrome_json``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from brickscope.trace import attributes as A

from ._chrome_json import trace_events
from ._integrity import END_BEFORE_START, NO_END_TIME, NO_START_TIME, impossible
from ._kineto import LAUNCH_CATEGORIES, LEFT_OUT, Role, classify, step_number
from ._source import TraceSource

#: brickscope.offline.SpanRecord (not imported: _formats imports this module).
_Record = tuple[str, int, int, int, int, Resource, dict[str, Any]]
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_UINT64_MAX = _SPAN_ID_RANGE = (1 << 64) - 1
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_FLOW_CATEGORY = "ac2g"
_NO_ARGS: tuple[tuple[str, ...], tuple[Any, ...]] = ((), ())
_KEYS = "keys"  # marks an interned tuple of arg names apart from a tuple value
#: The text of nested lists of integers and plain decimals, the same from str() and json.dumps().
_NUMBER_LISTS = re.compile(r"[\[\]0-9, .-]*")
#: Slices the span and trace ids are drawn from.
_SEED_SLICES = 1024
#: Kineto's host categories: the events ``key_averages()`` builds its tree of (and folds).
_KINETO_HOST = frozenset(("cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver"))


class _Slice:
    """One slice while the file is read: times in ns from the file's origin, its track, its
    args as interned keys and values (a big trace repeats its names, keys, shapes and types),
    and once nested: its parent's index, its process (a GPU slice's is its launcher's), and
    what it takes from its launch (host start and duration) and its ancestors (step number,
    enclosing brick, self time). Its attributes are made only when it is emitted
    (:meth:`_Trace.attributes`): the dicts of a whole file are never held at once."""

    __slots__ = ("name", "category", "start", "end", "track", "pid", "keys", "values", "role", "native",
                 "parent", "launch", "step", "brick", "self_ns")  # fmt: skip

    def __init__(
        self,
        name: str,
        category: str,
        start: int,
        end: int,
        track: tuple[Any, Any],
        args: tuple[tuple[str, ...], tuple[Any, ...]],
        role: Role,
    ) -> None:
        self.name = name
        self.category = category
        self.start = start
        self.end = end
        self.track = track
        self.pid = track[0]
        self.keys, self.values = args
        self.native = A.SCOPE_KIND in self.keys
        self.role = role
        self.parent = -1
        self.launch: tuple[int, int] | None = None
        self.step: int | None = None
        self.brick: str | None = None
        self.self_ns: int | None = None

    def arg(self, key: str) -> Any:
        """The value of arg ``key`` (None: absent)."""
        try:
            return self.values[self.keys.index(key)]
        except ValueError:
            return None


class _Trace:
    """The events of one Chrome trace file, gathered; :meth:`records` makes the spans."""

    def __init__(self, source: TraceSource) -> None:
        self.source = source
        self.header: dict[str, Any] = {}
        self.slices: list[_Slice] = []
        self.open: dict[tuple[Any, Any], list[tuple[int, dict[str, Any]]]] = {}
        self.instants: list[tuple[tuple[Any, Any], int, str, Any]] = []
        self.flows: dict[Any, list[tuple[tuple[Any, Any], int] | None]] = {}
        self.process_names: dict[Any, str] = {}
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.ignored: dict[str, int] = {}
        self.trace_id = 1
        #: One object for each distinct name, key, string value, list value and track.
        self.interned: dict[Any, Any] = {}
        self.roles: dict[tuple[str, str], Role] = {}

    def read(self) -> None:
        for index, event in trace_events(self.source, self.header):
            if type(event) is not dict:
                raise self.source.error(f"traceEvents[{index}]: expected an event object, got {_kind(event)}")
            self._event(index, event)
        for stack in self.open.values():
            for _ in stack:
                self.source.drop(NO_END_TIME)

    def _event(self, index: int, event: dict[str, Any]) -> None:
        phase = event.get("ph")
        pid, tid = self._id(index, event, "pid"), self._id(index, event, "tid")
        track = self.interned.setdefault((type(pid), type(tid), pid, tid), (pid, tid))
        if phase == "X":
            start = self._time(index, event, "ts")
            if "dur" not in event:
                self.source.drop(NO_END_TIME)
                return
            self._slice(event, start, start + self._time(index, event, "dur"), track, event.get("args"))
        elif phase == "B":
            self.open.setdefault(track, []).append((self._time(index, event, "ts"), event))
        elif phase == "E":
            end = self._time(index, event, "ts")
            stack = self.open.get(track)
            if not stack:
                self.source.drop(NO_START_TIME)
                return
            start, begin = stack.pop()
            args = begin.get("args")
            if isinstance(args, dict) and isinstance(event.get("args"), dict):
                args = {**args, **event["args"]}
            self._slice(begin, start, end, track, args)
        elif phase in ("i", "I") and event.get("s", "t") == "t":
            ts = self._time(index, event, "ts")
            self.instants.append((track, ts, _text(event.get("name", "")), event.get("args")))
        elif phase == "M":
            self._metadata(event, track)
        elif phase in ("s", "f") and event.get("cat") == _FLOW_CATEGORY:
            ends = self.flows.setdefault(self._id(index, event, "id"), [None, None])
            ends[phase == "f"] = (track, self._time(index, event, "ts"))
        else:
            if phase in ("s", "t", "f"):
                key = f"{phase} (flow {event.get('cat')})"
            elif phase in ("i", "I"):
                key = f"{phase} (scope {event.get('s')})"
            else:
                key = "(no ph)" if phase is None else str(phase)
            self._leave_out(key)

    def _leave_out(self, what: str) -> None:
        """Count an event the reader does not make a span of (a note at the end)."""
        self.ignored[what] = self.ignored.get(what, 0) + 1

    def _slice(self, event: dict[str, Any], start: int, end: int, track: tuple[Any, Any], args: Any) -> None:
        if end < start:
            self.source.drop(END_BEFORE_START)
            return
        intern = self.interned.setdefault
        name, category = _text(event.get("name", "")), _text(event.get("cat", ""))
        name, category = intern(name, name), intern(category, category)
        brickscope_span = isinstance(args, dict) and A.SCOPE_KIND in args  # its cat is its kind
        if category.lower() in LEFT_OUT and not brickscope_span:
            self._leave_out(f"X (category {category})")
            return
        role = self.roles.get((category, name))
        if role is None:
            role = self.roles[category, name] = classify(category, name)
        self.slices.append(_Slice(name, category, start, end, track, _interned_args(args, intern), role))

    def _metadata(self, event: dict[str, Any], track: tuple[Any, Any]) -> None:
        args = event.get("args")
        name = args.get("name") if isinstance(args, dict) else None
        if not isinstance(name, str):
            return
        if event.get("name") == "process_name":
            self.process_names[track[0]] = name
        elif event.get("name") == "thread_name":
            self.thread_names[track] = name

    def _id(self, index: int, event: dict[str, Any], key: str) -> int | str | float:
        """``event[key]``, a process, thread or flow id: a number or a string (0 when absent)."""
        value = event.get(key, 0)
        if isinstance(value, (int, str, float)) and not isinstance(value, bool):
            return value
        raise self.source.error(f"traceEvents[{index}].{key}: expected a number or a string, got {_kind(value)}")

    def _time(self, index: int, event: dict[str, Any], key: str) -> int:
        """``event[key]`` (microseconds) in nanoseconds."""
        value = event.get(key)
        if isinstance(value, bool):
            pass
        elif isinstance(value, int):
            return value * 1000
        elif isinstance(value, float) and math.isfinite(value):
            return round(value * 1000)
        elif isinstance(value, Decimal) and value.is_finite():
            return int((value * 1000).to_integral_value())
        raise self.source.error(f"traceEvents[{index}].{key}: expected a number of microseconds, got {_kind(value)}")

    # --- spans -------------------------------------------------------------------------

    def records(self, *, with_events: bool) -> Iterator[tuple[_Record, list[Event]]]:
        """Each kept slice as a SpanRecord (and its span events, when asked), in start order."""
        base = self._time_origin()
        self.interned = {}
        slices = [s for s in self.slices if self._possible(s, base)]
        self.slices = []
        events: list[list[Event]] = [[] for _ in slices] if with_events else []
        owners = self._nest(slices, events, base)
        into = _fold(slices)
        self._link(slices, into, owners, base)
        _inherit(slices, into)
        resources = self._resources(slices)
        ids = _id_seed(slices, base, 8)
        self.trace_id = _id_seed(slices, base, 16)
        # start order, the longer first, then trace order: two stable sorts on one key each
        order = sorted(range(len(slices)), key=lambda i: -slices[i].end)
        order.sort(key=lambda i: slices[i].start)
        if with_events:
            for i in order:
                if into[i] != i:
                    events[into[i]].extend(events[i])
        for i in order:
            if into[i] != i:
                continue
            piece = slices[i]
            parent = piece.parent
            record = (
                piece.name, base + piece.start, base + piece.end, (ids + i) % _SPAN_ID_RANGE + 1,
                0 if parent < 0 else (ids + parent) % _SPAN_ID_RANGE + 1,
                resources[piece.pid], self.attributes(piece, base),
            )  # fmt: skip
            yield record, (events[i] if with_events else [])
        if self.ignored:
            phases = ", ".join(f"{count:,} {phase}" for phase, count in sorted(self.ignored.items()))
            self.source.note(f"{sum(self.ignored.values()):,} events left out by phase: {phases}")

    def _time_origin(self) -> int:
        base = self.header.get("baseTimeNanoseconds")
        if base is None:
            other = self.header.get("otherData")
            base = other.get("time_origin_unix_ns") if isinstance(other, dict) else None
        if base is None:
            return 0
        if type(base) is not int or base < 0:
            raise self.source.error(f"baseTimeNanoseconds: expected a whole number of nanoseconds, got {_kind(base)}")
        return base

    def _possible(self, piece: _Slice, base: int) -> bool:
        if base + piece.start < 0:  # no timeline holds it (span times are unsigned)
            raise self.source.error(
                f"slice {piece.name!r} starts at ts {piece.start / 1000:g} µs, before the Unix epoch"
                + ("" if base else " (and there is no baseTimeNanoseconds to add)")
            )
        if base + piece.end > _UINT64_MAX:
            raise self.source.error(f"slice {piece.name!r} ends after 2**64 ns since the Unix epoch")
        attributes = dict(zip(piece.keys, piece.values))
        if not piece.native:
            self._describe(piece, attributes, base)
        reason = impossible(base + piece.start, base + piece.end, attributes)
        if reason is None:
            return True
        self.source.drop(reason)
        return False

    def attributes(self, piece: _Slice, base: int) -> dict[str, Any]:
        """A slice's span attributes: its args; for a non-brickscope slice, what it is
        (:meth:`_describe`), then what its launch and its ancestors give it."""
        attributes = dict(zip(piece.keys, piece.values))
        if piece.native:
            return attributes
        self._describe(piece, attributes, base)
        if piece.launch is not None:
            attributes[A.HOST_START_NS], attributes[A.HOST_DURATION_NS] = piece.launch
        if piece.step is not None:
            attributes[A.STEP_NUMBER] = piece.step
        if piece.brick is not None:
            attributes[A.BRICK_NAME] = piece.brick
        if piece.self_ns is not None:
            attributes[A.BRICK_SELF_DURATION_NS] = piece.self_ns
        return attributes

    def _describe(self, piece: _Slice, attributes: dict[str, Any], base: int) -> None:
        """Add to ``attributes`` what a (non-brickscope) slice is; what comes from its parents
        and its launch is found later (:meth:`_link`, :func:`_inherit`)."""
        role = piece.role
        duration = piece.end - piece.start
        attributes[A.SCOPE_KIND] = role.kind
        if role.kind == A.SCOPE_KIND_STEP:
            attributes[A.STEP_NUMBER] = step_number(piece.name)
        elif role.kind == A.SCOPE_KIND_BRICK:
            attributes[A.BRICK_NAME] = piece.name
        if role.category:
            attributes[A.BRICK_CATEGORY] = role.category
        pid, tid = piece.track
        if role.gpu:
            device, stream = attributes.get("device"), attributes.get("stream")
            attributes[A.CLOCK] = A.CLOCK_GPU
            attributes[A.GPU_DEVICE_ID] = device if type(device) is int else pid if type(pid) is int else 0
            attributes[A.GPU_STREAM_ID] = stream if type(stream) is int else tid if type(tid) is int else 0
            attributes[A.GPU_DURATION_NS] = duration
            if role.kind == A.SCOPE_KIND_KERNEL:
                attributes[A.KERNEL_NAME] = piece.name
                _launch_configuration(attributes)
        else:
            attributes[A.CLOCK] = A.CLOCK_HOST
            attributes[A.HOST_START_NS] = base + piece.start
            attributes[A.HOST_DURATION_NS] = duration
            if type(tid) is int:
                attributes[A.THREAD_ID] = tid
            thread_name = self.thread_names.get(piece.track)
            if thread_name is not None:
                attributes[A.THREAD_NAME] = thread_name

    def _nest(self, slices: list[_Slice], events: list[list[Event]], base: int) -> list[int]:
        """Set each slice's parent on its track; attach instants to ``events``; return the
        slice each flow end lies in (-1: none), start then end for each flow of ``self.flows``."""
        by_track: dict[Any, list[tuple[int, int, int, int]]] = {}
        for i, piece in enumerate(slices):
            by_track.setdefault(piece.track, []).append((piece.start, -piece.end, 0, i))
        # Points (instants, flow ends) are owned by the innermost slice around them.
        points: list[tuple[Any, int]] = [(track, ts) for track, ts, _name, _args in self.instants]
        instants = len(points)
        for ends in self.flows.values():
            points.extend(end if end is not None else (None, 0) for end in ends)
        for p, (track, ts) in enumerate(points):
            if track in by_track:
                by_track[track].append((ts, -ts, 1, p))
        owners = [-1] * len(points)
        partial = 0
        for items in by_track.values():
            items.sort()
            stack: list[int] = []
            for start, negative_end, is_point, i in items:
                if is_point:
                    while stack and slices[stack[-1]].end < start:
                        stack.pop()
                    owners[i] = stack[-1] if stack else -1
                    continue
                end, overlapped = -negative_end, False
                while stack:
                    top = slices[stack[-1]]
                    if top.end > start and top.end >= end:
                        break
                    overlapped = overlapped or top.end > start  # it ends inside this one: partial
                    stack.pop()
                partial += overlapped
                slices[i].parent = stack[-1] if stack else -1
                stack.append(i)
        if partial:
            self.source.note(
                f"{partial:,} slices partly overlap another of their thread: each is placed under"
                " the innermost slice that contains it"
            )
        for (_track, ts, name, args), owner in zip(self.instants, owners):
            if owner < 0:
                self._leave_out("i (outside every slice of its thread)")
            elif events:
                events[owner].append(Event(name, _attributes(args), base + ts))
        self.instants = []
        return owners[instants:]

    def _link(self, slices: list[_Slice], into: list[int], owners: list[int], base: int) -> None:
        """Put each GPU slice under the host operation that launched it (``args.correlation``,
        else its ``ac2g`` flow), in the launching process."""
        calls: dict[int, int] = {}
        for i, piece in enumerate(slices):
            if into[i] == i and piece.category.lower() in LAUNCH_CATEGORIES:
                correlation = piece.arg("correlation")
                if type(correlation) is int:
                    calls[correlation] = i
        launches: dict[int, int] = {}
        for i, piece in enumerate(slices):
            correlation = piece.arg("correlation") if piece.role.gpu else None
            if piece.role.gpu and not piece.native and type(correlation) is int and correlation in calls:
                launches[i] = calls[correlation]
        for start, end in zip(owners[::2], owners[1::2]):
            if start >= 0 and end >= 0:
                start, end = into[start], into[end]
                if slices[end].role.gpu and not slices[end].native and not slices[start].role.gpu:
                    launches.setdefault(end, start)
        host_pid = next((s.track[0] for s in slices if not s.role.gpu), None)
        for i, piece in enumerate(slices):
            if piece.role.gpu and not piece.native and i not in launches and host_pid is not None:
                piece.pid = host_pid
        for i, call in launches.items():
            piece, caller = slices[i], slices[call]
            operation = caller.parent if caller.parent >= 0 and caller.category.lower() in LAUNCH_CATEGORIES else call
            if _within(slices, operation, i):
                continue  # a GPU slice on a host thread around its own launch: left where it is
            piece.parent = operation
            piece.pid = caller.pid
            piece.launch = (base + caller.start, caller.end - caller.start)

    def _resources(self, slices: list[_Slice]) -> dict[Any, Resource]:
        """A resource per process id: its name, pid, host name and the job's rank."""
        common: dict[str, Any] = {}
        host = self.header.get("host_name")
        if isinstance(host, str) and host:
            common[A.HOST_NAME] = host
        info = self.header.get("distributedInfo")
        if isinstance(info, dict):
            for key, attribute in (("rank", A.RANK), ("world_size", A.WORLD_SIZE)):
                if type(info.get(key)) is int:
                    common[attribute] = info[key]
        resources: dict[Any, Resource] = {}
        for piece in slices:
            pid = piece.pid
            if pid not in resources:
                attributes = dict(common)
                name = self.process_names.get(pid)
                if name:
                    attributes["service.name"] = name
                if type(pid) is int and pid > 0:
                    attributes["process.pid"] = pid
                resources[pid] = Resource(attributes)
        return resources


def _fold(slices: list[_Slice]) -> list[int]:
    """Fold each Kineto host slice that is its same-named parent's only child into the parent
    (``key_averages()``'s rule, repeated down a chain); return what each slice is folded into
    (itself when kept). A kept slice's parent is a kept slice."""
    children = [0] * len(slices)
    for piece in slices:
        if piece.parent >= 0:
            children[piece.parent] += 1
    into = list(range(len(slices)))
    for i in sorted(range(len(slices)), key=lambda i: (slices[i].start, -slices[i].end, i)):  # parents first
        piece = slices[i]
        if piece.parent < 0:
            continue
        parent = piece.parent = into[piece.parent]
        above = slices[parent]
        if (
            children[parent] == 1
            and above.name == piece.name
            and piece.category in _KINETO_HOST
            and above.category in _KINETO_HOST
        ):
            into[i] = parent
            children[parent] = children[i]
    return into


def _within(slices: list[_Slice], slice_index: int, ancestor: int) -> bool:
    """Whether ``ancestor`` is ``slice_index`` or one of its ancestors."""
    for _ in range(len(slices) + 1):
        if slice_index == ancestor:
            return True
        if slice_index < 0:
            return False
        slice_index = slices[slice_index].parent
    return True  # a cycle: treat as within, so no link makes it worse


def _nearest(slices: list[_Slice], wanted: list[bool]) -> list[int]:
    """Each slice's nearest proper ancestor for which ``wanted`` holds (-1: none)."""
    up = [-2] * len(slices)
    for i in range(len(slices)):
        chain = []
        j = i
        while j >= 0 and up[j] == -2:
            chain.append(j)
            j = slices[j].parent
        for k in reversed(chain):
            parent = slices[k].parent
            up[k] = -1 if parent < 0 else parent if wanted[parent] else up[parent]
    return up


def _inherit(slices: list[_Slice], into: list[int]) -> None:
    """What a (non-brickscope) slice takes from its ancestors: the step number, a kernel's
    enclosing brick, and a brick's self time (its duration less the time covered by the
    bricks and steps on its clock whose nearest enclosing brick it is: a Python frame of the
    training loop holds the profiler's steps)."""
    steps = _nearest(slices, [s.role.kind == A.SCOPE_KIND_STEP for s in slices])
    bricks = _nearest(slices, [s.role.kind == A.SCOPE_KIND_BRICK for s in slices])
    nested: dict[int, list[tuple[int, int]]] = {}
    for i, piece in enumerate(slices):
        if piece.native or into[i] != i:
            continue
        above = bricks[i]
        if piece.role.kind != A.SCOPE_KIND_KERNEL and above >= 0 and slices[above].role.gpu == piece.role.gpu:
            nested.setdefault(above, []).append((piece.start, piece.end))
        if steps[i] >= 0 and piece.role.kind != A.SCOPE_KIND_STEP:
            step = slices[steps[i]]
            piece.step = step.arg(A.STEP_NUMBER) if step.native else step_number(step.name)
        if piece.role.kind == A.SCOPE_KIND_KERNEL and above >= 0:
            piece.brick = slices[above].name
    for i, piece in enumerate(slices):
        if piece.role.kind == A.SCOPE_KIND_BRICK and not piece.native:
            piece.self_ns = piece.end - piece.start - _covered(nested.get(i, ()), piece.start, piece.end)


def _covered(intervals: Iterable[tuple[int, int]], start: int, end: int) -> int:
    """Nanoseconds of [start, end) covered by the union of ``intervals``. Children that
    partly overlap one another (torch.profiler's Python frames around the operations they
    call) are counted once, so a self time is never below zero; where children do not
    overlap (every properly nested trace) it is the sum of their durations."""
    covered, reached = 0, start
    for low, high in sorted(intervals):
        low, high = max(low, reached), min(high, end)
        if high > low:
            covered += high - low
            reached = high
    return covered


def _id_seed(slices: list[_Slice], base: int, size: int) -> int:
    """A number of ``size`` bytes drawn from the file's slices: a file gets the same span and
    trace ids each time it is read (two copies of one trace are told the same by ``merge``)."""
    digest = hashlib.blake2b(f"{base}:{len(slices)}".encode(), digest_size=size)
    for piece in slices[:_SEED_SLICES]:
        digest.update(f"|{piece.name}:{piece.start}:{piece.end}:{(piece.pid, piece.track[1])}".encode())
    return int.from_bytes(digest.digest(), "big") or 1


def _launch_configuration(attributes: dict[str, Any]) -> None:
    """A Kineto kernel's ``grid``, ``block`` and ``shared memory`` args as brickscope's."""
    for arg, key in (("grid", A.KERNEL_GRID), ("block", A.KERNEL_BLOCK)):
        dims = attributes.get(arg)
        if type(dims) is tuple and len(dims) == 3 and all(type(d) is int for d in dims):
            attributes[key] = dims
    shared = attributes.get("shared memory")
    if type(shared) is int and shared >= 0:
        attributes[A.KERNEL_SHARED_MEM_BYTES] = shared


def _interned_args(args: Any, intern: Callable[[Any, Any], Any]) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """An event's ``args`` as attribute keys and values (:func:`_attributes`), the keys, their
    tuple and the string and text values interned (``intern``: a dict's ``setdefault``). A
    tuple value is interned by its item type as well (``(1, 2)`` equals ``(True, 2)``), and
    only of strings or integers (``(0.0,)`` equals ``(-0.0,)``)."""
    if not isinstance(args, dict):
        return _NO_ARGS
    keys: list[str] = []
    values: list[Any] = []
    for key, value in args.items():
        if value is None:
            continue
        value = _value(value)
        kind = type(value)
        if kind is str:
            value = intern(value, value)
        elif kind is tuple and type(value[0]) in (str, int):
            value = intern((type(value[0]), value), value)
        keys.append(intern(key, key))
        values.append(value)
    names = tuple(keys)
    return intern((_KEYS, names), names), tuple(values)


def _attributes(args: Any) -> dict[str, Any]:
    """An event's ``args`` as span attributes (see the module's documentation)."""
    if not isinstance(args, dict):
        return {}
    out: dict[str, Any] = {}
    for key, value in args.items():
        if value is not None:
            out[key] = _value(value)
    return out


def _value(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is bool or kind is float:
        return value
    if kind is int:
        return value if _INT64_MIN <= value <= _INT64_MAX else str(value)
    if kind is Decimal:
        return float(value)
    if kind is list and value:
        first = type(value[0])
        if first in (str, bool, int, float) and all(type(item) is first for item in value):
            if first is not int or all(_INT64_MIN <= item <= _INT64_MAX for item in value):
                return tuple(value)
    if kind is list:
        # Lists of numbers (Kineto's Input Dims and Strides): Python writes them as JSON does.
        text = str(value)
        if _NUMBER_LISTS.fullmatch(text):
            return text
    return json.dumps(value, default=float, ensure_ascii=False)  # default: a long number (Decimal)


def _text(value: Any) -> str:
    return value if type(value) is str else str(value)


def _kind(value: Any) -> str:
    """A short description of a JSON value, for error messages."""
    if isinstance(value, str):
        return f"string {value[:40]!r}"
    return {dict: "an object", list: "an array", bool: "a boolean", type(None): "nothing"}.get(
        type(value), f"{type(value).__name__} {value!r}"
    )


def read_chrome_records(source: TraceSource) -> Iterator[_Record]:
    """Yield a SpanRecord per slice of a Chrome trace JSON file (the ``chrome-json`` format)."""
    trace = _Trace(source)
    trace.read()
    for record, _events in trace.records(with_events=False):
        yield record


def read_chrome(source: TraceSource) -> Iterator[ReadableSpan]:
    """Yield a span per slice of a Chrome trace JSON file, thread-scoped instants as its events."""
    trace = _Trace(source)
    trace.read()
    for (name, start, end, span_id, parent_id, resource, attributes), events in trace.records(with_events=True):
        trace_id = trace.trace_id
        yield ReadableSpan(
            name=name,
            context=SpanContext(trace_id, span_id, False, _SAMPLED),
            parent=SpanContext(trace_id, parent_id, False, _SAMPLED) if parent_id else None,
            resource=resource,
            attributes=attributes,
            events=sorted(events, key=lambda e: e.timestamp),
            kind=SpanKind.INTERNAL,
            start_time=start,
            end_time=end,
        )
