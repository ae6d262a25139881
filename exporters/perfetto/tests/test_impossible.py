# SPDX-License-Identifier: Apache-2.0
"""Impossible spans in a .pftrace: left out, counted by reason, the same with the C accelerator
and without it; a file of nothing else is refused."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from pftrace_testlib import T0, THREAD, gpu_attributes, make_span

from brickscope.exporter.perfetto import PerfettoSpanExporter, _annotations, _reader
from brickscope.offline import TraceFileError, impossible, open_records, open_spans
from brickscope.trace import attributes as A

END_BEFORE_START = "end_before_start"  # the rule's reason a slice cannot say
BRICK = {**THREAD, A.SCOPE_KIND: "brick", A.BRICK_NAME: "op", A.BRICK_CATEGORY: "other"}


def _spans():
    """Eleven spans named alike (the name is interned once, so the C loop reads the others),
    each 100 ns long: ids 1-5 possible, 7-12 impossible. (The writer leaves out and counts a
    span that ends before it starts, so such a span never reaches a .pftrace it writes.)"""
    return [
        make_span(1, "op", T0, T0 + 100, attributes={**BRICK, A.BRICK_SELF_DURATION_NS: 100}),
        make_span(2, "op", T0 + 200, T0 + 300, attributes=gpu_attributes(T0 + 150, 10, 100)),
        # within the tolerance of 1000 ns: a producer that rounded
        make_span(3, "op", T0 + 400, T0 + 500, attributes=gpu_attributes(T0 + 350, 10, 1_100)),
        make_span(4, "op", T0 + 600, T0 + 700, attributes=THREAD),
        make_span(5, "op", T0 + 800, T0 + 900, attributes={**BRICK, A.BRICK_SELF_DURATION_NS: 50.5}),
        make_span(7, "op", T0 + 1_200, T0 + 1_300, attributes={**BRICK, A.BRICK_SELF_DURATION_NS: 101}),
        make_span(8, "op", T0 + 1_400, T0 + 1_500, attributes={**BRICK, A.BRICK_SELF_DURATION_NS: -1}),
        make_span(9, "op", T0 + 1_600, T0 + 1_700, attributes=gpu_attributes(T0 + 1_550, 10, 1_101)),
        make_span(10, "op", T0 + 1_800, T0 + 1_900, attributes={**THREAD, A.HOST_DURATION_NS: -5}),
        make_span(11, "op", T0 + 2_000, T0 + 2_100, attributes={**THREAD, A.TILE_DURATION_NS.format("micro"): -1}),
        make_span(12, "op", T0 + 2_200, T0 + 2_300, attributes=gpu_attributes(T0 + 2_150, 10, -0.5)),
    ]  # fmt: skip


EXPECTED_DROPPED = {"inconsistent_duration": 2, "negative_duration": 4}
EXPECTED_KEPT = [1, 2, 3, 4, 5]  # span ids


@pytest.fixture(name="short_hold")
def _short_hold(fast):
    """A span leaves the reader's hold two spans later (not 8192), so the C loop judges it,
    not only the final drain in Python that a small file otherwise gets."""
    held = _reader._HOLD_SPANS
    _reader._HOLD_SPANS = 2
    _reader.configure_accelerator(fast)
    yield
    _reader._HOLD_SPANS = held
    _reader.configure_accelerator(fast)


def _read_both(monkeypatch, fast, path):
    """(span ids kept, dropped counts) with the accelerator, then without."""

    def read():
        with open_records(path) as stream:
            ids = [record[3] for record in stream]
        return ids, dict(stream.dropped)

    for module in (_annotations, _reader):
        monkeypatch.setattr(module, "_fast", fast)
    accelerated = read()
    for module in (_annotations, _reader):
        monkeypatch.setattr(module, "_fast", None)
    return accelerated, read()


def _write(path, spans, batches=1):
    with PerfettoSpanExporter(path) as exporter:
        size = -(-len(spans) // batches)
        for i in range(0, len(spans), size):
            exporter.export(spans[i : i + size])
    return path


def test_impossible_spans_are_counted_by_reason_with_and_without_the_accelerator(fast, short_hold, tmp_path, monkeypatch):
    """Each impossible span is left out under its reason; both implementations agree."""
    path = _write(tmp_path / "t.pftrace", _spans(), batches=2)
    accelerated, python = _read_both(monkeypatch, fast, path)
    assert accelerated == python == (EXPECTED_KEPT, EXPECTED_DROPPED)


def test_spans_and_records_drop_the_same(tmp_path):
    """open_spans drops what open_records drops (the reader's two outputs share the rule)."""
    path = _write(tmp_path / "t.pftrace", _spans())
    with open_spans(path) as spans:
        ids = [span.context.span_id for span in spans]
    assert ids == EXPECTED_KEPT and spans.dropped == EXPECTED_DROPPED
    assert spans.dropped_line() == (
        f"{path}: 6 impossible spans left out (4 with negative duration attribute,"
        " 2 with duration attribute disagreeing with end - start)"
    )


def test_a_file_of_impossible_spans_is_refused(tmp_path):
    """Nothing true to read: the end of the stream raises one error naming the file and the counts."""
    path = _write(tmp_path / "t.pftrace", _spans()[5:])
    with pytest.raises(TraceFileError) as error, open_records(path) as stream:
        list(stream)
    assert str(error.value) == (
        f"{path}: every span is impossible (4 with negative duration attribute,"
        " 2 with duration attribute disagreeing with end - start): refused"
    )



def test_the_list_reader_warns_of_what_it_left_out(tmp_path, caplog):
    """read_spans (the older list API) leaves the same spans out and logs the line."""
    from brickscope.exporter.perfetto import read_spans

    path = _write(tmp_path / "t.pftrace", _spans())
    assert [span.context.span_id for span in read_spans(path)] == EXPECTED_KEPT
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"{path}: 6 impossible spans left out (4 with negative duration attribute,"
        " 2 with duration attribute disagreeing with end - start)"
    ]


