# SPDX-License-Identifier: Apache-2.0
"""Span trees folded into weighted stacks, across batches that arrive in any order.

Example::

    stacks = StackAggregator(Weight.parse("gpu"))
    for batch in batches:                 # children before parents, or after: both work
        for span in batch:
            stacks.add(span)
    profile = stacks.snapshot()           # [(timeline, frames, self weight, first start)]

Core model
----------

A span's **stack** is the service name followed by the names of its ancestors
and its own; its **self weight** is its extent minus what its nearest weighted
descendants cover of it (``_weights``). Neither is known when the span arrives:
ancestors and children may come in later batches. So:

- A span whose parent has not arrived yet waits in a **group** keyed by the
  parent's id, already folded: the group holds the *relative* stacks below that
  parent with their weights, plus the cover of the parent's weighted children.
  Memory for a subtree waiting on a long-lived parent is one entry per distinct
  stack, not per span.
- When a span arrives, the group waiting for it (its children) gives its cover,
  hence its self weight, and its relative stacks are rebased under it. If its
  parent has arrived, everything lands at the parent's place; if not, into the
  parent's group.
- A span that has arrived stays in a bounded **recent** table (``late_window``
  spans, oldest evicted first), so that a child arriving *after* its parent
  still finds its stack and still takes its time out of the parent's self
  weight. A child whose parent is gone from that table is handled as one whose
  parent never arrived.
- A root (no parent, or a remote parent) goes straight under its service frame.
  At :meth:`StackAggregator.snapshot`, groups whose parent never arrived (it
  was dropped, not sampled, or has not ended yet) are placed under the service
  frame too, and counted as ``orphaned``; they stay pending, so a parent that
  does arrive later still adopts them.

Memory is therefore proportional to distinct (timeline, stack) pairs, plus the
spans waiting for a parent (as folded groups), plus ``late_window`` recent spans.

With ``device_frames`` on, a GPU-timed span whose parent is not on the same GPU
stream gets ``cuda:<device>`` and ``stream:<handle>`` frames above it, like the
``trace;device;op`` stacks of recorded-trace analyzers. The decision needs the
parent, so the first frame of a relative stack may be a *pending* GPU frame,
expanded when the stack is rebased under its parent.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from brickscope.exporter.flamegraph._weights import Weight
from brickscope.trace import attributes as A

__all__ = ["Profile", "StackAggregator", "Stats"]

#: Service frame for spans whose resource has no service.name (OTel's own default).
UNKNOWN_SERVICE = "unknown_service"
#: Default number of arrived spans remembered for children that arrive after them.
DEFAULT_LATE_WINDOW = 65_536
_EMPTY = 0  # the trie's root: the empty stack
_SERVICE_NAME = "service.name"


@dataclass
class Stats:
    """Counts over the run, for the log and the command line."""

    spans: int = 0  #: spans received
    weighted: int = 0  #: spans that carried the chosen weight
    unweighted: int = 0  #: spans without it: frames only, weight 0
    invalid: int = 0  #: spans without a valid span context: ignored
    orphaned: int = 0  #: at the last snapshot: spans placed at the root, parent missing


@dataclass
class Row:
    """One (timeline, stack) with its total self weight."""

    timeline: int
    frames: tuple[str, ...]
    weight: float
    first_start: int


@dataclass
class Profile:
    """A snapshot of the aggregate: what the writers turn into files."""

    rows: list[Row]
    timelines: list[
        tuple[Any, ...]
    ]  #: ("gpu", service, device, stream) | ("thread", service, id, name)
    weight: Weight
    stats: Stats


class _Group:
    """Spans waiting for the parent ``key`` to arrive, already folded."""

    __slots__ = ("weights", "cover", "service", "spans")

    def __init__(self, cover: Any) -> None:
        self.weights: dict[tuple[int, int], list[Any]] = {}  # (timeline, rel stack) -> [w, start]
        self.cover = cover  # what the parent's weighted children cover
        self.service = _EMPTY  # service frame of the waiting spans
        self.spans = 0


# A span that has arrived, where it sits, for children that come after it: a plain tuple
# (parent key or None for a root; anchor: None if the stack is absolute, else the key of
# the pending group it is relative to; stack; GPU timeline id for device frames, or None;
# timeline; extent, None: no weight; cover of its weighted children, None: none yet).
# A plain tuple of ints, which most are (a leaf has no cover), is one the cyclic garbage
# collector stops tracking, so the late window adds almost nothing to each collection
# (an object per remembered span made a full collection traverse 65,536 more, with the
# interpreter held). Changing one means storing a new tuple.
_Arrived = tuple
_PARENT, _ANCHOR, _STACK, _GPU, _TIMELINE, _EXTENT, _COVER = range(7)


class StackAggregator:
    """Folds spans, in any arrival order, into self weights per (timeline, stack).

    Not thread-safe: the exporter calls it under its lock.

    Args:
        weight: which clock (or attribute) weighs the spans.
        device_frames: add ``cuda:<device>;stream:<handle>`` frames above GPU spans.
        late_window: arrived spans remembered for children that arrive later.
    """

    def __init__(
        self, weight: Weight, *, device_frames: bool = False, late_window: int = DEFAULT_LATE_WINDOW
    ) -> None:
        if late_window < 0:
            raise ValueError(f"late_window must be >= 0, got {late_window}")
        self.weight = weight
        self.stats = Stats()
        self._device_frames = device_frames
        self._late_window = late_window
        # Frames: a str, or (gpu timeline id, frame id) for a pending GPU frame.
        self._frames: list[Any] = [""]
        self._frame_ids: dict[Any, int] = {}
        # The stack trie: stack id -> (parent stack, frame); 0 is the empty stack.
        self._stack_parent: list[int] = [-1]
        self._stack_frame: list[int] = [-1]
        self._stack_ids: dict[tuple[int, int], int] = {}
        self._timelines: list[tuple[Any, ...]] = []
        self._timeline_ids: dict[tuple[Any, ...], int] = {}
        self._weights: dict[tuple[int, int], list[Any]] = {}  # (timeline, stack) -> [w, start]
        self._waiting: dict[int, _Group] = {}
        # Recent spans by key, and their keys in arrival order (a plain dict plus a deque
        # of keys takes about half the memory of an OrderedDict).
        self._arrived: dict[int, _Arrived] = {}
        self._arrival_order: deque[int] = deque()
        self._services: dict[int, tuple[Any, int]] = {}  # id(resource) -> (resource, frame)

    # -- arrival -------------------------------------------------------------------

    def add(self, span: ReadableSpan) -> None:
        """Fold one ended span in. Raises only on a span that breaks the SDK's types."""
        self.stats.spans += 1
        context = span.context
        if context is None or not context.is_valid:
            self.stats.invalid += 1
            return
        key = (context.trace_id << 64) | context.span_id
        parent = span.parent
        parent_key = None
        if parent is not None and parent.is_valid and not parent.is_remote:
            parent_key = (parent.trace_id << 64) | parent.span_id
        attributes = span.attributes or {}
        weight = self.weight
        extent = weight.extent(span)
        service = self._service_frame(span)
        gpu = self._gpu_timeline(attributes, service)
        timeline = self._timeline(attributes, service, gpu if weight.name == "gpu" else None)
        name = self._frame(span.name or "")
        frame = self._frame((gpu, name)) if self._device_frames and gpu is not None else name

        group = self._waiting.pop(key, None)
        cover = group.cover if group is not None else None  # created when a child needs it
        self_weight = None
        if extent is not None:
            self.stats.weighted += 1
            self_weight = weight.size(extent) - (cover.within(extent) if cover else 0)
        else:
            self.stats.unweighted += 1

        # Where the span sits: under its arrived parent, or relative to its pending one.
        anchor, stack = None, _EMPTY
        here = self._arrived.get(parent_key) if parent_key is not None else None
        if parent_key is None:
            stack = self._rebase(self._child(_EMPTY, service), None, self._child(_EMPTY, frame))
        elif here is not None and (place := self._locate(parent_key)) is not None:
            anchor, parent_stack = place
            stack = self._rebase(parent_stack, here[_GPU], self._child(_EMPTY, frame))
            if extent is not None:
                self._cover_up(parent_key, [extent])
            elif cover is not None:
                self._cover_up(parent_key, cover.extents())
        else:
            anchor, stack = parent_key, self._child(_EMPTY, frame)
            waiting = self._waiting.get(parent_key)
            if waiting is None:
                waiting = self._waiting[parent_key] = _Group(weight.new_cover())
            if extent is not None:
                waiting.cover.add(extent)
            elif cover is not None:
                waiting.cover.merge(cover)
            waiting.service = waiting.service or service

        if anchor is None:
            target = self._weights
        else:
            waiting = self._waiting[anchor]
            waiting.spans += 1 + (group.spans if group is not None else 0)
            target = waiting.weights
        if self_weight:
            _accumulate(target, (timeline, stack), self_weight, weight.start(extent, span))
        if group is not None:
            memo: dict[int, int] = {}
            for (line, relative), (amount, start) in group.weights.items():
                rebased = self._rebase(stack, gpu, relative, memo)
                _accumulate(target, (line, rebased), amount, start)

        if self._late_window:
            if key not in self._arrived:
                self._arrival_order.append(key)
            self._arrived[key] = (parent_key, anchor, stack, gpu, timeline, extent, cover)
            if len(self._arrival_order) > self._late_window:
                del self._arrived[self._arrival_order.popleft()]

    def _cover_up(self, key: int, extents: list[Any]) -> None:
        """A late child's extents cover its nearest weighted ancestor (from ``key`` up)."""
        if not extents:
            return
        while True:
            node = self._arrived.get(key)
            if node is None:  # not arrived (or forgotten): its group keeps the cover
                waiting = self._waiting.get(key)
                if waiting is not None:
                    for extent in extents:
                        waiting.cover.add(extent)
                return
            extent, cover = node[_EXTENT], node[_COVER]
            if extent is not None:
                if cover is None:
                    cover = self.weight.new_cover()
                    self._arrived[key] = (*node[:_COVER], cover)
                newly = sum(cover.add_within(e, extent) for e in extents)
                place = self._locate(key) if newly else None
                if place is not None:
                    anchor, stack = place
                    target = self._weights if anchor is None else self._waiting[anchor].weights
                    _accumulate(target, (node[_TIMELINE], stack), -newly, None)
                return
            if node[_PARENT] is None:
                return
            key = node[_PARENT]

    def _locate(self, key: int) -> tuple[int | None, int] | None:
        """(anchor, stack) of the arrived span ``key`` now, or None if its place was forgotten."""
        node = self._arrived[key]
        while (anchor := node[_ANCHOR]) is not None:
            if anchor in self._waiting:
                return anchor, node[_STACK]  # its parent is still pending: relative place
            above = self._arrived.get(anchor)
            if above is None:
                return None
            place = self._locate(anchor)
            if place is None:
                return None
            # Path compression: remember the resolved place.
            stack = self._rebase(place[1], above[_GPU], node[_STACK])
            node = self._arrived[key] = (node[_PARENT], place[0], stack, *node[_GPU:])
        return None, node[_STACK]

    # -- snapshot ------------------------------------------------------------------

    def snapshot(self) -> Profile:
        """The aggregate now: placed stacks plus orphan groups at the root (not consumed)."""
        totals: dict[tuple[int, int], list[Any]] = {k: list(v) for k, v in self._weights.items()}
        orphaned = 0
        for group in self._waiting.values():
            if not group.weights:
                continue
            orphaned += group.spans
            root = self._child(_EMPTY, group.service or self._frame(UNKNOWN_SERVICE))
            memo: dict[int, int] = {}
            for (line, relative), (amount, start) in group.weights.items():
                _accumulate(totals, (line, self._rebase(root, None, relative, memo)), amount, start)
        self.stats.orphaned = orphaned
        frames_of: dict[int, tuple[str, ...]] = {}
        rows = [
            Row(line, self._stack_frames(stack, frames_of), amount, start)
            for (line, stack), (amount, start) in totals.items()
            if amount > 0
        ]
        return Profile(rows, list(self._timelines), self.weight, Stats(**vars(self.stats)))

    def _stack_frames(self, stack: int, memo: dict[int, tuple[str, ...]]) -> tuple[str, ...]:
        if stack == _EMPTY:
            return ()
        found = memo.get(stack)
        if found is None:
            parent = self._stack_frames(self._stack_parent[stack], memo)
            found = memo[stack] = (*parent, self._frames[self._stack_frame[stack]])
        return found

    # -- interning -----------------------------------------------------------------

    def _frame(self, token: Any) -> int:
        found = self._frame_ids.get(token)
        if found is None:
            found = self._frame_ids[token] = len(self._frames)
            self._frames.append(token)
        return found

    def _child(self, stack: int, frame: int) -> int:
        key = (stack, frame)
        found = self._stack_ids.get(key)
        if found is None:
            found = self._stack_ids[key] = len(self._stack_parent)
            self._stack_parent.append(stack)
            self._stack_frame.append(frame)
        return found

    def _rebase(
        self, base: int, base_gpu: int | None, relative: int, memo: dict[int, int] | None = None
    ) -> int:
        """The stack ``base`` + ``relative``; a pending GPU frame first in ``relative``
        expands by whether ``base`` ends on the same GPU stream."""
        if relative == _EMPTY:
            return base
        if memo is not None and relative in memo:
            return memo[relative]
        parent = self._stack_parent[relative]
        frame = self._stack_frame[relative]
        if parent == _EMPTY:
            token = self._frames[frame]
            result = base
            if isinstance(token, tuple):
                gpu, frame = token
                if gpu != base_gpu:
                    _, _, device, stream = self._timelines[gpu]
                    result = self._child(result, self._frame(f"cuda:{device}"))
                    result = self._child(result, self._frame(f"stream:{_stream(stream)}"))
            result = self._child(result, frame)
        else:
            result = self._child(self._rebase(base, base_gpu, parent, memo), frame)
        if memo is not None:
            memo[relative] = result
        return result

    def _service_frame(self, span: ReadableSpan) -> int:
        resource = span.resource
        cached = self._services.get(id(resource))
        if cached is not None and cached[0] is resource:
            return cached[1]
        name = None
        if resource is not None:
            name = resource.attributes.get(_SERVICE_NAME)
        frame = self._frame(str(name) if name else UNKNOWN_SERVICE)
        if len(self._services) > 64:  # resources are normally shared: this stays tiny
            self._services.clear()
        self._services[id(resource)] = (resource, frame)
        return frame

    def _gpu_timeline(self, attributes: Any, service: int) -> int | None:
        stream = attributes.get(A.GPU_STREAM_ID)
        if attributes.get(A.CLOCK) not in A.GPU_CLOCKS or type(stream) is not int:
            return None
        device = attributes.get(A.GPU_DEVICE_ID)
        return self._intern_timeline(("gpu", self._frames[service], device, stream))

    def _timeline(self, attributes: Any, service: int, gpu: int | None) -> int:
        if gpu is not None:
            return gpu
        thread = (attributes.get(A.THREAD_ID), attributes.get(A.THREAD_NAME))
        return self._intern_timeline(("thread", self._frames[service], *thread))

    def _intern_timeline(self, key: tuple[Any, ...]) -> int:
        found = self._timeline_ids.get(key)
        if found is None:
            found = self._timeline_ids[key] = len(self._timelines)
            self._timelines.append(key)
        return found


def _accumulate(
    table: dict[tuple[int, int], list[Any]], key: tuple[int, int], amount: float, start: Any
) -> None:
    entry = table.get(key)
    if entry is None:
        table[key] = [amount, start if start is not None else 0]
    else:
        entry[0] += amount
        if start is not None and start < entry[1]:
            entry[1] = start


def _stream(handle: Any) -> str:
    return f"{handle:#x}" if isinstance(handle, int) else str(handle)
