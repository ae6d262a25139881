# SPDX-License-Identifier: Apache-2.0
"""``brickscope convert``: the output format comes from --to or the extension, never silently wrong."""

from __future__ import annotations

import json

import pytest
from pftrace_testlib import T0, THREAD, decode_trace, gpu_attributes, make_span

from brickscope.cli import main
from brickscope.exporter.perfetto import PerfettoSpanExporter


def _pftrace(path):
    spans = [
        make_span(1, "step", T0, T0 + 5000, attributes=dict(THREAD)),
        make_span(2, "gemm", T0 + 1000, T0 + 2500, 1, attributes=gpu_attributes(T0 + 100, 10, 1500, device=0)),
    ]
    with PerfettoSpanExporter(path) as exporter:
        exporter.export(spans)


def test_pftrace_to_json_is_chrome_trace(tmp_path, capsys):
    """The case that used to write protobuf into a .json file: now Chrome trace JSON."""
    _pftrace(tmp_path / "run.pftrace")
    out = tmp_path / "run.json"
    assert main(["convert", str(tmp_path / "run.pftrace"), "-o", str(out)]) == 0
    trace = json.loads(out.read_text())
    complete = sorted((e["name"], e["ts"], e["dur"]) for e in trace["traceEvents"] if e["ph"] == "X")
    assert complete == [("gemm", 1.0, 1.5), ("step", 0.0, 5.0)]
    lanes = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert "GPU 0 stream 32512" in lanes  # gpu_attributes' default stream, 0x7F00
    assert "wrote 2 spans" in capsys.readouterr().err


def test_explicit_to_with_another_extension(tmp_path):
    _pftrace(tmp_path / "run.pftrace")
    out = tmp_path / "run.trace"
    assert main(["convert", str(tmp_path / "run.pftrace"), "-o", str(out), "--to", "chrome-json"]) == 0
    assert json.loads(out.read_text())["displayTimeUnit"] == "ns"


def test_pftrace_still_by_extension_and_by_to(tmp_path):
    _pftrace(tmp_path / "run.pftrace")
    for name, extra in (("a.pftrace", []), ("b.pftrace", ["--to", "pftrace"]), ("c.bin", ["--to", "pftrace"])):
        assert main(["convert", str(tmp_path / "run.pftrace"), "-o", str(tmp_path / name), *extra]) == 0
        slices = decode_trace(tmp_path / name).slices
        assert sorted(s.name for s in slices if s.dur > 10) == ["gemm", "step"]  # (and gemm's 10 ns launch side)


