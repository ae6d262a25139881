# SPDX-License-Identifier: Apache-2.0
"""Loading files: the same trace as OTLP JSON and as .pftrace gives the same report; per-rank
directories; and bad input gets one line naming the file, never a traceback or an empty report."""

from __future__ import annotations

import dataclasses
import gzip
import json

import pytest
from analysis_synthetic import two_rank_trace, write_otlp_json, write_pftrace

from brickscope.analysis import AnalysisError, analyse, load, render, to_json
from brickscope.cli import main

pytest.importorskip("brickscope.exporter.perfetto")


@pytest.fixture(name="files")
def _files(tmp_path):
    trace = two_rank_trace()
    (tmp_path / "json").mkdir()
    (tmp_path / "perfetto").mkdir()
    for rank, spans in trace.items():
        write_otlp_json(tmp_path / "json" / f"rank{rank}.jsonl", spans)
        write_pftrace(tmp_path / "perfetto" / f"rank{rank}.pftrace", spans)
    return tmp_path


def _without_sources(report):
    return dataclasses.replace(report, sources=())


class TestFormatsAgree:
    def test_pftrace_and_otlp_json_give_the_same_report(self, files, backend):
        """Every section, every figure: the two formats carry the same trace."""
        from_json = analyse(load(files / "json", backend=backend), top=5)
        from_perfetto = analyse(load(files / "perfetto", backend=backend), top=5)
        assert to_json(_without_sources(from_json)) == to_json(_without_sources(from_perfetto))
        assert from_json.load_balance["devices"].imbalance_ratio == pytest.approx(500 / 1150)
        assert len(from_json.sources) == 2

    def test_merged_multi_rank_pftrace(self, files, tmp_path):
        """`brickscope merge` of the per-rank files: one file, the same report as the two files."""
        assert (
            main(
                [
                    "merge",
                    str(files / "perfetto" / "rank0.pftrace"),
                    str(files / "perfetto" / "rank1.pftrace"),
                    "-o",
                    str(tmp_path / "all.pftrace"),
                    "-q",
                ]
            )
            == 0
        )
        merged = analyse(load(tmp_path / "all.pftrace"), top=5)
        separate = analyse(load(files / "perfetto"), top=5)
        assert to_json(_without_sources(merged)) == to_json(_without_sources(separate))
        assert [r.name for r in merged.ranks] == ["0", "1"]

    def test_directory_equals_the_files_listed(self, files):
        """A directory of per-rank files is the same input as its files named one by one."""
        listed = analyse(load(files / "json" / "rank0.jsonl", files / "json" / "rank1.jsonl"))
        directory = analyse(load(files / "json"))
        assert to_json(listed) == to_json(directory)

    def test_a_run_directory_with_the_flamegraph_exporters_files_reads_its_trace_only(self, files):
        """What a run writes beside its trace (the flamegraph exporter's folded stacks and
        speedscope profile, as examples/quickstart.py writes them) is not read as a trace."""
        run = files / "perfetto"
        (run / "profile.folded").write_text("svc;brick 10\n")
        (run / "profile.speedscope.json").write_text('{"$schema": "https://www.speedscope.app/file-format-schema.json"}')
        listed = analyse(load(run / "rank0.pftrace", run / "rank1.pftrace"))
        assert to_json(analyse(load(run))) == to_json(listed)


