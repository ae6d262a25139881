# SPDX-License-Identifier: Apache-2.0
"""Tests for ``brickscope flamegraph``: offline conversion equals the live exporter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from brickscope.cli import main
from brickscope.exporter.flamegraph import FlamegraphSpanExporter
from brickscope.offline import _formats


def _run(args: list[str]) -> int:
    return main(["flamegraph", *[str(a) for a in args]])


def _model_spans(make_span):
    """Two steps of a small model on two GPU streams and two threads, names included."""
    spans = []
    t = 1_700_000_000_000_000_000
    for step_number in range(2):
        step = make_span(
            "step", host=(t, t + 900_000), attributes={"brickscope.step.number": step_number}
        )
        for layer_index in range(2):
            base = t + layer_index * 400_000
            layer = make_span("layer", step, host=(base, base + 390_000))
            norm = make_span(
                "rms_norm",
                layer,
                gpu=(base + 10_500, base + 60_000),
                host=(base, base + 5_000),
                attributes={"brickscope.brick.elements": 4096},
            )
            kernel = make_span(
                "rms fwd;v2",
                norm,
                gpu=(base + 11_000, base + 50_250),
                host=(base + 100, base + 900),
            )
            attention = make_span(
                "attention ünï",
                layer,
                gpu=(base + 61_000, base + 300_000),
                stream=0x2,
                host=(base + 5_000, base + 9_000),
                thread=7,
            )
            qk = make_span(
                "",
                attention,
                gpu=(base + 61_000, base + 200_000),
                stream=0x2,
                host=(base + 5_100, base + 6_000),
                thread=7,
            )
            softmax = make_span(
                "softmax",
                attention,
                gpu=(base + 150_000, base + 290_000),
                stream=0x3,
                host=(base + 6_000, base + 7_000),
                thread=7,
            )
            spans += [kernel, norm, qk, softmax, attention, layer]
        spans.append(step)
        t += 1_000_000
    return spans


def _live(tmp_path: Path, spans, **options) -> tuple[bytes, bytes]:
    folded, speedscope = tmp_path / "live.folded", tmp_path / "live.json"
    exporter = FlamegraphSpanExporter(folded, speedscope_path=speedscope, **options)
    for i in range(0, len(spans), 5):  # batches, children mostly before parents
        exporter.export(spans[i : i + 5])
    exporter.shutdown()
    return folded.read_bytes(), speedscope.read_bytes()


def _offline(tmp_path: Path, source: Path, *extra: str) -> tuple[bytes, bytes]:
    folded, speedscope = tmp_path / "offline.folded", tmp_path / "offline.json"
    assert _run([source, "-o", folded, "--speedscope", speedscope, *extra]) == 0
    return folded.read_bytes(), speedscope.read_bytes()


class TestOfflineEqualsLive:
    @pytest.mark.parametrize(
        ("options", "flags"),
        [
            ({}, []),
            ({"weight": "host", "unit": "ns"}, ["--weight", "host", "--unit", "ns"]),
            ({"device_frames": True}, ["--device-frames"]),
            ({"weight": "brickscope.brick.elements"}, ["--weight", "brickscope.brick.elements"]),
        ],
    )
    def test_otlp_json_conversion_equals_live_export(
        self, tmp_path, make_span, write_otlp_json, options, flags
    ):
        """OTLP JSON of the same spans (in another order) converts to byte-identical files."""
        spans = _model_spans(make_span)
        live = _live(tmp_path, spans, **options)
        source = write_otlp_json(tmp_path / "spans.jsonl", spans[::-1])
        assert _offline(tmp_path, source, *flags) == live
        assert b"svc;step;layer;" in live[0]  # not trivially equal (both empty)

    def test_pftrace_conversion_equals_live_export(self, tmp_path, make_span):
        """A .pftrace written by the Perfetto exporter converts to the live exporter's files."""
        perfetto = pytest.importorskip(
            "brickscope.exporter.perfetto", reason="brickscope-exporter-perfetto is not installed"
        )
        spans = _model_spans(make_span)
        live = _live(tmp_path, spans, device_frames=True)
        trace = tmp_path / "trace.pftrace"
        writer = perfetto.PerfettoSpanExporter(trace)
        writer.export(spans)
        writer.shutdown()
        assert _offline(tmp_path, trace, "--device-frames") == live


