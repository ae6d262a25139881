# SPDX-License-Identifier: Apache-2.0
"""Tests for the stack aggregator: self weights over span trees arriving in any order.

The reference ("oracle") below recomputes every self weight independently, from
the whole tree at once and by brute force over integer time points, so the
streaming algorithm is checked against a definition, not against itself.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from opentelemetry.sdk.resources import Resource

from brickscope.exporter.flamegraph._stacks import StackAggregator
from brickscope.exporter.flamegraph._weights import Weight
from brickscope.trace import attributes as A

US = 1_000


def _fold(spans, weight="gpu", *, order=None, batches=1, **options) -> dict[tuple[str, ...], float]:
    """Feed spans (in ``order``) and return {stack: weight} summed over timelines."""
    stacks = StackAggregator(Weight.parse(weight), **options)
    for span in order if order is not None else spans:
        stacks.add(span)
    totals: dict[tuple[str, ...], float] = {}
    for row in stacks.snapshot().rows:
        totals[row.frames] = totals.get(row.frames, 0) + row.weight
    return totals


def _oracle(spans, weight: str, device_frames: bool = False) -> dict[tuple[str, ...], float]:
    """Self weights by definition: extent minus the union (or sum) of the nearest
    weighted descendants, clipped to the span; computed from the whole tree."""
    measure = Weight.parse(weight)
    by_id = {s.context.span_id: s for s in spans}

    def parent_of(span):
        p = span.parent
        if p is None or p.is_remote or p.span_id not in by_id:
            return None
        return by_id[p.span_id]

    children: dict[int, list] = {}
    for s in spans:
        parent = parent_of(s)
        if parent is not None:
            children.setdefault(parent.context.span_id, []).append(s)

    def nearest_weighted(span):
        found = []
        for child in children.get(span.context.span_id, []):
            if measure.extent(child) is not None:
                found.append(child)
            else:
                found.extend(nearest_weighted(child))
        return found

    def gpu_of(span):
        attrs = span.attributes
        if attrs.get(A.CLOCK) != A.CLOCK_CUDA or A.GPU_STREAM_ID not in attrs:
            return None
        return (attrs.get(A.GPU_DEVICE_ID), attrs.get(A.GPU_STREAM_ID))

    def stack_of(span):
        parent = parent_of(span)
        above = (
            stack_of(parent) if parent is not None else (span.resource.attributes["service.name"],)
        )
        own = (span.name,)
        gpu = gpu_of(span)
        if device_frames and gpu is not None and (parent is None or gpu_of(parent) != gpu):
            own = (f"cuda:{gpu[0]}", f"stream:{gpu[1]:#x}", span.name)
        return above + own

    expected: dict[tuple[str, ...], float] = {}
    for s in spans:
        extent = measure.extent(s)
        if extent is None:
            continue
        kids = [measure.extent(c) for c in nearest_weighted(s)]
        if measure.is_time:
            lo, hi = extent
            covered = {t for a, b in kids for t in range(max(a, lo), min(b, hi))}
            own = (hi - lo) - len(covered)
        else:
            own = max(0, extent - sum(kids))
        if own:
            key = stack_of(s)
            expected[key] = expected.get(key, 0) + own
    return expected


class TestSelfTime:
    def test_nested_gpu_tree_self_times(self, make_span):
        """Known GPU times: each frame weighs its duration minus its children's."""
        layer = make_span("layer", host=(0, 1000))
        brick = make_span("rms_norm", layer, gpu=(100, 600))
        k1 = make_span("k1", brick, gpu=(100, 250))
        k2 = make_span("k2", brick, gpu=(300, 500))
        got = _fold([k1, k2, brick, layer])
        assert got == {
            ("svc", "layer", "rms_norm"): 150,  # 500 - 150 - 200
            ("svc", "layer", "rms_norm", "k1"): 150,
            ("svc", "layer", "rms_norm", "k2"): 200,
        }

    def test_weights_sum_to_root_total(self, make_span):
        """Without overlapping siblings, all weights add up to the roots' total time."""
        step = make_span("step", host=(0, 10_000))
        layers = [make_span("layer", step, host=(i * 3000, i * 3000 + 2500)) for i in range(3)]
        bricks = [
            make_span("b", layer, host=(layer.start_time, layer.start_time + 700))
            for layer in layers
        ]
        got = _fold([*bricks, *layers, step], "host")
        assert sum(got.values()) == 10_000
        assert got[("svc", "step")] == 10_000 - 3 * 2500

    def test_overlapping_streams_subtract_the_union(self, make_span):
        """Children overlapping on two streams are subtracted once (their union)."""
        brick = make_span("attn", gpu=(0, 100), stream=1)
        a = make_span("qk", brick, gpu=(0, 60), stream=1)
        b = make_span("softmax", brick, gpu=(40, 90), stream=2)
        got = _fold([a, b, brick])
        assert got[("svc", "attn")] == 10  # 100 - |[0, 90)|
        assert got[("svc", "attn", "qk")] == 60 and got[("svc", "attn", "softmax")] == 50

    def test_child_outside_parent_is_clipped(self, make_span):
        """A child sticking out of its parent takes only its inside part, never below zero."""
        brick = make_span("b", gpu=(100, 200))
        kernel = make_span("k", brick, gpu=(150, 400))
        got = _fold([kernel, brick])
        assert got[("svc", "b")] == 50
        assert got[("svc", "b", "k")] == 250

    def test_gpu_weight_skips_host_only_spans(self, make_span):
        """In GPU weight, host-timed spans are frames only; their GPU descendants count."""
        step = make_span("step", host=(0, 10**6))
        brick = make_span("b", step, host=(10, 20))  # GPU timing failed: host-timed
        kernel = make_span("k", brick, gpu=(500, 800))
        got = _fold([kernel, brick, step])
        assert got == {("svc", "step", "b", "k"): 300}

    def test_nearest_weighted_descendant_covers_through_unweighted(self, make_span):
        """A GPU brick's self time excludes kernels below a host-only span between them."""
        brick = make_span("b", gpu=(0, 1000))
        middle = make_span("host_only", brick, host=(0, 5))
        kernel = make_span("k", middle, gpu=(0, 400))
        for order in ([kernel, middle, brick], [brick, middle, kernel], [middle, brick, kernel]):
            assert _fold(order)[("svc", "b")] == 600

    def test_host_weight_uses_host_interval_of_gpu_spans(self, make_span):
        """Host weight reads brickscope.host.* on GPU spans, never their GPU start/end."""
        brick = make_span("b", host=(0, 50), gpu=(10_000, 20_000))
        kernel = make_span("k", brick, host=(5, 25), gpu=(10_000, 15_000))
        assert _fold([kernel, brick], "host") == {("svc", "b"): 30, ("svc", "b", "k"): 20}
        assert _fold([kernel, brick], "gpu") == {("svc", "b"): 5000, ("svc", "b", "k"): 5000}

    def test_host_weight_refuses_gpu_span_without_host_interval(self, make_span):
        """A GPU-timed span lacking host attributes has no host time (not its GPU time)."""
        brick = make_span("b", host=None, gpu=(10_000, 20_000))
        assert _fold([brick], "host") == {}

    def test_attribute_weight_is_inclusive(self, make_span):
        """A numeric attribute weighs like a duration: parent value minus children's, >= 0."""
        layer = make_span("layer", attributes={A.BRICK_ELEMENTS: 100})
        b1 = make_span("b1", layer, attributes={A.BRICK_ELEMENTS: 30})
        b2 = make_span("b2", layer, attributes={A.BRICK_ELEMENTS: 50})
        plain = make_span("plain", layer)
        got = _fold([b1, b2, plain, layer], A.BRICK_ELEMENTS)
        assert got == {("svc", "layer"): 20, ("svc", "layer", "b1"): 30, ("svc", "layer", "b2"): 50}

    def test_invalid_attribute_values_are_unweighted(self, make_span):
        """Booleans, strings, negative and non-finite values are not weights."""
        spans = [
            make_span(f"s{i}", attributes={"w": value})
            for i, value in enumerate([True, "7", -1, float("nan"), float("inf")])
        ]
        stacks = StackAggregator(Weight.parse("w"))
        for span in spans:
            stacks.add(span)
        assert stacks.snapshot().rows == [] and stacks.stats.unweighted == 5


