# SPDX-License-Identifier: Apache-2.0
"""The Parquet span format: round trip, typed columns, refusals, impossible spans, datasets."""

from __future__ import annotations

import json
import random

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import Event  # noqa: E402
from opentelemetry.sdk.util.instrumentation import InstrumentationScope  # noqa: E402
from opentelemetry.trace import Link, SpanContext, SpanKind  # noqa: E402
from opentelemetry.trace.status import Status, StatusCode  # noqa: E402

from brickscope.offline import (  # noqa: E402
    PARQUET_COLUMNS,
    ParquetSpanWriter,
    TraceFileError,
    open_records,
    open_spans,
    parquet_files,
    parquet_schema,
)
from brickscope.testing import make_span  # noqa: E402
from brickscope.trace import attributes as A  # noqa: E402

T0 = 1_700_000_000_000_000_000
RESOURCE = Resource(
    {
        "service.name": "train",
        "service.instance.id": "abcdef12-3456",
        "host.name": "node7",
        "process.pid": 4242,
        A.RANK: 3,
        A.GPU_DEVICE_NAMES: ("NVIDIA H100", "NVIDIA A100"),
        A.KERNEL_SOURCES: json.dumps({"00000000000000ff": ["triton", "matmul", ""]}),
    }
)


def _spans() -> list:
    """A step, a host brick and a GPU kernel, plus a span of every odd kind the format must keep."""
    step = make_span(1, "step", T0, T0 + 1000, attributes={A.SCOPE_KIND: "step", A.STEP_NUMBER: 0}, resource=RESOURCE)
    brick = make_span(
        (1 << 64) - 2,  # above 2**63: stored as a negative int64, read back unsigned
        "gemm",
        T0 + 10,
        T0 + 500,
        1,
        attributes={
            A.SCOPE_KIND: "brick",
            A.BRICK_CATEGORY: "ffn",
            A.BRICK_NAME: "gemm",
            A.CLOCK: "host",
            A.BRICK_SELF_DURATION_NS: 300,
            A.STEP_NUMBER: 0,
            A.LAYER_INDEX: 2,
            A.THREAD_ID: 77,
            A.BRICK_ELEMENTS: 4096,
            "bytes": 1 << 20,
            A.WORK_FLOPS: 2.5e9,
            A.WORK_OUTPUT_SHAPE: (16, 32),
            A.WORK_DTYPE: "bfloat16",
            A.OUTPUT_CHECKSUM: "ffffffffffffff01",
            "user.note": "kept as JSON",
            A.TILE_COUNT.format("micro"): 12,
        },  # fmt: skip
        events=[Event("exception", {"exception.type": "ValueError"}, timestamp=T0 + 400)],
        resource=RESOURCE,
        status=Status(StatusCode.ERROR, "boom"),
        scope=InstrumentationScope("brickscope", "0.3.0"),
    )
    kernel = make_span(
        3,
        "matmul_kernel",
        T0 + 100,
        T0 + 300,
        (1 << 64) - 2,
        attributes={
            A.SCOPE_KIND: "kernel",
            A.CLOCK: "cuda",
            A.GPU_DEVICE_ID: 1,
            A.GPU_STREAM_ID: 0x7F00,
            A.GPU_DURATION_NS: 200,
            A.KERNEL_GRID: (4, 1, 1),
            A.KERNEL_BLOCK: (128, 1, 1),
            A.KERNEL_SHARED_MEM_BYTES: 0,
            A.KERNEL_SOURCE_HASH: "00000000000000ff",
            A.BRICK_NAME: "gemm",
        },  # fmt: skip
        links=[Link(SpanContext(9, 8, False), {"why": "batch"})],
        resource=RESOURCE,
        kind=SpanKind.CLIENT,
    )
    odd = make_span(
        4,
        "odd",
        T0 + 600,
        T0 + 700,
        1,
        attributes={
            A.SCOPE_KIND: "custom",  # not a brickscope kind: the column says "other"
            A.STEP_NUMBER: "7",  # a string step: no int64 column can hold it
            A.LAYER_INDEX: True,  # a bool is not an int here
            A.KERNEL_SOURCE_HASH: "XYZ",  # not 16 hex digits
            A.WORK_BYTES: 1 << 70,  # beyond int64
            "bytes": 5,  # beside its full key: an ordinary attribute
            A.CLOCK: "sundial",
        },  # fmt: skip
        resource=RESOURCE,
    )
    return [step, brick, kernel, odd]


def _key(span) -> tuple:
    return (
        span.name, span.context.trace_id, span.context.span_id, span.parent.span_id if span.parent else 0,
        span.start_time, span.end_time, span.kind, span.status.status_code, span.status.description,
        dict(span.resource.attributes), [(e.name, e.timestamp, dict(e.attributes)) for e in span.events],
        [(li.context.trace_id, li.context.span_id, dict(li.attributes)) for li in span.links],
        span.instrumentation_scope and (span.instrumentation_scope.name, span.instrumentation_scope.version),
    )  # fmt: skip


