# SPDX-License-Identifier: Apache-2.0
"""merge refuses the same input twice, and keeps processes apart when their pids collide."""

from __future__ import annotations

import json
import os

import pytest
from opentelemetry.sdk.resources import Resource
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from pftrace_testlib import T0, THREAD, make_span

from brickscope.cli import main
from brickscope.exporter.perfetto import PerfettoSpanExporter, merge_traces
from brickscope.offline import TraceFileError, UsageError
from brickscope.trace import attributes as A

BRICK = {**THREAD, A.SCOPE_KIND: "brick", A.BRICK_NAME: "gemm", A.BRICK_CATEGORY: "matmul"}


def _spans(resource, first_id=1, count=3, offset=0):
    """``count`` gemm bricks of 500 ns, one every µs from T0 + offset."""
    return [
        make_span(
            first_id + i,
            "gemm",
            T0 + offset + 1_000 * i,
            T0 + offset + 1_000 * i + 500,
            attributes={**BRICK, A.BRICK_SELF_DURATION_NS: 500},
            resource=resource,
        )
        for i in range(count)
    ]


def _write(path, spans, batch=None):
    with PerfettoSpanExporter(path) as exporter:
        for i in range(0, len(spans), batch or len(spans)):
            exporter.export(spans[i : i + (batch or len(spans))])
    return path


def _merge(capsys, *args):
    status = main(["merge", *map(str, args)])
    return status, capsys.readouterr().err.splitlines()


class TestSameInputTwice:
    def test_a_file_merged_with_itself_is_refused(self, tmp_path, capsys):
        """The same path twice: a usage error, one line, no output written."""
        run = _write(tmp_path / "run.pftrace", _spans(Resource({"service.name": "train"})))
        status, err = _merge(capsys, run, run, "-o", tmp_path / "all.pftrace")
        assert status == 2
        assert err == [f"brickscope merge: {run}: given twice: each input is merged once"]
        assert not (tmp_path / "all.pftrace").exists()

    def test_the_same_file_under_another_name_is_refused(self, tmp_path):
        """A link to an input is that input."""
        run = _write(tmp_path / "run.pftrace", _spans(Resource({"service.name": "train"})))
        os.symlink(run, tmp_path / "link.pftrace")
        with pytest.raises(UsageError, match=f"link.pftrace: the same file as {run}: each input is merged once"):
            merge_traces([run, tmp_path / "link.pftrace"], tmp_path / "all.pftrace")

    def test_the_same_spans_written_differently_are_refused(self, tmp_path, capsys):
        """The same spans in another file (exported in other batches, so other bytes): exit 1."""
        spans = _spans(Resource({"service.name": "train"}), count=6)
        one = _write(tmp_path / "one.pftrace", spans)
        other = _write(tmp_path / "other.pftrace", spans, batch=2)
        assert one.read_bytes() != other.read_bytes()
        status, err = _merge(capsys, one, other, "-o", tmp_path / "all.pftrace")
        assert status == 1
        assert err == [
            f"brickscope merge: {other}: holds the same spans as {one} (span 'gemm' 0000000000000001):"
            " merging both would count them twice"
        ]
        assert not (tmp_path / "all.pftrace").exists()

    def test_a_merge_holding_an_input_is_refused(self, tmp_path):
        """Merging rank 0 into a merge that already holds it would count rank 0 twice."""
        rank0 = _write(tmp_path / "r0.pftrace", _spans(Resource({"service.name": "r0"})))
        rank1 = _write(tmp_path / "r1.pftrace", _spans(Resource({"service.name": "r1"}), first_id=10))
        merge_traces([rank0, rank1], tmp_path / "both.pftrace")
        with pytest.raises(TraceFileError, match="holds the same spans as"):
            merge_traces([tmp_path / "both.pftrace", rank0], tmp_path / "again.pftrace")

    def test_identical_packets_without_spans_are_refused(self, tmp_path, capsys):
        """A trace of another producer (no brickscope spans) copied: refused by its content."""
        packet = pb.TracePacket(trusted_packet_sequence_id=3)
        packet.track_descriptor.uuid = 99
        packet.track_descriptor.name = "other producer"
        data = pb.Trace(packet=[packet]).SerializeToString()
        (tmp_path / "a.pftrace").write_bytes(data)
        (tmp_path / "b.pftrace").write_bytes(data)
        status, err = _merge(capsys, tmp_path / "a.pftrace", tmp_path / "b.pftrace", "-o", tmp_path / "all.pftrace")
        assert status == 1
        assert err == [
            f"brickscope merge: {tmp_path / 'b.pftrace'}: the same packets as {tmp_path / 'a.pftrace'}:"
            " merging both would count every span twice"
        ]
        assert not (tmp_path / "all.pftrace").exists()

    def test_same_span_ids_at_other_times_are_two_inputs(self, tmp_path):
        """Ranks whose id generators agree (same ids, other times) are merged: 6 spans in all."""
        a = _write(tmp_path / "a.pftrace", _spans(Resource({"service.name": "train", "process.pid": 5})))
        b = _write(tmp_path / "b.pftrace", _spans(Resource({"service.name": "train", "process.pid": 6}), offset=7))
        result = merge_traces([a, b], tmp_path / "all.pftrace")
        assert result.renamed_processes == 0