class TestCommandLine:
    def test_report_json_is_schema_1(self, files, capsys):
        """--format json prints the documented keys, nanoseconds, and schema 1."""
        assert main(["report", str(files / "perfetto"), "--format", "json", "--top", "2"]) == 0
        captured = capsys.readouterr()
        assert captured.err == ""  # no progress line when stderr is not a terminal
        data = json.loads(captured.out)
        assert data["schema"] == 1
        for key in (
            "operations",
            "categories",
            "slowest",
            "devices",
            "ranks",
            "load_balance",
            "communication",
            "memory",
            "roofline",
            "outliers",
            "throughput",
        ):
            assert key in data
        assert data["load_balance"]["devices"]["imbalance_ratio"] == pytest.approx(500 / 1150)
        assert data["slowest"][0]["duration_ns"] == 900_000 and len(data["slowest"]) == 2

    def test_every_json_key_is_documented(self, files, capsys):
        """The schema table of docs/analysis.md names every top-level key the JSON has."""
        from pathlib import Path

        assert main(["report", str(files / "json"), "--format", "json"]) == 0
        data = json.loads(capsys.readouterr().out)
        doc = (Path(__file__).resolve().parents[2] / "docs" / "analysis.md").read_text()
        schema = doc[doc.index("## JSON output") :]
        assert [key for key in data if f"`{key}`" not in schema] == []

    def test_text_and_markdown(self, files, capsys):
        """Text and Markdown name the straggler and the outlier."""
        assert main(["report", str(files / "json"), "--format", "markdown"]) == 0
        markdown = capsys.readouterr().out
        assert "| gemm | matmul | 7 |" in markdown and "**Load balance" in markdown
        assert main(["report", str(files / "json"), "--step", "1:"]) == 0
        text = capsys.readouterr().out
        assert "step 1:" in text.splitlines()[0] and "Outliers" in text

    def test_step_n_is_that_step_alone(self, files, capsys):
        """--step 1 keeps step 1 of both ranks (synthetic.two_rank_trace): gemm 100 + 100 us on
        rank 0 and 100 us on rank 1, all_reduce 200 us, the kernel sgemm 90 us; --step 1:2 is the same."""
        reports = []
        for step in ("1", "1:2"):
            assert main(["report", str(files / "json"), "--step", step, "--format", "json"]) == 0
            reports.append(json.loads(capsys.readouterr().out))
        assert [(o["name"], o["count"], o["self_ns"]) for o in reports[0]["operations"]] == [
            ("gemm", 3, 300_000), ("all_reduce", 1, 200_000), ("sgemm", 1, 90_000)
        ]
        assert reports[0]["filters"] == {"step": "1"} and reports[1]["filters"] == {"step": "1"}
        assert reports[0]["operations"] == reports[1]["operations"]

    def test_names_are_escaped(self, tmp_path, capsys):
        """A span name with a newline, an escape sequence and Markdown markup stays on its row."""
        from analysis_synthetic import _resource, span

        spans = [span(1, "evil\n|name\x1b[31m", "brick", 0, 10, _resource(0), category="x*y")]
        path = write_otlp_json(tmp_path / "evil.jsonl", spans)
        assert main(["report", str(path)]) == 0
        text = capsys.readouterr().out
        assert "evil\\x0a|name\\x1b[31m" in text and "\x1b" not in text
        assert main(["report", str(path), "--format", "markdown"]) == 0
        # Markdown: the escape's own backslash is escaped too, so it renders as typed
        assert "evil\\\\x0a\\|name\\\\x1b\\[31m" in capsys.readouterr().out