def _write(path, spans, **kwargs) -> None:
    with ParquetSpanWriter(path, **kwargs) as writer:
        writer.write(spans)


class TestRoundTrip:
    def test_spans_come_back_with_every_field(self, tmp_path):
        """Names, ids, parents, times, kind, status, events, links, scope and resource read back unchanged."""
        spans = _spans()
        _write(tmp_path / "a.parquet", spans, run="r1")
        with open_spans(tmp_path / "a.parquet") as back:
            read = list(back)
            assert back.format == "parquet"
        assert [_key(s) for s in read] == [_key(s) for s in spans]

    def test_attributes_come_back_under_their_keys(self, tmp_path):
        """Typed columns turn back into their attributes; a short keyword comes back under its full
        name, flops as a float, and values no column could hold as they were."""
        spans = _spans()
        _write(tmp_path / "a.parquet", spans)
        read = list(open_spans(tmp_path / "a.parquet"))
        brick = dict(spans[1].attributes)
        brick[A.WORK_BYTES] = brick.pop("bytes")
        assert dict(read[1].attributes) == brick
        assert type(read[1].attributes[A.WORK_FLOPS]) is float
        for original, back in ((spans[0], read[0]), (spans[2], read[2]), (spans[3], read[3])):
            assert dict(back.attributes) == dict(original.attributes)
        assert type(read[3].attributes[A.STEP_NUMBER]) is str and read[3].attributes[A.LAYER_INDEX] is True

    def test_typed_columns_hold_what_the_analysis_reads(self, tmp_path):
        """The columns of the contract: signed ids, the rank and process identity, the device
        model from the resource, hashes as int64, and odd values left out of typed columns."""
        _write(tmp_path / "a.parquet", _spans(), run="r1")
        rows = pq.read_table(tmp_path / "a.parquet").to_pylist()
        step, brick, kernel, odd = rows
        assert brick["span_id"] == -2 and kernel["parent_span_id"] == -2 and step["parent_span_id"] == 0
        assert (step["run"], step["rank"], step["pid"], step["host_name"]) == ("r1", "3", 4242, "node7")
        assert (kernel["device_ordinal"], kernel["device_model"], kernel["stream"]) == (1, "NVIDIA A100", 0x7F00)
        assert (kernel["kernel_grid"], kernel["kernel_source_hash"], kernel["clock"]) == ([4, 1, 1], 255, "cuda")
        assert brick["output_checksum"] == 0xFFFFFFFFFFFFFF01 - (1 << 64)
        assert (brick["bytes"], brick["flops"], brick["tile_micro_count"]) == (1 << 20, 2.5e9, 12)
        assert json.loads(brick["attributes"]) == {"user.note": "kept as JSON"}
        assert (odd["kind"], odd["step"], odd["layer"], odd["bytes"], odd["clock"]) == ("other", None, None, None, None)
        assert step["attributes"] is None and step["clock"] is None

    def test_file_metadata_has_the_version_and_kernel_sources(self, tmp_path):
        _write(tmp_path / "a.parquet", _spans())
        metadata = pq.ParquetFile(tmp_path / "a.parquet").metadata.metadata
        assert metadata[b"brickscope.schema_version"] == b"1"
        assert json.loads(metadata[b"brickscope.kernel_sources"]) == {"00000000000000ff": ["triton", "matmul", ""]}
        assert pq.read_schema(tmp_path / "a.parquet").names == [c.name for c in PARQUET_COLUMNS]

    def test_row_groups_are_bounded(self, tmp_path):
        """A writer with small row groups writes them as it goes: 10 spans, groups of 4 -> 4, 4, 2."""
        spans = [make_span(i + 1, f"s{i}", T0 + i, T0 + i + 1) for i in range(10)]
        with ParquetSpanWriter(tmp_path / "a.parquet", row_group_rows=4) as writer:
            for span in spans:
                writer.write([span])
        metadata = pq.ParquetFile(tmp_path / "a.parquet").metadata
        assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [4, 4, 2]
        assert [s.name for s in open_spans(tmp_path / "a.parquet")] == [s.name for s in spans]

    def test_records_match_spans(self, tmp_path):
        spans = _spans()
        _write(tmp_path / "a.parquet", spans)
        records = list(open_records(tmp_path / "a.parquet"))
        assert [(r[0], r[1], r[2], r[3], r[4]) for r in records] == [
            (s.name, s.start_time, s.end_time, s.context.span_id, s.parent.span_id if s.parent else 0) for s in spans
        ]

    def test_spans_without_times_are_skipped_and_counted(self, tmp_path):
        unfinished = make_span(9, "open", T0, T0 + 1)
        unfinished._end_time = None
        with ParquetSpanWriter(tmp_path / "a.parquet") as writer:
            assert writer.write([unfinished, *_spans()]) == 4
        assert writer.skipped_spans == 1 and writer.spans_written == 4


