# SPDX-License-Identifier: Apache-2.0
"""The reader's fast paths give what the general ones give: annotations decoded from their
serialized bytes (with the per-sequence cache) and SpanRecords (open_records)."""

from __future__ import annotations

import pytest
from pftrace_testlib import T0, THREAD, gpu_attributes, make_span

from brickscope.exporter.perfetto import PerfettoSpanExporter
from brickscope.exporter.perfetto._annotations import _decode_messages, decode_annotations
from brickscope.exporter.perfetto._reader import iter_packets
from brickscope.exporter.perfetto._schema import pb
from brickscope.offline import TraceFileError, open_records, open_spans, span_record

ATTRIBUTES = {
    "a": 1,
    "a.b": 2.5,
    "x..y": "dots",
    "otel.status_code": "user",
    "flag": False,
    "big": (1 << 63) + 5,
    "negative": -7,
    "empty": (),
    "floats": (0.5, 1.5),
    "ints": (-1, 2),
    "bools": (True, False),
    "": "blank",
    "brickscope.brick.name": "gemm",
    "brickscope.step.number": 3,
    "unicode": "žluťoučký",
}


def _spans():
    spans = []
    for i in range(40):  # repeated annotations: the cache is hit, and missed when a value changes
        attributes = {**ATTRIBUTES, **THREAD, "brickscope.step.number": i // 8, "brickscope.brick.self_ns": i}
        if i % 5 == 0:
            attributes.update(gpu_attributes(T0 + 10 * i, 3, 4))
        spans.append(make_span(100 + i, f"op{i % 3}", T0 + 10 * i, T0 + 10 * i + 5, 7 if i else None, attributes=attributes))
    return spans


def _write(path, spans):
    with PerfettoSpanExporter(path) as exporter:
        exporter.export(spans[:20])
        exporter.export(spans[20:])


def _annotated_events(path):
    """Every track event with annotations, with a lookup over its sequence's interned tables."""
    tables: dict[int, dict[str, dict[int, str]]] = {}
    with open(path, "rb") as stream:
        for _, data in iter_packets(stream):
            packet = pb.TracePacket.FromString(data)
            sequence = tables.setdefault(packet.trusted_packet_sequence_id, {})
            if packet.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
                sequence.clear()
            interned = packet.interned_data
            for entry in interned.debug_annotation_names:
                sequence.setdefault("names", {})[entry.iid] = entry.name
            for entry in interned.debug_annotation_string_values:
                sequence.setdefault("values", {})[entry.iid] = entry.str.decode()
            if packet.track_event.debug_annotations:
                snapshot = {name: dict(table) for name, table in sequence.items()}
                yield packet.track_event.debug_annotations, lambda table, iid, s=snapshot: s[table][iid]


def test_serialized_decoding_equals_the_message_walk(tmp_path):
    path = tmp_path / "t.pftrace"
    _write(path, _spans())
    cache: dict = {}
    events = list(_annotated_events(path))
    assert len(events) >= 40
    for encoded, lookup in events:
        fast = decode_annotations(encoded, lookup, cache)
        assert fast == _decode_messages(encoded, lookup)
        assert [type(v) for v in fast[0].values()] == [type(v) for v in _decode_messages(encoded, lookup)[0].values()]
    assert cache  # the top-level dictionary entries were remembered


def test_unusual_fields_fall_back_to_the_message_walk():
    """A nested value (never written by our exporter) is decoded as the general walk does."""
    event = pb.TrackEvent()
    annotation = event.debug_annotations.add(name="n")
    annotation.nested_value.int_value = 5
    event.debug_annotations.add(name="s", string_value="x")
    got = decode_annotations(event.debug_annotations, lambda table, iid: "", {})
    assert got == _decode_messages(event.debug_annotations, lambda table, iid: "")
    assert got[0]["s"] == "x"


def test_undefined_interned_name_is_an_error_on_the_fast_path():
    event = pb.TrackEvent()
    event.debug_annotations.add(name_iid=9, int_value=1)

    def lookup(table, iid):
        raise ValueError(f"interned id {iid} of table {table!r} used before it was defined")

    with pytest.raises(ValueError, match="interned id 9 of table 'names'"):
        decode_annotations(event.debug_annotations, lookup, {})


def test_redefined_interned_name_is_not_served_from_the_cache(tmp_path):
    """The second slice redefines the name iid of a nested key without clearing the state:
    its identical bytes must not be decoded with the old name."""

    def packet(key, span_id):
        p = pb.TracePacket(trusted_packet_sequence_id=1, timestamp=T0 + span_id)
        p.interned_data.debug_annotation_names.add(iid=1, name="top")
        p.interned_data.debug_annotation_names.add(iid=2, name=key)
        p.interned_data.debug_annotation_names.add(iid=3, name="span_id")
        p.interned_data.debug_annotation_names.add(iid=4, name="otel")
        event = p.track_event
        event.type = pb.TrackEvent.TYPE_SLICE_BEGIN
        event.track_uuid = 5
        event.name = "s"
        top = event.debug_annotations.add(name_iid=1)
        top.dict_entries.add(name_iid=2, int_value=1)
        event.debug_annotations.add(name_iid=4).dict_entries.add(name_iid=3, uint_value=span_id)
        end = pb.TracePacket(trusted_packet_sequence_id=1, timestamp=T0 + span_id + 1)
        end.track_event.type = pb.TrackEvent.TYPE_SLICE_END
        end.track_event.track_uuid = 5
        return p, end

    trace = pb.Trace(packet=[*packet("first", 1), *packet("second", 2)])
    path = tmp_path / "t.pftrace"
    path.write_bytes(trace.SerializeToString())
    with open_records(path) as records:
        keys = [sorted(attributes) for *_, attributes in records]
    assert keys == [["top.first"], ["top.second"]]


def test_records_are_the_spans_records(tmp_path):
    path = tmp_path / "t.pftrace"
    _write(path, _spans())
    with open_spans(path) as spans:
        expected = [span_record(span) for span in spans]
    with open_records(path) as records:
        got = list(records)
        assert records.spans_read == 40
    assert [r[:6] for r in got] == [r[:6] for r in expected]
    assert [dict(r[6]) for r in got] == [dict(r[6]) for r in expected]
    assert got[1][4] == 7 and got[0][4] == 0  # parent span id, 0 for a root


def test_records_keep_the_truncation_rules(tmp_path):
    path = tmp_path / "t.pftrace"
    _write(path, _spans())
    data = path.read_bytes()
    cut = tmp_path / "cut.pftrace"
    cut.write_bytes(data[: len(data) - 3])
    with pytest.raises(TraceFileError, match="truncated"):
        with open_records(cut) as records:
            list(records)
    with open_spans(cut, allow_truncated=True) as spans:
        expected = [span.context.span_id for span in spans]
    with open_records(cut, allow_truncated=True) as records:
        assert [r[3] for r in records] == expected
        assert records.truncation is not None
    assert 0 < len(expected) < 40


def test_analysis_table_from_records_equals_the_table_from_spans(tmp_path):
    from brickscope.analysis import get_backend
    from brickscope.analysis._table import TableBuilder

    path = tmp_path / "t.pftrace"
    _write(path, _spans())
    from_spans, from_records = TableBuilder(get_backend("python")), TableBuilder(get_backend("python"))
    with open_spans(path) as spans:
        from_spans.add_all(spans)
    with open_records(path) as records:
        from_records.add_records(records)
    a, b = from_spans.build(), from_records.build()
    assert a.rows == b.rows == 40
    assert {name: list(a[name]) for name in a.columns} == {name: list(b[name]) for name in b.columns}
    assert (a.operations, a.ranks, a.devices, a.streams) == (b.operations, b.ranks, b.devices, b.streams)