def test_a_gpu_span_shorter_than_the_tolerance_with_a_negative_gpu_duration_is_dropped(
    fast, short_hold, tmp_path, monkeypatch
):
    """A GPU duration of -1 ns on a span of 0 or 500 ns is within the 1000 ns tolerance of
    end - start but below zero: negative, left out by both readings (the C loop must not take
    it for surely possible)."""
    spans = [make_span(1, "k", T0, T0, attributes=gpu_attributes(T0 - 5, 3, -1))]
    spans.append(make_span(2, "k", T0 + 1_000, T0 + 1_500, attributes=gpu_attributes(T0 + 995, 3, -1)))
    spans += [make_span(i, "op", T0 + 1_000 * i, T0 + 1_000 * i + 100, attributes=THREAD) for i in range(3, 7)]
    path = _write(tmp_path / "t.pftrace", spans)
    accelerated, python = _read_both(monkeypatch, fast, path)
    assert accelerated == python == ([3, 4, 5, 6], {"negative_duration": 2})


def test_negative_work_amounts_are_dropped_by_both_readings(fast, short_hold, tmp_path, monkeypatch):
    """Negative bytes (full and short name), elements and tokens as integers (the C loop's own
    check) and negative flops as a float (left to the Python rule): left out by both readings;
    zero bytes is an amount like any other."""
    amounts = [
        {A.WORK_BYTES: 0},
        {A.WORK_BYTES: -4_000},
        {"bytes": -1},
        {A.BRICK_ELEMENTS: -7},
        {A.STEP_TOKENS: -3},
        {A.TILE_ELEMENTS.format("macro"): -2},
        {A.WORK_FLOPS: -2.5},
    ]
    spans = [
        make_span(i + 1, "op", T0 + 1_000 * i, T0 + 1_000 * i + 100, attributes={**BRICK, **amount})
        for i, amount in enumerate(amounts)
    ]
    spans += [make_span(i, "op", T0 + 1_000 * i, T0 + 1_000 * i + 100, attributes=THREAD) for i in range(8, 11)]
    path = _write(tmp_path / "t.pftrace", spans)
    accelerated, python = _read_both(monkeypatch, fast, path)
    assert accelerated == python == ([1, 8, 9, 10], {"negative_amount": 6})


