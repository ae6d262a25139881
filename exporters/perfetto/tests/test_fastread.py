# SPDX-License-Identifier: Apache-2.0
"""The reader's C accelerator (_fastread.c): which implementation runs, and that it decodes
every track event's annotations to exactly what the pure-Python reference decodes (values
and their types, errors, fallbacks), on our traces and on generated ones."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from pftrace_testlib import T0, THREAD, gpu_attributes, make_span

from brickscope import native
from brickscope.exporter.perfetto import PerfettoSpanExporter, _annotations, _reader
from brickscope.exporter.perfetto._annotations import _CACHE_ENTRIES, _decode_messages, decode_annotations
from brickscope.exporter.perfetto._reader import iter_packets
from brickscope.exporter.perfetto._schema import META, pb
from brickscope.offline import open_records

NAME = "brickscope.exporter.perfetto._fastread"
GOLDEN = sorted((Path(__file__).parents[3] / "tests" / "golden").glob("*.pftrace"))


def test_the_implementation_in_use_is_the_one_asked_for():
    in_use = native.implementations()[NAME].in_use
    if native.PURE_PYTHON:
        assert in_use == "python" and _annotations._fast is None
    elif native.REQUIRE_NATIVE:
        assert in_use == "c", f"BRICKSCOPE_REQUIRE_NATIVE=1 but {NAME} was not built or does not import"
    assert (_annotations._fast is not None) == (in_use == "c")


def _configure_fields():
    """The keyword fields the reader registers (``_reader.configure_accelerator``), in order."""
    fields: dict = {}

    class Capture:
        def configure(self, *args, **kwargs):
            assert not args, "the reader registers by keyword fields only"
            fields.update(kwargs)

    _reader.configure_accelerator(Capture())
    return fields


def test_configure_refuses_positional_arguments(fast):
    fields = _configure_fields()
    with pytest.raises(TypeError, match="configure takes keyword arguments only"):
        fast.configure(*fields.values())
    with pytest.raises(TypeError, match="configure takes keyword arguments only"):
        fast.configure(fields["resource"], **{k: v for k, v in fields.items() if k != "resource"})


@pytest.mark.parametrize("missing", list(_configure_fields()))
def test_configure_names_a_missing_field(fast, missing):
    fields = {k: v for k, v in _configure_fields().items() if k != missing}
    with pytest.raises(TypeError, match=f"configure: missing field '{missing}'"):
        fast.configure(**fields)


def test_configure_names_an_unknown_field(fast):
    with pytest.raises(TypeError, match="configure: unknown field 'max_packets'"):
        fast.configure(**_configure_fields(), max_packets=1)


def test_a_refused_configure_changes_nothing(fast, tmp_path, monkeypatch):
    """A refused registration leaves the one before in place: feed still reads as the reader
    does (a resource maker that raises, had it been taken, would fail the read)."""
    fields = _configure_fields()

    def broken(*args):
        raise AssertionError("a refused configure() took its resource maker")

    for bad in ({**fields, "resource": broken, "hold": -1}, {**fields, "resource": broken, "meta_name": 1},
                {**fields, "resource": broken, "extra": 0}, {k: v for k, v in fields.items() if k != "hold"}):
        with pytest.raises((TypeError, ValueError)):
            fast.configure(**bad)
    with pytest.raises(TypeError):
        fast.configure(broken, **{k: v for k, v in fields.items() if k != "resource"})
    path = tmp_path / "t.pftrace"
    with PerfettoSpanExporter(path) as exporter:
        exporter.export([make_span(100 + i, f"op{i}", T0 + i, T0 + i + 5, None, attributes=THREAD) for i in range(8)])

    accelerated, python = _read_both(monkeypatch, fast, path, lambda r: (*r[:5], r[5].attributes))
    assert python == accelerated
    assert len(accelerated) == 8




def _typed(decoded):
    """(attributes, meta) with each value's type, so True and 1 differ (== would not tell)."""

    def typed(value):
        if isinstance(value, dict):
            return {k: typed(v) for k, v in value.items()}
        if isinstance(value, tuple):
            return tuple(typed(v) for v in value)
        return (type(value).__name__, value)

    attributes, meta = decoded
    return [(k, typed(v)) for k, v in attributes.items()], typed(meta)