class TestCommandLine:
    def test_console_command_is_registered(self, tmp_path, make_span, write_otlp_json):
        """The installed `brickscope` command finds the subcommand through its entry point."""
        source = write_otlp_json(tmp_path / "s.jsonl", [make_span("x", gpu=(0, 2_000))])
        result = subprocess.run(
            [sys.executable, "-m", "brickscope.cli", "flamegraph", str(source)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert (tmp_path / "s.folded").read_text() == "svc;x 2\n"
        assert "1 weighted by gpu" in result.stderr

    def test_existing_output_needs_force(self, tmp_path, make_span, write_otlp_json, capsys):
        """An existing output is kept unless --force is given."""
        source = write_otlp_json(tmp_path / "s.jsonl", [make_span("x", gpu=(0, 2_000))])
        out = tmp_path / "out.folded"
        out.write_text("keep\n")
        assert _run([source, "-o", out]) == 2
        assert "--force" in capsys.readouterr().err and out.read_text() == "keep\n"
        assert _run([source, "-o", out, "--force"]) == 0
        assert out.read_text() == "svc;x 2\n"

    def test_bad_input_names_file_and_line_and_writes_nothing(self, tmp_path, capsys):
        """Malformed OTLP JSON exits 1 with file:line, and leaves no output file."""
        source = tmp_path / "bad.jsonl"
        source.write_text('{"resourceSpans": []}\n{"resourceSpans": [1]}\n')
        out = tmp_path / "out.folded"
        assert _run([source, "-o", out]) == 1
        assert "bad.jsonl:2:" in capsys.readouterr().err
        assert not out.exists()

    def test_missing_perfetto_exporter_is_explained(self, tmp_path, monkeypatch, capsys):
        """A .pftrace without the Perfetto exporter installed gives an actionable error."""
        trace = tmp_path / "trace.pftrace"
        trace.write_bytes(b"\x0a\x02\x08\x01")
        monkeypatch.setattr(_formats, "installed_formats", lambda: (_formats.OTLP_JSON,))
        assert _run([trace, "-o", tmp_path / "o.folded"]) == 1
        assert "brickscope-exporter-perfetto" in capsys.readouterr().err


class TestWeights:
    def test_host_trace_falls_back_to_host_time_and_says_so(self, tmp_path, make_span, write_otlp_json, capsys):
        source = write_otlp_json(tmp_path / "s.jsonl", [make_span("step", host=(0, 5_000))])
        assert _run([source, "-o", tmp_path / "o.folded"]) == 0
        assert "weighting by host time (--weight host)" in capsys.readouterr().err
        assert (tmp_path / "o.folded").read_text() == "svc;step 5\n"  # 5 us of host self time

    @pytest.mark.parametrize("weight", ["gpu", "brickscope.brick.elements"])
    def test_an_explicit_weight_nobody_carries_is_an_error_not_an_empty_file(
        self, tmp_path, make_span, write_otlp_json, capsys, weight
    ):
        source = write_otlp_json(tmp_path / "s.jsonl", [make_span("step", host=(0, 5_000))])
        assert _run([source, "-o", tmp_path / "o.folded", "--weight", weight]) == 1
        err = capsys.readouterr().err
        assert "nothing to draw (try --weight host)" in err and len(err.splitlines()) == 1
        assert not (tmp_path / "o.folded").exists()

    def test_empty_weight_is_a_usage_error(self, tmp_path, make_span, write_otlp_json):
        source = write_otlp_json(tmp_path / "s.jsonl", [make_span("step", host=(0, 5_000))])
        assert _run([source, "-o", tmp_path / "o.folded", "--weight", " "]) == 2


@pytest.mark.parametrize("collector_on", [True, False])
def test_flamegraph_leaves_the_garbage_collector_as_it_found_it(
    tmp_path, monkeypatch, make_span, write_otlp_json, collector_on
):
    """flamegraph pauses the cyclic collector while it reads and folds (about a quarter of its
    CPU otherwise): it is off while spans are folded, and the caller's setting is back
    afterwards, whether the command worked or failed."""
    import gc

    source = write_otlp_json(tmp_path / "spans.jsonl", _model_spans(make_span))
    seen = []
    real = FlamegraphSpanExporter.export

    def export(self, spans):
        seen.append(gc.isenabled())
        return real(self, spans)

    monkeypatch.setattr(FlamegraphSpanExporter, "export", export)
    (gc.enable if collector_on else gc.disable)()
    try:
        assert _run([source, "-o", tmp_path / "out.folded"]) == 0
        assert gc.isenabled() is collector_on
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"resourceSpans": [1]}\n')
        assert _run([bad, "-o", tmp_path / "none.folded"]) == 1
        assert gc.isenabled() is collector_on
        assert seen and not any(seen)
    finally:
        gc.enable()
