# SPDX-License-Identifier: Apache-2.0
"""write_chrome_trace: spans as Chrome trace JSON (catapult's Trace Event Format)."""

from __future__ import annotations

import io
import json

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event

from brickscope.offline import write_chrome_trace
from brickscope.testing import MAIN_THREAD, gpu_attributes, make_span
from brickscope.trace import attributes as A

T0 = 1_700_000_000_000_000_000
PROCESS = Resource({"service.name": "decoder", "process.pid": 4242})
RANK1 = Resource({"service.name": "decoder", A.RANK: 1})
MAIN = f"MainThread ({MAIN_THREAD[A.THREAD_ID]})"


def _spans():
    step = {A.SCOPE_KIND: "step", **MAIN_THREAD}
    brick = {A.SCOPE_KIND: "brick", A.BRICK_CATEGORY: "attention", "shape": (2, 64), **MAIN_THREAD}
    return [
        make_span(1, "step", T0, T0 + 5000, attributes=step, resource=PROCESS),
        make_span(
            2, "attention", T0 + 1000, T0 + 2500, 1, attributes=brick, resource=PROCESS,
            events=[Event("eos", {"token": 50256}, timestamp=T0 + 1500)],
        ),
        make_span(
            3, "gemm", T0 + 1200, T0 + 2201, 2, resource=PROCESS,
            attributes=gpu_attributes(T0 + 1100, 30, 1001, device=1, stream=7),
        ),
        # starts inside the step and ends after it: cannot nest on the step's thread
        make_span(4, "late", T0 + 4000, T0 + 6000, attributes=dict(MAIN_THREAD), resource=PROCESS),
        make_span(5, "r1work", T0 + 500, T0 + 700, attributes={A.THREAD_ID: 7}, resource=RANK1),
        make_span(6, "otel", T0 + 7000, T0 + 8000, resource=RANK1),  # a user's span: no thread.id
    ]  # fmt: skip


def _write(spans) -> tuple[str, dict]:
    out = io.BytesIO()
    count = write_chrome_trace(spans, out)
    assert count == len(spans)
    text = out.getvalue().decode()
    return text, json.loads(text, parse_constant=lambda name: _not_json(name))


def _not_json(name):
    raise AssertionError(f"not JSON: {name}")


def test_complete_events_in_microseconds_sorted_with_pid_tid_and_lanes():
    text, trace = _write(_spans())
    assert trace["displayTimeUnit"] == "ns"
    assert trace["otherData"]["time_origin_unix_ns"] == T0
    complete = [(e["name"], e["ts"], e["dur"], e["pid"], e["tid"]) for e in trace["traceEvents"] if e["ph"] == "X"]
    # ts from the earliest start (T0), ns / 1000; tids numbered in order of first use:
    # 1 the main thread, 2 rank 1's thread 7, 3 GPU 1 stream 7, 4 the main thread's overflow lane,
    # 5 rank 1's spans without a thread
    assert complete == [
        ("step", 0.0, 5.0, 1, 1),
        ("r1work", 0.5, 0.2, 2, 2),
        ("attention", 1.0, 1.5, 1, 1),
        ("gemm", 1.2, 1.001, 1, 3),
        ("late", 4.0, 2.0, 1, 4),
        ("otel", 7.0, 1.0, 2, 5),
    ]
    assert '"ts":1.200,"dur":1.001,' in text  # exact nanoseconds, written as decimals


def test_categories_args_and_instant_events():
    _, trace = _write(_spans())
    by_name = {e["name"]: e for e in trace["traceEvents"] if e["ph"] in "Xi"}
    assert [by_name[n]["cat"] for n in ("step", "attention", "gemm", "r1work")] == [
        "step", "attention", "attention", "internal"
    ]  # fmt: skip
    assert by_name["attention"]["args"]["shape"] == [2, 64]
    assert by_name["gemm"]["args"][A.GPU_DURATION_NS] == 1001
    eos = by_name["eos"]
    assert (eos["ph"], eos["s"], eos["ts"], eos["pid"], eos["tid"], eos["args"]) == ("i", "t", 1.5, 1, 1, {"token": 50256})


def test_metadata_names_processes_and_threads_gpu_lanes_last():
    _, trace = _write(_spans())
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    assert trace["traceEvents"][: len(meta)] == meta  # metadata first
    processes = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert processes == {1: "decoder pid 4242", 2: "decoder rank 1"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert threads == {
        (1, 1): MAIN, (2, 2): "thread 7", (1, 3): "GPU 1 stream 7", (1, 4): f"{MAIN} (overlap 1)",
        (2, 5): "spans without thread.id",
    }  # fmt: skip
    order = {e["tid"]: e["args"]["sort_index"] for e in meta if e["name"] == "thread_sort_index" and e["pid"] == 1}
    assert order[3] > max(order[1], order[4])


def test_nan_attribute_is_text_not_an_invalid_number():
    span = make_span(1, "x", T0, T0 + 1, attributes={"loss": float("nan"), "xs": (1.0, float("inf"))})
    _, trace = _write([span])
    args = next(e for e in trace["traceEvents"] if e["ph"] == "X")["args"]
    assert (args["loss"], args["xs"]) == ("nan", [1.0, "inf"])


def test_no_spans_is_an_empty_valid_trace():
    out = io.BytesIO()
    assert write_chrome_trace([], out) == 0
    assert json.loads(out.getvalue())["traceEvents"] == []