class TestArrivalOrder:
    def _tree(self, make_span):
        step = make_span("step", host=(0, 1000))
        layer = make_span("layer", step, host=(0, 900))
        brick = make_span("b", layer, gpu=(100, 700), host=(10, 20))
        k1 = make_span("k1", brick, gpu=(100, 300), host=(11, 12))
        k2 = make_span("k2", brick, gpu=(350, 650), host=(13, 14))
        return [step, layer, brick, k1, k2]

    @pytest.mark.parametrize("weight", ["gpu", "host"])
    def test_parents_first_equals_children_first(self, make_span, weight):
        """Parents before children and children before parents give the same stacks."""
        spans = self._tree(make_span)
        assert _fold(spans, weight) == _fold(spans[::-1], weight) == _oracle(spans, weight)

    def test_parent_in_a_later_batch(self, make_span):
        """Children folded while their parent is pending land under it once it arrives."""
        spans = self._tree(make_span)
        stacks = StackAggregator(Weight.parse("gpu"))
        for span in spans[2:]:
            stacks.add(span)
        assert {r.frames for r in stacks.snapshot().rows} == {
            ("svc", "b"),
            ("svc", "b", "k1"),
            ("svc", "b", "k2"),
        }
        for span in spans[:2]:
            stacks.add(span)
        assert {r.frames[:3] for r in stacks.snapshot().rows} == {("svc", "step", "layer")}
        assert stacks.stats.orphaned == 0

    def test_missing_parent_is_placed_at_root_and_counted(self, make_span):
        """A span whose parent never arrives sits under its service and is counted."""
        kernel = make_span("k", 999, gpu=(0, 10))
        stacks = StackAggregator(Weight.parse("gpu"))
        stacks.add(kernel)
        assert [r.frames for r in stacks.snapshot().rows] == [("svc", "k")]
        assert stacks.stats.orphaned == 1

    def test_remote_parent_makes_a_root(self, make_span):
        """A span with a remote parent (another process) is a root, not an orphan."""
        span = make_span("request", 999, host=(0, 10), remote_parent=True)
        stacks = StackAggregator(Weight.parse("host"))
        stacks.add(span)
        assert [r.frames for r in stacks.snapshot().rows] == [("svc", "request")]
        assert stacks.stats.orphaned == 0

    def test_late_child_beyond_window_is_an_orphan(self, make_span):
        """With no late window, a child arriving after its parent cannot be placed under it."""
        spans = self._tree(make_span)
        assert _fold(spans, late_window=0) != _oracle(spans, "gpu")
        assert _fold(spans[::-1], late_window=0) == _oracle(spans, "gpu")

    def test_spans_of_other_traces_with_equal_ids_stay_apart(self, make_span):
        """Span ids are keyed with their trace id: equal ids in two traces do not mix."""
        a = make_span("a", host=(0, 10), trace_id=1, span_id=5)
        b = make_span("b", host=(0, 20), trace_id=2, span_id=5)
        child = make_span("c", 5, host=(0, 4), trace_id=2)
        assert _fold([child, a, b], "host") == {
            ("svc", "a"): 10,
            ("svc", "b"): 16,
            ("svc", "b", "c"): 4,
        }