class TestProgress:
    def test_progress_follows_the_row_groups_and_ends_at_the_size_on_disk(self, tmp_path):
        """Reading reports how far the row groups read reach, once per MiB at most, and the size at the end."""
        path = tmp_path / "a.parquet"
        # 240 random hex digits (120 bytes of entropy) a row: 4 row groups of 2,500 rows pass 1 MiB
        noise = [{"x": f"{random.getrandbits(960):0240x}"} for _ in range(10_000)]
        spans = [make_span(i + 1, "s", T0 + i, T0 + i + 1, attributes=noise[i]) for i in range(10_000)]
        _write(path, spans, row_group_rows=2_500)
        calls: list[tuple[int, int]] = []
        with open_records(path, progress=lambda done, total: calls.append((done, total))) as records:
            assert sum(1 for _ in records) == 10_000
        size = path.stat().st_size
        assert size > 1 << 20 and len(calls) >= 2
        assert calls[-1] == (size, size)
        assert [done for done, _ in calls] == sorted(done for done, _ in calls)


class TestRefusals:
    def _table(self, **metadata: bytes):
        table = pa.table({c.name: pa.nulls(0, parquet_schema().field(c.name).type) for c in PARQUET_COLUMNS})
        return table.replace_schema_metadata(metadata)

    def test_another_schema_is_refused_in_one_line(self, tmp_path):
        path = tmp_path / "other.parquet"
        pq.write_table(pa.table({"x": [1, 2]}), path)
        with pytest.raises(
            TraceFileError, match=r"^.*other\.parquet: not a brickscope span file: no brickscope\.schema_version"
        ):
            list(open_spans(path))

    def test_a_newer_version_is_refused(self, tmp_path):
        path = tmp_path / "new.parquet"
        pq.write_table(self._table(**{"brickscope.schema_version": b"2"}), path)
        with pytest.raises(
            TraceFileError, match=r"new\.parquet: schema version 2 is newer than this brickscope reads \(1\)"
        ):
            list(open_spans(path))

    def test_a_missing_column_is_named(self, tmp_path):
        path = tmp_path / "cut.parquet"
        pq.write_table(self._table(**{"brickscope.schema_version": b"1"}).drop_columns(["end_ns", "step"]), path)
        with pytest.raises(TraceFileError, match=r"cut\.parquet: missing columns end_ns, step$"):
            list(open_spans(path))

    def test_a_column_of_another_type_is_named(self, tmp_path):
        path = tmp_path / "typed.parquet"
        table = self._table(**{"brickscope.schema_version": b"1"})
        index = table.schema.get_field_index("step")
        table = table.set_column(index, "step", pa.array([], pa.string()))
        pq.write_table(table, path)
        with pytest.raises(TraceFileError, match=r"typed\.parquet: column step is string, expected int64"):
            list(open_spans(path))

    def test_a_file_cut_before_its_footer_is_refused(self, tmp_path):
        path = tmp_path / "cut.parquet"
        _write(path, _spans())
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        with pytest.raises(TraceFileError, match=r"cut\.parquet: not a complete Parquet file"):
            list(open_spans(path))


class TestImpossibleSpans:
    def test_impossible_rows_are_left_out_and_counted(self, tmp_path):
        """A row whose end precedes its start, or whose GPU duration disagrees with it, is counted, not yielded."""
        good = make_span(1, "ok", T0, T0 + 10)
        backwards = make_span(2, "backwards", T0 + 10, T0)
        lying = make_span(3, "lying", T0, T0 + 10, attributes={A.GPU_DURATION_NS: 50_000})
        _write(tmp_path / "a.parquet", [good, backwards, lying])
        with open_spans(tmp_path / "a.parquet") as spans:
            assert [s.name for s in spans] == ["ok"]
        assert spans.dropped == {"end_before_start": 1, "inconsistent_duration": 1}


class TestDatasets:
    def test_files_directories_and_globs(self, tmp_path):
        for rank in (0, 1):
            (tmp_path / "run" / f"rank-{rank}").mkdir(parents=True)
            _write(tmp_path / "run" / f"rank-{rank}" / "part-00000.parquet", _spans())
        (tmp_path / "run" / "notes.txt").write_text("not a part")
        expected = [str(tmp_path / "run" / f"rank-{r}" / "part-00000.parquet") for r in (0, 1)]
        assert parquet_files(tmp_path / "run") == expected
        assert parquet_files(str(tmp_path / "run" / "rank-*" / "*.parquet")) == expected
        assert parquet_files(expected[0]) == expected[:1]
        with pytest.raises(FileNotFoundError, match="no file matches"):
            parquet_files(str(tmp_path / "nothing-*.parquet"))