def _events(path):
    """(packet bytes, track event, interned tables, generation) of every annotated track event,
    in order; the generation changes whenever the reader would empty its decoded cache (state
    cleared, an id redefined), per sequence."""
    tables: dict[int, dict[str, dict[int, str]]] = {}
    generations: dict[int, int] = {}
    with open(path, "rb") as stream:
        for _, data in iter_packets(stream):
            packet = pb.TracePacket.FromString(data)
            sequence_id = packet.trusted_packet_sequence_id
            sequence = tables.setdefault(sequence_id, {})
            if packet.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
                sequence.clear()
                generations[sequence_id] = generations.get(sequence_id, 0) + 1
            for table, entries in (
                ("names", [(e.iid, e.name) for e in packet.interned_data.debug_annotation_names]),
                ("values", [(e.iid, e.str.decode()) for e in packet.interned_data.debug_annotation_string_values]),
            ):
                for iid, value in entries:
                    if sequence.setdefault(table, {}).get(iid, value) != value:
                        generations[sequence_id] = generations.get(sequence_id, 0) + 1
                    sequence[table][iid] = value
            if packet.track_event.debug_annotations:
                snapshot = {name: dict(table) for name, table in sequence.items()}
                yield data, packet.track_event, snapshot, (sequence_id, generations.get(sequence_id, 0))


def _lookup(tables):
    def lookup(table, iid):
        try:
            return tables[table][iid]
        except KeyError:
            raise ValueError(f"interned id {iid} of table {table!r} used before it was defined") from None

    return lookup


def _assert_same_decoding(fast, path):
    fast_caches: dict = {}
    python_caches: dict = {}
    count = 0
    for data, event, tables, generation in _events(path):
        lookup = _lookup(tables)
        cache = fast_caches.setdefault(generation, {})
        got = fast.annotations(data, tables.get("names"), tables.get("values"), lookup, cache, _CACHE_ENTRIES, META)
        assert got is not None, "our writer's annotations are all in the C decoder's subset"
        expected = decode_annotations(event.debug_annotations, lookup, python_caches.setdefault(generation, {}))
        assert _typed(got) == _typed(expected)
        assert _typed(got) == _typed(_decode_messages(event.debug_annotations, lookup))
        count += 1
    return count


def _fields(packet):
    """What scan() answers, read from the protobuf message instead."""
    event = packet.track_event

    def optional(message, field):
        return getattr(message, field) if message.HasField(field) else None

    return (
        packet.trusted_packet_sequence_id,
        packet.sequence_flags,
        packet.timestamp,
        optional(packet, "timestamp_clock_id"),
        event.type,
        event.track_uuid,
        optional(event, "name_iid"),
        optional(event, "name"),
        tuple(event.flow_ids),
        tuple(event.terminating_flow_ids),
        optional(event, "correlation_id_str_iid"),
        optional(event, "correlation_id_str"),
    )


_PLAIN = {"timestamp", "trusted_packet_sequence_id", "sequence_flags", "timestamp_clock_id", "track_event"}


def _assert_scan_matches(fast, path):
    """Every packet scan() reads gives the message's fields; the ones it leaves are not plain
    track events. Returns how many it read."""
    read = 0
    with open(path, "rb") as stream:
        for _, data in iter_packets(stream):
            packet = pb.TracePacket.FromString(data)
            scanned = fast.scan(data)
            if scanned is None:
                plain = packet.HasField("track_event") and {f.name for f, _ in packet.ListFields()} <= _PLAIN
                assert not plain, "scan() left one of our plain track-event packets to protobuf"
            else:
                assert scanned == _fields(packet)
                read += 1
    return read


@pytest.mark.parametrize("path", GOLDEN, ids=[p.name for p in GOLDEN])
def test_golden_traces_decode_identically(fast, path):
    assert _assert_same_decoding(fast, path) > 0
    assert _assert_scan_matches(fast, path) > 0


_KEYS = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["a", "a.b", "a.b.c", "a..b", ".", "otel.x", "brickscope.brick.name", "名前", "\U0001f525"]),
)
_VALUES = st.one_of(
    st.integers(-(1 << 63), (1 << 64) - 1),
    st.floats(allow_nan=False),
    st.booleans(),
    st.text(max_size=12),
    st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=3).map(tuple),
    st.lists(st.text(max_size=4), max_size=3).map(tuple),
    st.lists(st.booleans(), max_size=3).map(tuple),
    st.lists(st.floats(allow_nan=False), max_size=3).map(tuple),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(attribute_sets=st.lists(st.dictionaries(_KEYS, _VALUES, max_size=8), min_size=1, max_size=6))
