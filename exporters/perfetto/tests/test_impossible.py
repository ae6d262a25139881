# SPDX-License-Identifier: Apache-2.0
"""Impossible spans in a .pftrace: left out, counted by reason, the same with the C accelerator
and without it; a file of nothing else is refused."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from pftrace_testlib import T0, THREAD, gpu_attributes, make_span

from brickscope.exporter.perfetto import PerfettoSpanExporter, _annotations, _reader
from brickscope.offline import TraceFileError, open_records, open_spans
from brickscope.trace import attributes as A

BRICK = {**THREAD, A.SCOPE_KIND: "brick", A.BRICK_NAME: "op", A.BRICK_CATEGORY: "other"}


def _spans():
    """Eleven spans named alike (the name is interned once, so the C loop reads the others),
    each 100 ns long: ids 1-5 possible, 7-12 impossible. (The writer clamps an end before its
    start to the start, so such a span never reaches a .pftrace it writes.)"""
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


_DURATION = st.one_of(st.none(), st.integers(-200, 3_000), st.floats(-10.0, 3_000.0, allow_nan=False))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shapes=st.lists(
        st.tuples(st.integers(0, 1_500), _DURATION, _DURATION, _DURATION, _DURATION, st.booleans()), min_size=1, max_size=12
    )
)
def test_generated_spans_count_the_same_both_ways(fast, short_hold, tmp_path_factory, monkeypatch, shapes):
    """Spans of any length with duration attributes of any sign and type: the C and the Python
    reading keep and drop the same spans, and exactly those the rule judges impossible."""
    spans, expected = [], {}
    for i, (length, self_ns, gpu_ns, host_ns, tile_ns, gpu) in enumerate(shapes):
        start = T0 + 10_000 * i
        values = {A.BRICK_SELF_DURATION_NS: self_ns, A.HOST_DURATION_NS: host_ns, A.TILE_DURATION_NS.format("macro"): tile_ns}
        attributes = {**(gpu_attributes(start - 5, 3, 0) if gpu else BRICK), **{k: v for k, v in values.items() if v is not None}}
        attributes.pop(A.GPU_DURATION_NS, None)
        if gpu and gpu_ns is not None:
            attributes[A.GPU_DURATION_NS] = gpu_ns
        spans.append(make_span(i + 1, "s", start, start + length, attributes=attributes))
    from brickscope.offline import impossible

    reasons = [impossible(s.start_time, s.end_time, s.attributes) for s in spans]
    for reason in filter(None, reasons):
        expected[reason] = expected.get(reason, 0) + 1
    kept = [s.context.span_id for s, reason in zip(spans, reasons) if reason is None]
    path = _write(tmp_path_factory.mktemp("gen") / "t.pftrace", spans)
    if not kept:
        for module in (_annotations, _reader):
            monkeypatch.setattr(module, "_fast", fast)
        with pytest.raises(TraceFileError, match="every span is impossible"), open_records(path) as stream:
            list(stream)
        return
    accelerated, python = _read_both(monkeypatch, fast, path)
    assert accelerated == python == (kept, expected)
