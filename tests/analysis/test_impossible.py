# SPDX-License-Identifier: Apache-2.0
"""Impossible spans in the analysis: left out, counted by reason in the report's ``dropped``,
one stderr line naming the file; a file of nothing else is refused; and no figure of a report
is ever negative, whatever spans the input holds."""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings, strategies as st

from brickscope.cli import main
from brickscope.trace import attributes as A

T0 = 1_700_000_000_000_000_000


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"intValue": str(value)}


def _span(span_id: int, name: str, start: int | None, end: int | None, **attributes: Any) -> dict[str, Any]:
    """One OTLP JSON span; a time given as None is left out of the JSON (absent)."""
    span: dict[str, Any] = {"traceId": "0" * 31 + "1", "spanId": f"{span_id:016x}", "name": name}
    parent = attributes.pop("parent", None)
    if parent:
        span["parentSpanId"] = f"{parent:016x}"
    if start is not None:
        span["startTimeUnixNano"] = str(start)
    if end is not None:
        span["endTimeUnixNano"] = str(end)
    span["attributes"] = [{"key": k, "value": _value(v)} for k, v in attributes.items() if v is not None]
    return span


def _write(path: Path, spans: list[dict[str, Any]], resource: dict[str, Any] | None = None) -> Path:
    resource_json = {"attributes": [{"key": k, "value": _value(v)} for k, v in (resource or {}).items()]}
    request = {"resourceSpans": [{"resource": resource_json, "scopeSpans": [{"spans": spans}]}]}
    path.write_text(json.dumps(request) + "\n")
    return path


def _brick(span_id: int, name: str, start: int | None, end: int | None, self_ns: int | None = None, **extra: Any):
    attributes = {A.SCOPE_KIND: "brick", A.BRICK_NAME: name, A.BRICK_CATEGORY: "other"}
    if self_ns is not None:
        attributes[A.BRICK_SELF_DURATION_NS] = self_ns
    return _span(span_id, name, start, end, **attributes, **extra)


