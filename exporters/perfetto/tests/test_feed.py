# SPDX-License-Identifier: Apache-2.0
"""The reader's decoder loop in C (``_fastread.feed``) against the pure-Python reader: every
trace, whole, cut short or damaged, reads to the same spans, records, truncation point and
error in both; and reading still streams (spans come out before the file is read through)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import Event
from opentelemetry.trace import Link, SpanContext, Status, StatusCode, TraceFlags
from pftrace_testlib import T0, THREAD, TRACE_ID, gpu_attributes, make_span

from brickscope.exporter.perfetto import PerfettoSpanExporter, _annotations, _reader
from brickscope.offline import TraceFileError, open_records, open_spans

GOLDEN = sorted((Path(__file__).parents[3] / "tests" / "golden").glob("*.pftrace"))




def _typed(value: Any) -> Any:
    """value with the type of every leaf, so True and 1 (or 1 and 1.0) differ."""
    if isinstance(value, dict):
        return sorted((k, _typed(v)) for k, v in value.items())
    if isinstance(value, (tuple, list)):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


def _span_form(span: Any) -> tuple[Any, ...]:
    parent = span.parent
    return (
        span.name, span.context.trace_id, span.context.span_id,
        None if parent is None else (parent.trace_id, parent.span_id, parent.is_remote),
        span.start_time, span.end_time, span.kind, span.status.status_code, span.status.description,
        _typed(dict(span.attributes)), [(e.name, e.timestamp, _typed(dict(e.attributes))) for e in span.events],
        [(link.context.span_id, _typed(dict(link.attributes))) for link in span.links],
        _typed(dict(span.resource.attributes)), span.instrumentation_scope.name,
    )  # fmt: skip


def _read(path: Path, *, records: bool, allow_truncated: bool = False) -> tuple[list[Any], str | None, str | None]:
    """(what was read, the error raised, the truncation) of one file."""
    opener = open_records if records else open_spans
    out: list[Any] = []
    try:
        with opener(path, allow_truncated=allow_truncated) as stream:
            for item in stream:
                out.append((*item[:5], _typed(dict(item[5].attributes)), _typed(item[6])) if records else _span_form(item))
            truncation = None if stream.truncation is None else str(stream.truncation)
    except TraceFileError as exc:
        return out, str(exc), None
    return out, None, truncation


def _both(fast: Any, monkeypatch: pytest.MonkeyPatch, path: Path, **options: Any) -> tuple[Any, Any]:
    """_read with the C decoder loop, then with the Python reader alone."""
    results = []
    for module in (fast, None):
        for owner in (_annotations, _reader):
            monkeypatch.setattr(owner, "_fast", module)
        results.append(_read(path, **options))
    return results[0], results[1]


def _assert_same(fast: Any, monkeypatch: pytest.MonkeyPatch, path: Path, **options: Any) -> Any:
    accelerated, reference = _both(fast, monkeypatch, path, **options)
    assert accelerated == reference
    return reference


def _busy_trace(path: Path, spans: int = 300, batches: int = 3) -> Path:
    """GPU and host spans over several export batches, with events, links, errors, remote
    parents and attributes of every type: every kind of packet the writer makes."""
    made = []
    for i in range(spans):
        attributes: dict[str, Any] = {**THREAD, "brickscope.step.number": i // 50, "i": i, "f": i / 7, "ok": i % 3 == 0}
        attributes["tags"] = ("a", "b") if i % 5 == 0 else ()
        if i % 4 == 1:
            attributes.update(gpu_attributes(T0 + 100 * i, 20, 40, device=i % 2, stream=7 + i % 3))
        events = [Event("note", {"k": i}, timestamp=T0 + 100 * i + 1)] if i % 6 == 0 else None
        links = [Link(SpanContext(TRACE_ID, 5000 + i, False, TraceFlags(1)), {"why": "x"})] if i % 9 == 0 else None
        status = Status(StatusCode.ERROR, f"bad {i}") if i % 11 == 0 else None
        parent = None if i % 50 == 0 else 1000 + (i // 50) * 50
        made.append(make_span(1000 + i, f"op{i % 7}", T0 + 100 * i, T0 + 100 * i + 60 + i % 13, parent,
                              attributes=attributes, events=events, links=links, status=status,
                              remote_parent=i % 50 == 0 and i > 0))  # fmt: skip
    with PerfettoSpanExporter(path) as exporter:
        size = len(made) // batches
        for b in range(batches):
            exporter.export(made[b * size : (b + 1) * size if b < batches - 1 else None])
    return path


@pytest.mark.parametrize("path", GOLDEN, ids=[p.name for p in GOLDEN])
@pytest.mark.parametrize("records", [True, False], ids=["records", "spans"])
def test_golden_traces_read_the_same(fast, monkeypatch, path, records):
    out, error, truncation = _assert_same(fast, monkeypatch, path, records=records)
    assert out and error is None and truncation is None


@pytest.mark.parametrize("records", [True, False], ids=["records", "spans"])
def test_a_trace_with_every_kind_of_packet_reads_the_same(fast, monkeypatch, tmp_path, records):
    out, error, _ = _assert_same(fast, monkeypatch, _busy_trace(tmp_path / "busy.pftrace"), records=records)
    assert error is None and len(out) == 300
    if not records:  # what the C loop must not lose: events (instants, read by Python), links, status
        assert sum(1 for span in out if span[10]) == 50
        assert sum(1 for span in out if span[11]) == 34
        assert sum(1 for span in out if span[7] == StatusCode.ERROR) == 28


def test_cut_short_anywhere_reads_the_same_prefix_and_error(fast, monkeypatch, tmp_path):
    data = _busy_trace(tmp_path / "busy.pftrace", spans=60, batches=2).read_bytes()
    cut = tmp_path / "cut.pftrace"
    for end in range(1, len(data), max(1, len(data) // 97)):
        cut.write_bytes(data[:end])
        for allow in (True, False):
            _assert_same(fast, monkeypatch, cut, records=True, allow_truncated=allow)


def test_damaged_bytes_read_the_same_or_fail_the_same(fast, monkeypatch, tmp_path):
    data = bytearray(_busy_trace(tmp_path / "busy.pftrace", spans=60, batches=2).read_bytes())
    damaged = tmp_path / "damaged.pftrace"
    outcomes = set()
    for position in range(0, len(data), max(1, len(data) // 150)):
        for value in (0x00, 0xFF, data[position] ^ 0x08):
            copy = bytearray(data)
            copy[position] = value
            damaged.write_bytes(bytes(copy))
            out, error, _ = _assert_same(fast, monkeypatch, damaged, records=True)
            outcomes.add(error is None)
    assert outcomes == {True, False}  # the damage both broke files and left some readable


def test_reading_streams_with_the_c_loop(fast, monkeypatch, tmp_path):
    """The first spans come out after a few MiB, not after the whole file (bounded memory)."""
    path = _busy_trace(tmp_path / "big.pftrace", spans=40_000, batches=10)
    for owner in (_annotations, _reader):
        monkeypatch.setattr(owner, "_fast", fast)
    with open_records(path) as stream:
        next(stream)
        read_at_first = stream.bytes_read
        total = stream.total_bytes
        assert sum(1 for _ in stream) == 40_000 - 1
    assert total > 6 << 20
    assert read_at_first <= 4 << 20  # held spans (8192) need about 2 MiB here, read a MiB at a time