def _report_ranks(capsys, path):
    assert main(["report", str(path), "--format", "json"]) == 0
    return {rank["name"]: rank["count"] for rank in json.loads(capsys.readouterr().out)["ranks"]}


class TestProcessesStayApart:
    @pytest.mark.parametrize(
        ("second", "labels"),
        [
            ({"host.name": "b"}, ("train @a pid 11", "train @b pid 11")),
            ({"host.name": "a", "service.instance.id": "y"}, ("train @a pid 11", "train instance y @a pid 11")),
        ],
    )
    def test_two_processes_with_one_pid_stay_two(self, tmp_path, capsys, second, labels):
        """No rank attribute, the same pid 11: the host or the service instance tells the two
        processes apart, after the merge as before it (3 bricks each)."""
        first = Resource({"service.name": "train", "process.pid": 11, "host.name": "a"})
        other = Resource({"service.name": "train", "process.pid": 11, **second})
        a = _write(tmp_path / "a.pftrace", _spans(first))
        b = _write(tmp_path / "b.pftrace", _spans(other, first_id=10))
        result = merge_traces([a, b], tmp_path / "all.pftrace")
        assert result.renamed_processes == 1
        expected = dict.fromkeys(labels, 3)
        assert _report_ranks(capsys, tmp_path / "all.pftrace") == expected
        assert main(["report", str(a), str(b), "--format", "json"]) == 0
        assert {r["name"]: r["count"] for r in json.loads(capsys.readouterr().out)["ranks"]} == expected

    def test_the_renamed_pid_is_synthetic_and_the_real_one_a_label(self, tmp_path):
        """In the merged file the second process has a pid above the Linux range, and its
        process track says process.pid=11; its thread tracks follow it."""
        a = _write(tmp_path / "a.pftrace", _spans(Resource({"service.name": "train", "process.pid": 11})))
        b = _write(tmp_path / "b.pftrace", _spans(Resource({"service.name": "train", "process.pid": 11}), 10, 3, 7))
        merge_traces([a, b], tmp_path / "all.pftrace")
        descriptors = [p.track_descriptor for p in pb.Trace.FromString((tmp_path / "all.pftrace").read_bytes()).packet]
        processes = [d.process for d in descriptors if d.HasField("process")]
        threads = sorted(d.thread.pid for d in descriptors if d.HasField("thread"))
        assert processes[0].pid == 11 and "process.pid=11" not in processes[0].process_labels
        assert processes[1].pid >= 1 << 22 and "process.pid=11" in processes[1].process_labels
        assert threads == [11, processes[1].pid]


class TestOtherFormats:
    CHROME = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 1, "dur": 2},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 7, "tid": 7, "ts": 4, "dur": 1},
    ]

    def test_a_chrome_trace_is_converted_and_merged_with_a_pftrace(self, tmp_path, capsys):
        """A Chrome trace JSON input is read as spans and merged beside a .pftrace: 3 gemm + 2 ops."""
        from brickscope import analysis

        run = _write(tmp_path / "run.pftrace", _spans(Resource({"service.name": "train"})))
        chrome = tmp_path / "torch.json"
        chrome.write_text(json.dumps(self.CHROME))
        status, _ = _merge(capsys, run, chrome, "-o", tmp_path / "all.pftrace")
        assert status == 0
        counts = {o.name: o.count for o in analysis.analyse(analysis.load(str(tmp_path / "all.pftrace"))).operations}
        assert counts == {"gemm": 3, "aten::mm": 1, "aten::add": 1}

    def test_a_bad_chrome_trace_is_one_line_naming_it_and_nothing_is_written(self, tmp_path, capsys):
        run = _write(tmp_path / "run.pftrace", _spans(Resource({"service.name": "train"})))
        chrome = tmp_path / "torch.json"
        chrome.write_text('{"traceEvents": [{"ph": "X", "ts": 1,, }]}')
        status, err = _merge(capsys, run, chrome, "-o", tmp_path / "all.pftrace")
        assert status == 1
        assert len(err) == 1 and err[0].startswith(f"brickscope merge: {chrome}") and "not valid JSON" in err[0]
        assert not (tmp_path / "all.pftrace").exists()

    def test_two_copies_of_one_chrome_trace_are_refused(self, tmp_path, capsys):
        """Span ids are drawn from the file, so a copy holds the same spans."""
        first, second = tmp_path / "a.json", tmp_path / "b.json"
        first.write_text(json.dumps(self.CHROME))
        second.write_text(json.dumps(self.CHROME))
        status, err = _merge(capsys, first, second, "-o", tmp_path / "all.pftrace")
        assert status == 1 and "holds the same spans as" in err[0]