def test_generated_attributes_decode_identically(fast, tmp_path_factory, attribute_sets):
    path = tmp_path_factory.mktemp("fastread") / "t.pftrace"
    spans = [
        make_span(100 + i, f"op{i}", T0 + 10 * i, T0 + 10 * i + 5, None, attributes={**THREAD, **attributes})
        for i, attributes in enumerate(attribute_sets)
    ]
    with PerfettoSpanExporter(path) as exporter:
        exporter.export(spans)
    assert _assert_same_decoding(fast, path) >= len(spans)
    assert _assert_scan_matches(fast, path) >= len(spans)


def _packet(*annotations):
    packet = pb.TracePacket(trusted_packet_sequence_id=1, timestamp=T0)
    packet.track_event.type = pb.TrackEvent.TYPE_SLICE_BEGIN
    for annotation in annotations:
        packet.track_event.debug_annotations.add().CopyFrom(annotation)
    return packet


def test_what_it_does_not_read_goes_back_to_the_python_code(fast):
    """A nested value, or a string that is not UTF-8: None, and the reader's decoding (which
    then takes the message walk) is the pure-Python one."""
    nested = pb.DebugAnnotation(name="n")
    nested.nested_value.int_value = 5
    latin = pb.DebugAnnotation(name="s")
    latin.MergeFromString(b"\x32\x01\xff")  # string_value = b"\xff"
    for annotation in (nested, latin):
        packet = _packet(pb.DebugAnnotation(name="ok", int_value=1), annotation)
        lookup = _lookup({})
        assert fast.annotations(packet.SerializeToString(), None, None, lookup, {}, _CACHE_ENTRIES, META) is None
        got = _annotations.decode_event_annotations(packet.track_event, packet.SerializeToString(), {}, lookup, {})
        assert got == _decode_messages(packet.track_event.debug_annotations, lookup)


def test_name_and_name_iid_are_a_oneof_the_last_one_wins(fast):
    """Raw bytes can hold both (a damaged file did): protobuf keeps the last, so does the C."""
    names = {"names": {5: "interned"}}
    name_then_iid = b"\x52\x06inline" + b"\x08\x05" + b"\x20\x01"  # name, name_iid, int_value
    iid_then_name = b"\x08\x05" + b"\x52\x06inline" + b"\x20\x01"
    for raw, key in ((name_then_iid, "interned"), (iid_then_name, "inline")):
        annotation = pb.DebugAnnotation.FromString(raw)
        event = b"\x22" + bytes([len(raw)]) + raw  # TrackEvent.debug_annotations, in this byte order
        data = b"\x5a" + bytes([len(event)]) + event  # TracePacket.track_event
        got = fast.annotations(data, names["names"], None, _lookup(names), {}, _CACHE_ENTRIES, META)
        assert got == ({key: 1}, {}) == _decode_messages([annotation], _lookup(names))
        assert _annotations._parse(raw, 0, len(raw))[:2] == ((5, None) if key == "interned" else (None, "inline"))


def test_an_undefined_interned_id_raises_the_reference_error(fast):
    packet = _packet(pb.DebugAnnotation(name_iid=9, int_value=1))
    with pytest.raises(ValueError, match="interned id 9 of table 'names' used before it was defined"):
        fast.annotations(packet.SerializeToString(), {}, None, _lookup({"names": {}}), {}, _CACHE_ENTRIES, META)
    value = _packet(pb.DebugAnnotation(name="k", string_value_iid=4))
    with pytest.raises(ValueError, match="interned id 4 of table 'values'"):
        fast.annotations(value.SerializeToString(), None, {1: "x"}, _lookup({}), {}, _CACHE_ENTRIES, META)


def test_the_cache_is_bounded_and_shared_with_the_python_code(fast):
    """Entries the C remembers are the ones the Python code would (same keys, same items),
    and the cache starts over at its limit."""
    top = pb.DebugAnnotation(name="top")
    top.dict_entries.add(name="k", int_value=3)
    packet = _packet(top).SerializeToString()
    cache: dict = {}
    assert fast.annotations(packet, None, None, _lookup({}), cache, 1, META) == ({"top.k": 3}, {})
    python_cache: dict = {}
    decode_annotations(_packet(top).track_event.debug_annotations, _lookup({}), python_cache)
    assert cache == python_cache == {("top.", top.dict_entries[0].SerializeToString()): [("top.k", 3)]}
    other = pb.DebugAnnotation(name="top")
    other.dict_entries.add(name="j", int_value=4)
    fast.annotations(_packet(other).SerializeToString(), None, None, _lookup({}), cache, 1, META)
    assert list(cache.values()) == [[("top.j", 4)]]