class TestReport:
    def test_impossible_spans_are_left_out_and_counted(self, tmp_path, capsys):
        """A span without an end and one ending before its start are counted by reason; the two
        others make the report (ffn 2000 ns of 3000: share 2/3); stderr names the file and the count."""
        path = _write(
            tmp_path / "run.jsonl",
            [
                _brick(1, "attn", T0, T0 + 1_000, 1_000),
                _brick(2, "attn", T0 + 2_000, None, 500),
                _brick(3, "ffn", T0 + 5_000, T0 + 4_000),
                _brick(4, "ffn", T0 + 6_000, T0 + 8_000, 2_000),
            ],
        )
        assert main(["report", str(path), "--format", "json"]) == 0
        captured = capsys.readouterr()
        assert captured.err.splitlines() == [
            f"{path}: 2 impossible spans left out (1 with no end time, 1 with end before start)"
        ]
        data = json.loads(captured.out)
        assert data["spans"] == 2 and data["dropped"] == 2
        assert data["dropped_by_reason"] == {"no_end_time": 1, "end_before_start": 1}
        operations = {op["name"]: op for op in data["operations"]}
        assert operations["ffn"]["self_ns"] == 2_000 and operations["ffn"]["share"] == 2_000 / 3_000
        assert operations["attn"]["count"] == 1 and operations["attn"]["self_ns"] == 1_000
        assert data["notes"] == [captured.err.strip()]

    def test_duration_attributes_are_judged(self, tmp_path, capsys):
        """Self time above the span's duration, a negative host duration and a GPU duration 2 µs
        off end - start are impossible; a GPU duration 1 µs off (rounding) is not."""
        gpu = {A.CLOCK: "cuda", A.GPU_DEVICE_ID: 0, A.GPU_STREAM_ID: 7}
        path = _write(
            tmp_path / "run.jsonl",
            [
                _brick(1, "gemm", T0, T0 + 10_000, 10_000, **gpu, **{A.GPU_DURATION_NS: 11_000}),
                _brick(2, "gemm", T0 + 20_000, T0 + 30_000, 10_001),
                _brick(3, "gemm", T0 + 40_000, T0 + 50_000, 10_000, **{A.HOST_DURATION_NS: -1}),
                _brick(4, "gemm", T0 + 60_000, T0 + 70_000, 10_000, **gpu, **{A.GPU_DURATION_NS: 12_000}),
            ],
        )
        assert main(["report", str(path), "--format", "json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["spans"] == 1
        assert data["dropped_by_reason"] == {"inconsistent_duration": 2, "negative_duration": 1}

    def test_negative_work_amounts_are_judged(self, tmp_path, capsys):
        """Negative bytes (full or short name), flops, elements or tokens would give negative
        totals and rates: each such span is left out as a negative work amount; zero is fine."""
        path = _write(
            tmp_path / "run.jsonl",
            [
                _brick(1, "gemm", T0, T0 + 10_000, 10_000, **{A.WORK_BYTES: 4_000, A.WORK_FLOPS: 0}),
                _brick(2, "gemm", T0 + 20_000, T0 + 30_000, 10_000, **{A.WORK_BYTES: -4_000}),
                _brick(3, "gemm", T0 + 40_000, T0 + 50_000, 10_000, bytes=-1),
                _brick(4, "gemm", T0 + 60_000, T0 + 70_000, 10_000, **{A.WORK_FLOPS: -2.5}),
                _brick(5, "gemm", T0 + 80_000, T0 + 90_000, 10_000, **{A.BRICK_ELEMENTS: -7}),
                _span(6, "step", T0, T0 + 95_000, **{A.SCOPE_KIND: "step", A.STEP_NUMBER: 0, A.STEP_TOKENS: -3}),
            ],
        )
        assert main(["report", str(path), "--format", "json"]) == 0
        captured = capsys.readouterr()
        assert captured.err.splitlines() == [f"{path}: 5 impossible spans left out (5 with negative work amount)"]
        data = json.loads(captured.out)
        assert data["spans"] == 1 and data["dropped_by_reason"] == {"negative_amount": 5}
        assert data["memory"]["total_bytes"] == 4_000

    def test_a_file_of_impossible_spans_is_refused(self, tmp_path, capsys):
        """Every span impossible: rc 1, one line naming the file and the counts, nothing on stdout."""
        path = _write(tmp_path / "run.jsonl", [_brick(1, "attn", T0, None), _brick(2, "attn", T0 + 9, T0 + 3)])
        assert main(["report", str(path)]) == 1
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.splitlines() == [
            f"brickscope report: {path}: every span is impossible (1 with no end time, 1 with end before start):"
            " refused"
        ]

    def test_convert_leaves_them_out_and_says_so(self, tmp_path, capsys):
        """convert writes the possible spans and prints the same line as report."""
        source = _write(tmp_path / "run.jsonl", [_brick(1, "attn", T0, T0 + 5), _brick(2, "attn", 0, T0 + 9)])
        target = tmp_path / "run.pftrace"
        assert main(["convert", str(source), "-o", str(target)]) == 0
        err = capsys.readouterr().err.splitlines()
        assert err[0] == f"{source}: 1 impossible span left out (1 with no start time)"
        assert err[1] == f"wrote 1 spans to {target}"


def _numbers(value: Any, where: str = "") -> list[tuple[str, float]]:
    """Every number of a JSON value, with its path."""
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [(where, value)]
    if isinstance(value, dict):
        return [item for key, child in value.items() for item in _numbers(child, f"{where}.{key}")]
    if isinstance(value, list):
        return [item for i, child in enumerate(value) for item in _numbers(child, f"{where}[{i}]")]
    return []


_TIME = st.one_of(st.none(), st.integers(0, 20_000).map(lambda t: T0 + t))


@st.composite
def _generated_spans(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Up to 14 spans of any shape: steps, bricks and kernels, GPU-timed or not, nested under
    earlier spans, with times possibly absent or reversed and duration and work-amount
    attributes of any sign."""
    spans = []
    for span_id in range(1, draw(st.integers(1, 14)) + 1):
        kind = draw(st.sampled_from(["step", "brick", "kernel", "other"]))
        name = draw(st.sampled_from(["gemm", "all_reduce", "p2p_comm", "rms_norm"]))
        start = draw(_TIME)
        end = draw(st.one_of(_TIME, st.integers(0, 5_000).map(lambda d, s=start: (s or T0) + d)))
        attributes: dict[str, Any] = {A.SCOPE_KIND: kind, A.CLOCK: "host"}
        if kind in ("brick", "kernel"):
            attributes[A.BRICK_NAME] = name
            attributes[A.BRICK_CATEGORY] = draw(st.sampled_from(["communication", "matmul", "other"]))
            attributes[A.BRICK_SELF_DURATION_NS] = draw(st.one_of(st.none(), st.integers(-100, 6_000)))
        if draw(st.booleans()):
            attributes.update({A.CLOCK: "cuda", A.GPU_DEVICE_ID: draw(st.integers(0, 1)), A.GPU_STREAM_ID: 7})
            attributes[A.GPU_DURATION_NS] = draw(st.one_of(st.none(), st.integers(-100, 6_000)))
        attributes[A.HOST_DURATION_NS] = draw(st.one_of(st.none(), st.integers(-100, 6_000)))
        attributes[A.STEP_NUMBER] = draw(st.one_of(st.none(), st.integers(0, 2)))
        attributes[A.STEP_TOKENS] = draw(st.one_of(st.none(), st.integers(-2, 8)))
        attributes[A.WORK_BYTES] = draw(st.one_of(st.none(), st.integers(-10, 10_000)))
        attributes[A.WORK_FLOPS] = draw(st.one_of(st.none(), st.integers(-10, 10_000), st.floats(-10.0, 1e4)))
        attributes[A.BRICK_ELEMENTS] = draw(st.one_of(st.none(), st.integers(-5, 4_096)))
        attributes["bytes"] = draw(st.one_of(st.none(), st.integers(-10, 10_000)))
        attributes[A.TILE_DURATION_NS.format("micro")] = draw(st.one_of(st.none(), st.integers(-10, 100)))
        parent = draw(st.one_of(st.none(), st.integers(1, span_id))) if span_id > 1 else None
        spans.append(_span(span_id, name, start, end, parent=parent if parent != span_id else None, **attributes))
    return spans


@settings(max_examples=60, deadline=None)
@given(spans=_generated_spans(), ranked=st.booleans())
def test_no_figure_of_a_report_is_negative(spans, ranked):
    """Whatever the spans, a report that is made has no negative number and no NaN in its JSON."""
    with tempfile.TemporaryDirectory() as folder:
        path = _write(Path(folder) / "run.jsonl", spans, {A.RANK: 0} if ranked else {"process.pid": 7})
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            status = main(["report", str(path), "--format", "json"])
        if status != 0:  # refused (nothing possible, or no brick): one line, no report
            assert len(stderr.getvalue().splitlines()) == 1 and stdout.getvalue() == ""
            return
    data = json.loads(stdout.getvalue())
    bad = [(where, n) for where, n in _numbers(data) if n < 0 or math.isnan(n)]
    assert not bad, bad
