# SPDX-License-Identifier: Apache-2.0
"""Property tests: random span forests export and decode back to the same slices."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, example, given, settings, strategies as st
from pftrace_testlib import T0, decode_trace, expected_slices, gpu_attributes, make_span

from brickscope.exporter.perfetto import PerfettoSpanExporter, read_spans
from brickscope.exporter.perfetto._writer import TraceWriter
from brickscope.trace import attributes as A

_names = st.one_of(
    st.text(min_size=0, max_size=12),
    st.sampled_from(["rms_norm", "a.b", "", "otel", "\u202e\u0000evil", "x" * 300, "名前", "\U0001f525"]),
)
_scalar = st.one_of(
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.floats(allow_nan=False),
    st.booleans(),
    st.text(max_size=20),
    st.just("y" * 100_000),
)
_array = st.one_of(
    st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=4),
    st.lists(st.text(max_size=5), max_size=4),
    st.lists(st.booleans(), max_size=4),
    st.lists(st.floats(allow_nan=False), max_size=4),
).map(tuple)
_attributes = st.dictionaries(
    st.one_of(st.text(max_size=10), st.sampled_from(["a", "a.b", "a.b.c", "otel.x", "..", "brickscope.brick.name"])),
    st.one_of(_scalar, _array),
    max_size=5,
)


@st.composite
def _forest(draw):
    """Spans whose intervals nest (deeply at times), with some overlapping strays, GPU spans and zero lengths."""
    spans = []
    next_id = [1]

    def grow(start, end, parent, depth):
        # Times are T0 + 10 * tick on a coarse grid: shared start and end
        # timestamps (the hard cases for nesting across batches) are common.
        span_id = next_id[0]
        next_id[0] += 1
        attributes = draw(_attributes)
        if draw(st.booleans()):
            attributes[A.THREAD_ID] = draw(st.sampled_from([1, 2, 140_000_000_000_001]))
            attributes[A.THREAD_NAME] = draw(_names)
        if draw(st.integers(0, 4)) == 0:
            host = T0 + 10 * draw(st.integers(-2, 8))
            attributes.update(
                gpu_attributes(
                    host,
                    10 * draw(st.integers(0, 3)),
                    10 * (end - start),
                    device=draw(st.integers(0, 1)),
                    stream=draw(st.sampled_from([0, 0x7F00])),
                )
            )
        spans.append(make_span(span_id, draw(_names), T0 + 10 * start, T0 + 10 * end, parent, attributes=attributes))
        if depth < 40 and end > start and draw(st.integers(0, 2)):
            cursor = start
            for _ in range(draw(st.integers(1, 3))):
                child_start = draw(st.integers(cursor, end))
                child_end = draw(st.integers(child_start, end))
                grow(child_start, child_end, span_id, depth + 1)
                cursor = child_end

    for _ in range(draw(st.integers(1, 3))):
        start = draw(st.integers(0, 4))
        grow(start, start + draw(st.integers(0, 6)), None, 0)
    for _ in range(draw(st.integers(0, 4))):  # strays that overlap anything
        start = draw(st.integers(0, 6))
        grow(start, start + draw(st.integers(0, 4)), None, 40)
    return spans


@st.composite
def _batches(draw):
    """The forest cut into batches, in an arbitrary order."""
    spans = draw(st.permutations(draw(_forest())))
    cuts = sorted(draw(st.lists(st.integers(0, len(spans)), max_size=4)))
    edges = [0, *cuts, len(spans)]
    return spans, [spans[a:b] for a, b in zip(edges, edges[1:]) if b > a]


def _gpu_span(span_id, start, end, host_start, parent=None):
    """A GPU-timed span on device 0, stream 0, launched at ``host_start`` for 0 ns (times in ticks of 10 ns)."""
    attributes = gpu_attributes(T0 + 10 * host_start, 0, 10 * (end - start), device=0, stream=0)
    return make_span(span_id, "", T0 + 10 * start, T0 + 10 * end, parent, attributes=attributes)


def _one_batch(*spans):
    return list(spans), [list(spans)]


#: Found by hypothesis: GPU slices with the same end on one stream, the flow ending on
#: their END events. The writer wrote those ENDs outermost first, so each closed the other
#: slice and took its flow (and the reader then took the wrong launch interval).
_SAME_END_REGRESSIONS = (
    _one_batch(_gpu_span(1, 0, 1, host_start=4), _gpu_span(2, 0, 1, host_start=0)),
    _one_batch(_gpu_span(1, 0, 6, host_start=0), _gpu_span(2, 0, 6, host_start=0, parent=1)),
    _one_batch(_gpu_span(1, 3, 6, host_start=5), _gpu_span(2, 5, 6, host_start=0, parent=1)),
)


def _same(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b and type(a) is type(b)


class TestRoundTrip:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(_batches())
    @example(_SAME_END_REGRESSIONS[0])
    @example(_SAME_END_REGRESSIONS[1])
    @example(_SAME_END_REGRESSIONS[2])
    def test_decoded_slices_equal_the_spans(self, tmp_path_factory, drawn):
        """Every span (and GPU launch) decodes to one slice at its exact time, with no rule broken."""
        spans, batches = drawn
        path = tmp_path_factory.mktemp("p") / "t.pftrace"
        with PerfettoSpanExporter(path) as exporter:
            for batch in batches:
                assert exporter.export(batch).name == "SUCCESS"
        decoded = decode_trace(path)
        assert decoded.errors == []
        assert sorted((s.name, s.ts, s.dur) for s in decoded.slices) == expected_slices(spans)
        # Each GPU-timed span: a slice under a GPU group at its GPU times, with a flow
        # from a slice on a host track at its launch interval.
        launches = {f: s for s in decoded.slices if decoded.track_kind(s.track) != "gpu" for f in s.flow_ids}
        for span in spans:
            if span.attributes.get(A.CLOCK) != A.CLOCK_CUDA:
                continue
            (gpu,) = [
                s for s in decoded.slices if s.args.get("otel", {}).get("span_id") == span.context.span_id
            ]
            assert decoded.track_kind(gpu.track) == "gpu" and (gpu.ts, gpu.dur) == (span.start_time, span.end_time - span.start_time)
            if span.end_time <= span.attributes[A.HOST_START_NS]:  # ended before its launch: no arrow
                assert gpu.terminating_flow_ids == []
                continue
            (flow,) = gpu.terminating_flow_ids
            launch = launches[flow]
            assert (launch.ts, launch.dur) == (span.attributes[A.HOST_START_NS], span.attributes[A.HOST_DURATION_NS])
        by_id = {s.context.span_id: s for s in spans}
        back = read_spans(path)
        assert sorted(s.context.span_id for s in back) == sorted(by_id)
        for span in back:
            original = by_id[span.context.span_id]
            assert (span.name, span.start_time, span.end_time) == (original.name, original.start_time, original.end_time)
            assert set(span.attributes) == set(original.attributes)
            for key, value in original.attributes.items():
                got = span.attributes[key]
                if isinstance(value, tuple):
                    assert len(got) == len(value) and all(map(_same, got, value)), key
                else:
                    assert _same(got, value), key

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(_batches(), st.integers(1, 30), st.integers(5, 60))
    def test_tiny_budgets_still_decode_exactly(self, drawn, max_tracked, max_interned):
        """With tiny memory budgets (forgetting, interning resets) slices still decode exactly."""
        spans, batches = drawn
        writer = TraceWriter(max_tracked_slices=max_tracked, max_interned=max_interned)
        data = writer.header() + b"".join(writer.encode(batch) for batch in batches)
        decoded = decode_trace(None, data=data)
        assert decoded.errors == []
        assert sorted((s.name, s.ts, s.dur) for s in decoded.slices) == expected_slices(spans)
