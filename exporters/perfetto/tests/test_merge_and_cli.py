# SPDX-License-Identifier: Apache-2.0
"""merge_traces and the ``brickscope merge`` / ``brickscope convert`` subcommands."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.resources import Resource
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from pftrace_testlib import T0, THREAD, decode_trace, expected_slices, gpu_attributes, make_span

from brickscope.cli import main
from brickscope.exporter.perfetto import PerfettoSpanExporter, merge_traces, read_spans


def _rank_file(path, rank, monkeypatch=None):
    resource = Resource({"service.name": f"rank{rank}", "process.pid": 1000 + rank})
    spans = [
        make_span(10 * rank + 1, "step", T0, T0 + 5000, attributes=dict(THREAD), resource=resource),
        make_span(
            10 * rank + 2,
            "gemm",
            T0 + 1000,
            T0 + 2000,
            10 * rank + 1,
            attributes=gpu_attributes(T0 + 100, 10, 1000, device=rank),
            resource=resource,
        ),
    ]
    with PerfettoSpanExporter(path) as exporter:
        exporter.export(spans)
    return spans


class TestMerge:
    def test_keeps_every_packet(self, tmp_path):
        """The merged trace holds every packet of every input."""
        inputs = [tmp_path / f"r{i}.pftrace" for i in range(3)]
        for i, path in enumerate(inputs):
            _rank_file(path, i)
        result = merge_traces(inputs, tmp_path / "all.pftrace")
        counts = [len(pb.Trace.FromString(p.read_bytes()).packet) for p in inputs]
        assert result.packets == counts
        assert len(decode_trace(tmp_path / "all.pftrace").packets) == sum(counts)

    def test_no_collisions(self, tmp_path, same_ids):
        """Inputs that share sequence ids and track uuids are merged without mixing them."""
        inputs = [tmp_path / f"r{i}.pftrace" for i in range(2)]
        spans = [s for i, p in enumerate(inputs) for s in _rank_file(p, i)]
        ids = [decode_trace(p) for p in inputs]
        assert ids[0].sequence_ids == ids[1].sequence_ids
        assert set(ids[0].descriptors) == set(ids[1].descriptors)
        result = merge_traces(inputs, tmp_path / "all.pftrace")
        merged = decode_trace(tmp_path / "all.pftrace")
        assert result.renamed_sequences == 1 and result.renamed_tracks == len(ids[1].descriptors)
        assert merged.errors == []
        assert len(merged.sequence_ids) == 2
        assert len(merged.descriptors) == len(ids[0].descriptors) + len(ids[1].descriptors)
        assert sorted((s.name, s.ts, s.dur) for s in merged.slices) == expected_slices(spans)
        processes = sorted(d.process.process_name for d in merged.descriptors.values() if d.HasField("process"))
        assert processes == ["rank0", "rank1"]
        back = read_spans(tmp_path / "all.pftrace")
        assert sorted((s.resource.attributes["service.name"], s.name) for s in back) == sorted(
            (s.resource.attributes["service.name"], s.name) for s in spans
        )

    def test_refuses_to_overwrite(self, tmp_path):
        """An existing output is an error unless overwrite is asked for."""
        _rank_file(tmp_path / "r.pftrace", 0)
        (tmp_path / "all.pftrace").write_bytes(b"keep")
        with pytest.raises(ValueError, match="already exists"):
            merge_traces([tmp_path / "r.pftrace"], tmp_path / "all.pftrace")
        merge_traces([tmp_path / "r.pftrace"], tmp_path / "all.pftrace", overwrite=True)
        assert decode_trace(tmp_path / "all.pftrace").errors == []


def _otlp_json(path, count):
    spans = []
    for i in range(1, count + 1):
        spans.append(
            {
                "traceId": "0123456789abcdef0123456789abcdef",
                "spanId": f"{i:016x}",
                "parentSpanId": "" if i == 1 else f"{1:016x}",
                "name": "root" if i == 1 else f"child{i % 3}",
                "kind": 1,
                "startTimeUnixNano": str(T0 + (0 if i == 1 else 10 * i)),
                "endTimeUnixNano": str(T0 + (100 * count if i == 1 else 10 * i + 5)),
                "attributes": [{"key": "thread.id", "value": {"intValue": "7"}}],
            }
        )
    request = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
                "scopeSpans": [{"scope": {"name": "app"}, "spans": spans}],
            }
        ]
    }
    path.write_text(json.dumps(request) + "\n")


class TestCommands:
    def test_merge_command(self, tmp_path, capsys):
        """brickscope merge writes the merged trace and says what it did."""
        for i in range(2):
            _rank_file(tmp_path / f"r{i}.pftrace", i)
        out = tmp_path / "all.pftrace"
        assert main(["merge", str(tmp_path / "r0.pftrace"), str(tmp_path / "r1.pftrace"), "-o", str(out)]) == 0
        assert decode_trace(out).errors == []
        assert "merged" in capsys.readouterr().err

    def test_merge_command_existing_output(self, tmp_path, capsys):
        """brickscope merge exits 2 (usage) with a message when the output exists and --force is missing."""
        _rank_file(tmp_path / "r0.pftrace", 0)
        (tmp_path / "all.pftrace").write_bytes(b"x")
        assert main(["merge", str(tmp_path / "r0.pftrace"), "-o", str(tmp_path / "all.pftrace")]) == 2
        assert "already exists" in capsys.readouterr().err

    def test_convert_command(self, tmp_path, capsys):
        """brickscope convert turns OTLP JSON into a trace holding every span."""
        source = tmp_path / "spans.jsonl"
        _otlp_json(source, 50)
        out = tmp_path / "trace.pftrace"
        assert main(["convert", str(source), "-o", str(out)]) == 0
        decoded = decode_trace(out)
        assert decoded.errors == []
        assert len(decoded.slices) == 50
        assert {decoded.track_kind(s.track) for s in decoded.slices} == {"thread"}
        assert "wrote 50 spans" in capsys.readouterr().err

    def test_convert_shows_progress_on_large_input(self, tmp_path, capsys, monkeypatch):
        """Converting a large input reports progress on stderr."""
        from brickscope.offline import _replay

        monkeypatch.setattr(_replay, "PROGRESS_MIN_BYTES", 1)
        source = tmp_path / "spans.jsonl"
        _otlp_json(source, 20)
        assert main(["convert", str(source), "-o", str(tmp_path / "t.pftrace")]) == 0
        assert "100.0%" in capsys.readouterr().err

    def test_convert_bad_input(self, tmp_path, capsys):
        """A file that is not OTLP JSON exits 1 with the reader's message."""
        source = tmp_path / "spans.jsonl"
        source.write_text("{not json\n")
        assert main(["convert", str(source), "-o", str(tmp_path / "t.pftrace")]) == 1
        assert "brickscope convert:" in capsys.readouterr().err