class TestBadInput:
    @pytest.mark.parametrize(
        ("content", "problem"),
        [
            (None, "no such file or directory"),
            (b"", "empty file"),
            (b"\x00\x01garbage that is not a trace", "not a trace brickscope"),
            (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 3}]}]}]}\n', "traceId: missing"),
            (b'{"resourceSpans": []}\n', "no spans in this file"),
            (b"{not json\n", "not valid JSON"),
        ],
    )
    def test_one_line_naming_the_file_exit_1(self, tmp_path, capsys, content, problem):
        """Missing, empty, corrupt, malformed or span-less: rc 1, one stderr line, nothing on stdout."""
        path = tmp_path / "input.trace"
        if content is not None:
            path.write_bytes(content)
        assert main(["report", str(path)]) == 1
        captured = capsys.readouterr()
        assert captured.out == ""
        (line,) = captured.err.splitlines()
        assert line.startswith("brickscope report: ") and str(path) in line and problem in line

    def test_spans_but_no_bricks(self, tmp_path, capsys):
        """OTLP JSON of plain application spans: a table of their names by self time, and each
        brickscope section says in one line which attributes it needs."""
        from analysis_synthetic import _resource, span

        path = write_otlp_json(tmp_path / "app.jsonl", [span(1, "GET /", "server", 0, 10, _resource(0))])
        assert main(["report", "--format", "json", str(path)]) == 0
        report = json.loads(capsys.readouterr().out)
        assert [(s["name"], s["count"], s["self_ns"], s["share"]) for s in report["others"]] == [("GET /", 1, 10_000, 1.0)]  # span() takes microseconds
        assert report["operations"] == []
        assert main(["report", str(path)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert "Slowest brick instances: not shown, no brick spans (needs brickscope.scope.kind=brick)" in lines

    def test_corrupt_gzip(self, tmp_path, capsys):
        """A gzip file cut short is named with the problem."""
        data = gzip.compress(b'{"resourceSpans": []}\n' * 1000)
        path = tmp_path / "cut.jsonl.gz"
        path.write_bytes(data[: len(data) // 2])
        assert main(["report", str(path)]) == 1
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and str(path) in err

    def test_truncated_pftrace(self, files, tmp_path, capsys):
        """A .pftrace cut mid-packet fails naming the file; --allow-truncated analyses the valid prefix."""
        data = (files / "perfetto" / "rank0.pftrace").read_bytes()
        path = tmp_path / "cut.pftrace"
        path.write_bytes(data[:-7])
        assert main(["report", str(path)]) == 1
        captured = capsys.readouterr()
        assert captured.out == "" and str(path) in captured.err and "truncated" in captured.err
        assert len(captured.err.splitlines()) == 1 and "(--allow-truncated reads what was written before the cut)" in captured.err
        assert main(["report", str(path), "--allow-truncated", "--format", "json"]) == 0
        captured = capsys.readouterr()
        data = json.loads(captured.out)
        assert data["spans"] > 0 and "truncated" in data["notes"][0]
        assert f"{path}: offset" in captured.err and "analysed the valid prefix" in captured.err

    @pytest.mark.parametrize("command", ["report", "diff"])
    @pytest.mark.parametrize("step", ["2:1", "1:1", "-1", ":", "x", "1:y", ""])
    def test_a_bad_step_is_one_line_and_status_2(self, files, capsys, command, step):
        """A malformed --step is a usage error: one stderr line naming the value, status 2."""
        inputs = [str(files / "json")] * (2 if command == "diff" else 1)
        with pytest.raises(SystemExit) as exit_info:
            main([command, *inputs, "--step", step])
        captured = capsys.readouterr()
        assert exit_info.value.code == 2 and captured.out == ""
        (line,) = captured.err.splitlines()
        assert line.startswith(f"brickscope {command}: argument --step: {step!r}: expected a step N, or a range A:B")

    def test_a_bad_peak_exits_2(self, files, capsys):
        assert main(["report", str(files / "json"), "--peak", "H100=fast"]) == 2

    def test_python_api_raises_analysis_error(self, tmp_path):
        """load() raises AnalysisError whose str() is the CLI's one line."""
        with pytest.raises(AnalysisError, match=r"missing\.pftrace: no such file"):
            load(tmp_path / "missing.pftrace")


def test_render_rejects_unknown_format(files):
    """render() names the formats it knows."""
    with pytest.raises(ValueError, match="expected one of"):
        render(analyse(load(files / "json")), "xml")


def test_report_of_the_quickstart_trace(tmp_path, capsys):
    """What `make demo` ends with: the report of the quickstart's own .pftrace, counted by hand:
    per step, rms_norm runs twice in each of the 4 layers and once before lm_head."""
    import subprocess
    import sys
    from pathlib import Path

    quickstart = Path(__file__).resolve().parents[2] / "examples" / "quickstart.py"
    run = subprocess.run(
        [sys.executable, str(quickstart), "--out", str(tmp_path), "--steps", "2", "--clock", "host"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert main(["report", str(tmp_path / "trace.pftrace"), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    counts = {(op["kind"], op["name"]): op["count"] for op in data["operations"]}
    assert counts[("brick", "rms_norm")] == 2 * (4 * 2 + 1)
    assert counts[("brick", "lm_head")] == 2 and counts[("brick", "sampling")] == 2
    assert data["throughput"]["tokens"] == 2 and len(data["throughput"]["steps"]) == 2
    assert data["clocks"] == ["host"] and data["devices"] == []


def test_progress_line_only_on_a_terminal(files, monkeypatch, capsys):
    """On a terminal, reading shows a progress line on stderr (stdout stays the report alone)."""
    import io
    import sys

    from brickscope.offline import _replay

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(_replay, "PROGRESS_MIN_BYTES", 0)  # the test files are small
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["report", str(files / "json" / "rank0.jsonl"), "--format", "json"]) == 0
    assert "rank0.jsonl: " in terminal.getvalue() and "%" in terminal.getvalue()
    assert json.loads(capsys.readouterr().out)["schema"] == 1
    quiet = Terminal()
    monkeypatch.setattr(sys, "stderr", quiet)
    assert main(["report", str(files / "json" / "rank0.jsonl"), "-q"]) == 0
    assert quiet.getvalue() == ""


@pytest.mark.parametrize("collector_on", [True, False])
def test_load_leaves_the_garbage_collector_as_it_found_it(files, tmp_path, monkeypatch, collector_on):
    """load() pauses the cyclic collector while it reads (a quarter of its CPU otherwise):
    the application's setting is back afterwards, whether the load worked or failed, and the
    collector is really off during the read."""
    import gc

    from brickscope.analysis import _load

    seen = []
    real = _load._load_files
    monkeypatch.setattr(_load, "_load_files", lambda *args: (seen.append(gc.isenabled()), real(*args))[1])
    (gc.enable if collector_on else gc.disable)()
    try:
        assert load(files / "perfetto").rows > 0
        assert gc.isenabled() is collector_on
        empty = tmp_path / "empty.pftrace"
        empty.write_bytes(b"")
        with pytest.raises(AnalysisError):
            load(empty)
        assert gc.isenabled() is collector_on
        assert seen == [False, False]
    finally:
        gc.enable()