def test_records_equal_with_and_without_the_accelerator(fast, tmp_path, monkeypatch):
    """End to end: open_records of a trace with GPU spans, nesting and many repeated values."""
    spans = []
    for i in range(64):
        attributes = {**THREAD, "brickscope.step.number": i // 8, "flag": i % 2 == 0, "ratio": i / 3, "n": -i}
        if i % 4 == 0:
            attributes.update(gpu_attributes(T0 + 10 * i, 3, 4, device=i % 2))
        spans.append(make_span(100 + i, f"op{i % 5}", T0 + 10 * i, T0 + 10 * i + 5, 100 if i else None, attributes=attributes))
    path = tmp_path / "t.pftrace"
    with PerfettoSpanExporter(path) as exporter:
        exporter.export(spans[:30])
        exporter.export(spans[30:])

    accelerated, python = _read_both(monkeypatch, fast, path, lambda r: (*r[:5], r[5].attributes, _typed((r[6], {}))))
    assert python == accelerated
    assert len(accelerated) == 64


def _track_event_packet(**event):
    return pb.TracePacket(trusted_packet_sequence_id=3, timestamp=T0, track_event=pb.TrackEvent(**event))


@pytest.mark.parametrize(
    "packet",
    [
        pytest.param(_track_event_packet(type=1, name="s").SerializeToString() + pb.TracePacket(
            interned_data=pb.InternedData(event_names=[pb.EventName(iid=1, name="n")])).SerializeToString(),
            id="interned data"),
        pytest.param(pb.TracePacket(timestamp=T0, incremental_state_cleared=True, track_event=pb.TrackEvent(type=1)).SerializeToString(),
                     id="legacy incremental_state_cleared"),
        pytest.param(b"\x5a\x02\x48\x07", id="unknown type value"),
        pytest.param(b"\x5a\x02\x48\x00", id="type unspecified"),
        pytest.param(b"\x5a\x0b\xfa\x02\x08" + (5).to_bytes(8, "little"), id="packed flow ids"),
        pytest.param(b"\x5a\x04\xba\x01\x01\xff", id="name not UTF-8"),
        pytest.param(_track_event_packet(type=1).SerializeToString() * 2, id="two track events merge"),
        pytest.param(b"\x5a\x05\x48\x01", id="cut short"),
        pytest.param(b"", id="empty"),
    ],
)
def test_scan_leaves_what_it_does_not_read_to_protobuf(fast, packet):
    assert fast.scan(packet) is None


def test_scan_reads_oneofs_and_repeated_fields_as_protobuf_does(fast):
    packet = _track_event_packet(type=2, track_uuid=(1 << 64) - 1, name="first", flow_ids=[1, (1 << 64) - 1],
                                 terminating_flow_ids=[7], correlation_id_str="abc")
    data = packet.SerializeToString() + pb.TracePacket(
        track_event=pb.TrackEvent(name_iid=9, correlation_id_str_iid=4)).SerializeToString()
    merged = pb.TracePacket.FromString(data)  # two track_event fields: protobuf merges them
    assert fast.scan(data) is None
    assert merged.track_event.name_iid == 9  # (the general path reads the merge)
    one = pb.TracePacket.FromString(packet.SerializeToString())
    assert fast.scan(packet.SerializeToString()) == _fields(one) == (
        3, 0, T0, None, 2, (1 << 64) - 1, None, "first", (1, (1 << 64) - 1), (7,), None, "abc")
    later_iid = pb.TrackEvent(name="x").SerializeToString() + pb.TrackEvent(name_iid=5, type=3).SerializeToString()
    raw = b"\x5a" + bytes([len(later_iid)]) + later_iid
    assert fast.scan(raw) == _fields(pb.TracePacket.FromString(raw))
    assert fast.scan(raw)[6:8] == (5, None)


def _read_both(monkeypatch, fast, path, project):
    """``path``'s records (each through ``project``) read with the accelerator, then without."""

    def records():
        with open_records(path) as stream:
            return [project(r) for r in stream]

    for module in (_annotations, _reader):
        monkeypatch.setattr(module, "_fast", fast)
    accelerated = records()
    for module in (_annotations, _reader):
        monkeypatch.setattr(module, "_fast", None)
    return accelerated, records()