class TestDeviceFrames:
    def test_device_and_stream_frames_above_gpu_spans(self, make_span):
        """GPU spans get cuda/stream frames when their parent is not on their stream."""
        layer = make_span("layer", host=(0, 100))
        brick = make_span("b", layer, gpu=(0, 50), stream=0x10)
        same = make_span("k_same", brick, gpu=(0, 10), stream=0x10)
        other = make_span("k_other", brick, gpu=(20, 30), stream=0x20, device=1)
        got = _fold([same, other, brick, layer], device_frames=True)
        assert got == {
            ("svc", "layer", "cuda:0", "stream:0x10", "b"): 30,
            ("svc", "layer", "cuda:0", "stream:0x10", "b", "k_same"): 10,
            ("svc", "layer", "cuda:0", "stream:0x10", "b", "cuda:1", "stream:0x20", "k_other"): 10,
        }

    def test_late_grandchild_of_a_span_placed_while_its_parent_was_pending(self, make_span):
        """A span placed relative to a pending parent keeps its stream context once resolved."""
        brick = make_span("b", gpu=(0, 100))
        kernel = make_span("k", brick, gpu=(0, 50))
        late = make_span("late", kernel, gpu=(0, 20))
        got = _fold([brick, kernel, late], order=[kernel, brick, late], device_frames=True)
        assert got == _oracle([brick, kernel, late], "gpu", device_frames=True)
        assert ("svc", "cuda:0", "stream:0x7f00", "b", "k", "late") in got