@pytest.mark.parametrize(
    "output, extra, message",
    [
        ("x.trace", [], "x.trace: unknown output extension '.trace'; name it .pftrace or .json or .parquet, or give --to"),
        ("x", [], "unknown output extension '(none)'"),
        ("x.json", ["--to", "pftrace"], "x.json: the extension .json is for chrome-json, not --to pftrace"),
        ("x.pftrace", ["--to", "chrome-json"], "the extension .pftrace is for pftrace, not --to chrome-json"),
        ("x.parquet", ["--to", "pftrace"], "the extension .parquet is for parquet, not --to pftrace"),
        ("x.json", ["--run", "a"], "--run names the run column of a Parquet output, not of chrome-json"),
    ],
)
def test_unknown_or_mismatching_extension_is_refused(tmp_path, capsys, output, extra, message):
    _pftrace(tmp_path / "run.pftrace")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["convert", str(tmp_path / "run.pftrace"), "-o", str(tmp_path / output), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_unknown_to_is_refused_by_the_parser(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["convert", "in.jsonl", "-o", str(tmp_path / "x.json"), "--to", "svg"])
    assert exit_.value.code == 2
    assert "invalid choice: 'svg'" in capsys.readouterr().err


def test_pftrace_to_parquet_and_back(tmp_path, capsys):
    """convert -o x.parquet writes the Parquet span format (run: the input's stem, or --run);
    converting that back gives the same slices."""
    pq = pytest.importorskip("pyarrow.parquet")
    _pftrace(tmp_path / "run.pftrace")
    assert main(["convert", str(tmp_path / "run.pftrace"), "-o", str(tmp_path / "run.parquet")]) == 0
    assert "wrote 2 spans" in capsys.readouterr().err
    table = pq.read_table(tmp_path / "run.parquet")
    assert sorted(table.column("name").to_pylist()) == ["gemm", "step"]
    assert set(table.column("run").to_pylist()) == {"run"}
    assert main(["convert", str(tmp_path / "run.pftrace"), "-o", str(tmp_path / "b.pq"), "--to", "parquet", "--run", "base"]) == 0
    assert set(pq.read_table(tmp_path / "b.pq").column("run").to_pylist()) == {"base"}
    assert main(["convert", str(tmp_path / "run.parquet"), "-o", str(tmp_path / "back.pftrace")]) == 0
    assert sorted((s.name, s.ts, s.dur) for s in decode_trace(tmp_path / "back.pftrace").slices) == sorted(
        (s.name, s.ts, s.dur) for s in decode_trace(tmp_path / "run.pftrace").slices
    )


def test_parquet_without_pyarrow_is_one_line(tmp_path, capsys, monkeypatch):
    """No pyarrow: one line saying what to install, exit 2, nothing written."""
    import builtins

    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError("No module named 'pyarrow'")
        return real_import(name, *args, **kwargs)

    _pftrace(tmp_path / "run.pftrace")
    from brickscope.offline import parquet_schema

    parquet_schema.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    try:
        assert main(["convert", str(tmp_path / "run.pftrace"), "-o", str(tmp_path / "run.parquet")]) == 2
    finally:
        monkeypatch.undo()
        parquet_schema.cache_clear()
    err = capsys.readouterr().err
    assert "pip install 'brickscope[parquet]'" in err and err.count("\n") == 1
    assert not (tmp_path / "run.parquet").exists()


class TestSeveralInputsToADataset:
    """convert A B ... -o DIR: one Parquet file per input in DIR, one run, all or nothing."""

    def _inputs(self, tmp_path):
        for rank in (0, 1):
            _pftrace(tmp_path / f"rank{rank}.pftrace")
        return [str(tmp_path / "rank0.pftrace"), str(tmp_path / "rank1.pftrace")]

    def test_one_file_per_input_named_by_the_directory_as_run(self, tmp_path, capsys):
        pq = pytest.importorskip("pyarrow.parquet")
        out = tmp_path / "job42"
        assert main(["convert", *self._inputs(tmp_path), "-o", str(out)]) == 0
        assert sorted(p.name for p in out.iterdir()) == ["rank0.parquet", "rank1.parquet"]
        for name in ("rank0.parquet", "rank1.parquet"):
            table = pq.read_table(out / name)
            assert sorted(table.column("name").to_pylist()) == ["gemm", "step"]
            assert set(table.column("run").to_pylist()) == {"job42"}
        assert "wrote 4 spans to 2 files in" in capsys.readouterr().err
        # The dataset reads back whole: both files' spans.
        assert main(["convert", str(tmp_path / "rank0.pftrace"), str(tmp_path / "rank1.pftrace"),
                     "-o", str(tmp_path / "other"), "--run", "base"]) == 0  # fmt: skip
        assert set(pq.read_table(tmp_path / "other" / "rank1.parquet").column("run").to_pylist()) == {"base"}

    def test_a_bad_input_leaves_nothing(self, tmp_path, capsys):
        pytest.importorskip("pyarrow.parquet")
        inputs = self._inputs(tmp_path)
        bad = tmp_path / "rank2.pftrace"
        bad.write_bytes(b"not a trace at all")
        out = tmp_path / "job42"
        assert main(["convert", *inputs, str(bad), "-o", str(out)]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "rank2.pftrace" in err[0]
        assert not out.exists()  # created by the command, removed with what it held
        out.mkdir()
        (out / "notes.txt").write_text("mine")
        assert main(["convert", *inputs, str(bad), "-o", str(out)]) == 1
        assert [p.name for p in out.iterdir()] == ["notes.txt"]  # an existing directory is left as it was

    def test_an_existing_file_needs_force(self, tmp_path, capsys):
        pq = pytest.importorskip("pyarrow.parquet")
        inputs = self._inputs(tmp_path)
        out = tmp_path / "job42"
        out.mkdir()
        (out / "rank1.parquet").write_text("old")
        assert main(["convert", *inputs, "-o", str(out)]) == 2
        assert "rank1.parquet: already exists; pass --force" in capsys.readouterr().err
        assert sorted(p.name for p in out.iterdir()) == ["rank1.parquet"]
        assert main(["convert", *inputs, "-o", str(out), "--force"]) == 0
        assert pq.read_table(out / "rank1.parquet").num_rows == 2

    @pytest.mark.parametrize(
        "output, extra, message",
        [
            ("ds", ["--to", "chrome-json"], "several inputs make a Parquet dataset, not --to chrome-json"),
            ("ds.parquet", [], "ds.parquet: several inputs need a directory"),
        ],
    )
    def test_refused_before_anything_is_written(self, tmp_path, capsys, output, extra, message):
        inputs = self._inputs(tmp_path)
        assert main(["convert", *inputs, "-o", str(tmp_path / output), *extra]) == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / output).exists()

    def test_two_inputs_of_one_name_are_refused(self, tmp_path, capsys):
        for directory in ("a", "b"):
            (tmp_path / directory).mkdir()
            _pftrace(tmp_path / directory / "rank0.pftrace")
        inputs = [str(tmp_path / "a" / "rank0.pftrace"), str(tmp_path / "b" / "rank0.pftrace")]
        assert main(["convert", *inputs, "-o", str(tmp_path / "ds")]) == 2
        assert "two inputs would both be written to rank0.parquet" in capsys.readouterr().err
        assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("collector_on", [True, False])
def test_convert_leaves_the_garbage_collector_as_it_found_it(tmp_path, monkeypatch, collector_on):
    """convert pauses the cyclic collector while it reads and writes (a quarter of its CPU
    otherwise): it is off while spans are exported, and the caller's setting is back
    afterwards, whether the conversion worked or failed."""
    import gc

    from brickscope.exporter.perfetto import _exporter

    _pftrace(tmp_path / "run.pftrace")
    seen = []
    real = _exporter.PerfettoSpanExporter.export
    monkeypatch.setattr(
        _exporter.PerfettoSpanExporter, "export", lambda self, spans: (seen.append(gc.isenabled()), real(self, spans))[1]
    )
    (gc.enable if collector_on else gc.disable)()
    try:
        assert main(["convert", str(tmp_path / "run.pftrace"), "-o", str(tmp_path / "out.pftrace")]) == 0
        assert gc.isenabled() is collector_on
        (tmp_path / "empty.pftrace").write_bytes(b"")
        assert main(["convert", str(tmp_path / "empty.pftrace"), "-o", str(tmp_path / "none.pftrace")]) != 0
        assert gc.isenabled() is collector_on
        assert seen == [False]
    finally:
        gc.enable()