def test_a_span_ending_before_it_starts_is_left_out_by_the_writer_and_counted(tmp_path, caplog):
    """A slice cannot end before it begins: the writer leaves such a span out and counts it
    (not a zero-length slice that would read back as a plausible span); the rest are written."""
    path = tmp_path / "t.pftrace"
    backwards = make_span(2, "op", T0 + 500, T0 + 400, attributes=THREAD)
    with PerfettoSpanExporter(path) as exporter:
        exporter.export([make_span(1, "op", T0, T0 + 100, attributes=THREAD), backwards])
        exporter.export([make_span(3, "op", T0 + 600, T0 + 590, attributes=THREAD)])
        assert exporter.skipped_spans == 2
    with open_spans(path) as spans:
        assert [(s.context.span_id, s.start_time, s.end_time) for s in spans] == [(1, T0, T0 + 100)]
    assert spans.dropped == {}
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"{path}: skipping spans without a start or end time, ending before they start, or with a time"
        " outside 0..2**64-1 ns (counted in skipped_spans, not logged again)"
    ]


_DURATION = st.one_of(st.none(), st.integers(-200, 3_000), st.floats(-10.0, 3_000.0, allow_nan=False))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shapes=st.lists(
        st.tuples(st.integers(-50, 1_500), _DURATION, _DURATION, _DURATION, _DURATION, st.booleans()), min_size=1, max_size=12
    )
)
def test_generated_spans_count_the_same_both_ways(fast, short_hold, tmp_path_factory, monkeypatch, shapes):
    """Spans of any length (some ending before they start) with duration attributes of any
    sign and type: the C and the Python reading keep exactly the spans the rule judges
    possible, and every impossible one is counted once: by the writer when a slice cannot
    say it (an end before the start), else by the readers under the rule's reason."""
    spans, expected = [], {}
    for i, (length, self_ns, gpu_ns, host_ns, tile_ns, gpu) in enumerate(shapes):
        start = T0 + 10_000 * i
        values = {A.BRICK_SELF_DURATION_NS: self_ns, A.HOST_DURATION_NS: host_ns, A.TILE_DURATION_NS.format("macro"): tile_ns}
        attributes = {**(gpu_attributes(start - 5, 3, 0) if gpu else BRICK), **{k: v for k, v in values.items() if v is not None}}
        attributes.pop(A.GPU_DURATION_NS, None)
        if gpu and gpu_ns is not None:
            attributes[A.GPU_DURATION_NS] = gpu_ns
        spans.append(make_span(i + 1, "s", start, start + length, attributes=attributes))
    reasons = [impossible(s.start_time, s.end_time, s.attributes) for s in spans]
    for reason in filter(None, reasons):
        if reason != END_BEFORE_START:
            expected[reason] = expected.get(reason, 0) + 1
    kept = [s.context.span_id for s, reason in zip(spans, reasons) if reason is None]
    path = tmp_path_factory.mktemp("gen") / "t.pftrace"
    with PerfettoSpanExporter(path) as exporter:
        exporter.export(spans)
    assert exporter.skipped_spans == reasons.count(END_BEFORE_START)
    if len(spans) == reasons.count(END_BEFORE_START):
        return  # a trace of no spans: nothing for the readers to judge
    if not kept:
        for module in (_annotations, _reader):
            monkeypatch.setattr(module, "_fast", fast)
        with pytest.raises(TraceFileError, match="every span is impossible"), open_records(path) as stream:
            list(stream)
        return
    accelerated, python = _read_both(monkeypatch, fast, path)
    assert accelerated == python == (kept, expected)