class TestTimelines:
    def test_one_timeline_per_thread_and_per_stream(self, make_span):
        """GPU weights go to (device, stream) timelines; host weights to threads."""
        a = make_span("a", gpu=(0, 10), host=(0, 3), stream=1)
        b = make_span("b", gpu=(0, 10), host=(0, 3), stream=2)
        c = make_span("c", host=(0, 10), thread=7)
        for weight, expected in (
            ("gpu", {("gpu", "svc", 0, 1), ("gpu", "svc", 0, 2)}),
            ("host", {("thread", "svc", 4242, "t4242"), ("thread", "svc", 7, "t7")}),
        ):
            stacks = StackAggregator(Weight.parse(weight))
            for span in (a, b, c):
                stacks.add(span)
            profile = stacks.snapshot()
            assert {profile.timelines[r.timeline] for r in profile.rows} == expected

    def test_service_name_is_the_root_frame(self, make_span):
        """Each resource's service.name roots its stacks; none gives unknown_service."""
        a = make_span("a", host=(0, 1), resource=Resource({"service.name": "rank0"}))
        b = make_span("b", host=(0, 1), resource=Resource({}))
        assert set(_fold([a, b], "host")) == {("rank0", "a"), ("unknown_service", "b")}


class TestMemory:
    def test_waiting_subtree_is_folded_per_distinct_stack(self, make_span):
        """Spans waiting for a long-lived parent take one entry per distinct stack."""
        stacks = StackAggregator(Weight.parse("gpu"), late_window=16)
        main_id = 10**6
        for i in range(2000):
            brick = make_span("b", main_id, gpu=(i * 10, i * 10 + 8))
            stacks.add(make_span("k", brick, gpu=(i * 10, i * 10 + 5)))
            stacks.add(brick)
        assert len(stacks._waiting) == 1
        (waiting,) = stacks._waiting.values()
        assert len(waiting.weights) == 2  # ("b",) and ("b", "k")
        assert len(stacks._arrived) == 16
        stacks.add(make_span("main", span_id=main_id, host=(0, 1)))
        got = {r.frames: r.weight for r in stacks.snapshot().rows}
        assert got == {("svc", "main", "b"): 2000 * 3, ("svc", "main", "b", "k"): 2000 * 5}
        assert not stacks._waiting


# -- property: any tree, any order, any batching == the oracle -------------------------


@st.composite
def _forests(draw) -> dict[str, Any]:
    n = draw(st.integers(1, 14))
    specs = []
    for i in range(n):
        parent = draw(st.one_of(st.none(), st.integers(0, i - 1))) if i else None
        if draw(st.integers(0, 9)) == 0:
            parent = "missing"
        start = draw(st.integers(0, 60))
        length = draw(st.integers(0, 40))
        timed = draw(st.sampled_from(["gpu", "host", "none"]))
        specs.append(
            (
                parent,
                start,
                length,
                timed,
                draw(st.integers(1, 2)),
                draw(st.sampled_from("abc")),
                draw(st.one_of(st.none(), st.integers(0, 50))),
            )
        )
    seed = draw(st.integers(0, 2**32 - 1))
    return {"specs": specs, "seed": seed}


_MISSING = 2**60  # a parent id no span has


def _build(make_span, specs):
    spans = []
    for parent, start, length, timed, stream, name, elements in specs:
        parent_ref = (
            _MISSING if parent == "missing" else (spans[parent] if parent is not None else None)
        )
        attributes = {"elements": elements} if elements is not None else {}
        if timed == "gpu":
            span = make_span(
                name,
                parent_ref,
                gpu=(start, start + length),
                host=(start, start + length // 2),
                stream=stream,
                attributes=attributes,
            )
        elif timed == "host":
            span = make_span(name, parent_ref, host=(start, start + length), attributes=attributes)
        else:
            span = make_span(name, parent_ref, host=None, gpu=None, attributes=attributes)
            span._attributes.pop(A.CLOCK)  # neither clock: a foreign span with no times
            span._attributes[A.CLOCK] = A.CLOCK_CUDA  # ...and GPU-looking, so host refuses it
        spans.append(span)
    return spans


class TestAgainstOracle:
    # The span builder only hands out fresh ids: sharing it across examples is safe.
    @settings(
        max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        forest=_forests(),
        weight=st.sampled_from(["gpu", "host", "elements"]),
        device_frames=st.booleans(),
    )
    def test_any_order_any_batching_matches_the_definition(
        self, make_span, forest, weight, device_frames
    ):
        """Random forests fed in random order equal self weights computed from the whole tree."""
        spans = _build(make_span, forest["specs"])
        order = spans[:]
        random.Random(forest["seed"]).shuffle(order)
        got = _fold(spans, weight, order=order, device_frames=device_frames)
        assert got == _oracle(spans, weight, device_frames)
