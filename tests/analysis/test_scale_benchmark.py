# SPDX-License-Identifier: Apache-2.0
"""benchmarks/analysis.py scale: the Parquet datasets it generates (benchmarks/_spangen.py)
are in the format's schema, partitioned by rank, and hold a consistent span tree (figures
by hand); its memory readings (benchmarks/_treerss.py) and its comparison of two engines'
reports say what happened."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from brickscope.offline import parquet_schema  # noqa: E402 (after the skip: needs pyarrow)

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


spangen = _load("_spangen")
treerss = _load("_treerss")
bench = _load("analysis")

# 2 layers: a step is 1 step + 2 layers x (1 layer + 11 bricks + 12 kernels) + 4 bricks
# (embedding, final_norm, lm_head, sampling) + 3 kernels = 56 spans
LAYERS, PER_STEP = 2, 56


@pytest.fixture(name="dataset", scope="module")
def _dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("dataset")
    # 200 spans over 2 ranks of 56-span steps: 2 steps a rank (224 spans); a row group a step
    info = spangen.write_dataset(str(root), 200, ranks=2, layers=LAYERS, row_group_rows=60)
    return root, info


def _rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def test_sizes_by_hand(dataset):
    root, info = dataset
    assert spangen.spans_per_step(LAYERS) == PER_STEP
    assert spangen.spans_per_step(32) == 776
    assert info["spans"] == 224 and info["steps_per_rank"] == 2 and info["files"] == 2
    assert info["bytes"] == sum(p.stat().st_size for p in root.rglob("*.parquet"))
    # 2 + 13 brick names + the pools: 32 + 16 + 16 + 4 + 16 + 8 + 96 + 6
    assert spangen.distinct_names() == 209


def test_files_match_the_schema_and_are_partitioned_by_rank(dataset):
    root, _ = dataset
    files = sorted(root.rglob("*.parquet"))
    assert [p.relative_to(root).as_posix() for p in files] == [
        "rank-000/part-00000.parquet",
        "rank-001/part-00000.parquet",
    ]
    schema = parquet_schema()
    for rank, path in enumerate(files):
        parquet = pq.ParquetFile(path)
        assert parquet.schema_arrow.equals(schema, check_metadata=False)
        assert parquet.schema_arrow.metadata[b"brickscope.schema_version"] == b"1"
        assert parquet.metadata.num_row_groups == 2 and parquet.metadata.row_group(0).num_rows == PER_STEP
        table = parquet.read()
        for field in schema:
            if not field.nullable:
                assert table[field.name].null_count == 0, field.name
        assert set(table["rank"].to_pylist()) == {str(rank)}
        assert set(table["host_name"].to_pylist()) == {"gpu-node-00"}
        assert set(table["pid"].to_pylist()) == {4100 + rank}


def test_the_span_tree_is_consistent(dataset):
    root, _ = dataset
    rows = [row for path in sorted(root.rglob("*.parquet")) for row in _rows(path)]
    by_id = {row["span_id"]: row for row in rows}
    assert len(by_id) == 224  # ids distinct
    expected_parent = {"kernel": {"brick"}, "brick": {"layer", "step"}, "layer": {"step"}}
    for row in rows:
        if row["kind"] == "step":
            assert row["parent_span_id"] == 0
            continue
        parent = by_id[row["parent_span_id"]]
        assert parent["kind"] in expected_parent[row["kind"]]
        assert parent["trace_id"] == row["trace_id"] and parent["rank"] == row["rank"]
        assert parent["step"] == row["step"]
        assert parent["start_ns"] <= row["start_ns"] < row["end_ns"] <= parent["end_ns"]
    for rank in ("0", "1"):
        for step in (0, 1):
            kinds = [r["kind"] for r in rows if r["rank"] == rank and r["step"] == step]
            assert (kinds.count("step"), kinds.count("layer"), kinds.count("brick"), kinds.count("kernel")) == (
                1,
                2,
                26,
                27,
            )
            # one trace a step
            assert len({r["trace_id"] for r in rows if r["rank"] == rank and r["step"] == step}) == 1
        steps = sorted((r for r in rows if r["rank"] == rank and r["kind"] == "step"), key=lambda r: r["step"])
        assert steps[0]["end_ns"] < steps[1]["start_ns"]


def test_bricks_kernels_and_communication(dataset):
    root, _ = dataset
    rows = _rows(root / "rank-000" / "part-00000.parquet")
    compute, comm = spangen.Process(0, 2).streams
    for row in rows:
        gpu = row["name"] != "sampling" and not (row["kind"] == "kernel" and row["brick_name"] == "sampling")
        assert row["clock"] == ("cuda" if gpu else "host")
        if row["kind"] in ("brick", "kernel") and gpu:
            assert row["device_ordinal"] == 0 and row["device_model"] == "NVIDIA H100 80GB HBM3"
            assert row["stream"] == (comm if row["category"] == "communication" else compute)
            assert row["gpu_duration_ns"] == row["end_ns"] - row["start_ns"]
        else:
            assert row["device_ordinal"] is None and row["stream"] is None
        assert row["start_ns"] % 500 == 0 or not gpu  # the CUDA events' 0.5 us grid
        assert row["tokens"] == (256 if row["kind"] == "step" else None)
        if row["kind"] == "brick":
            assert row["self_ns"] == row["end_ns"] - row["start_ns"]
            assert row["elements"] == 256 * 4096 and row["dtype"] == "bfloat16"
        if row["kind"] == "kernel":
            assert len(row["kernel_grid"]) == 3 and row["kernel_name"] == row["name"]
    qkv = [r for r in rows if r["name"] == "qkv_projection"]
    assert len(qkv) == 4  # a layer each, 2 layers, 2 steps
    # weights 4096 x (3 x 4096 / 8): bytes = 4096 * 1536 * 2; flops = 2 * 256 tokens * 4096 * 1536
    assert {(r["bytes"], r["flops"]) for r in qkv} == {(12_582_912, 3_221_225_472.0)}
    norms = [r for r in rows if r["name"] == "rms_norm"]
    assert {(r["bytes"], r["flops"]) for r in norms} == {(256 * 4096 * 4, None)}
    # an all-reduce starts before the brick before it (o_proj, ffn_down) ends: half overlaps
    step0 = [r for r in rows if r["step"] == 0 and r["kind"] == "brick"]
    for i, row in enumerate(step0):
        if row["name"] == "all_reduce":
            assert row["category"] == "communication"
            assert step0[i - 1]["name"] in ("o_proj", "ffn_down")
            assert row["start_ns"] < step0[i - 1]["end_ns"]
            assert row["end_ns"] < step0[i + 1]["start_ns"]  # the next brick waits for it
    assert sum(r["name"] == "all_reduce" for r in step0) == 4


def test_the_warm_up_step_is_ten_times_slower(dataset):
    root, _ = dataset
    rows = _rows(root / "rank-000" / "part-00000.parquet")
    total = [sum(r["self_ns"] for r in rows if r["kind"] == "brick" and r["step"] == s) for s in (0, 1)]
    assert 8 < total[0] / total[1] < 12  # 10x, each brick's own jitter (sigma 0.1) apart


def test_tree_memory_counts_descendants():
    """wait4's peak is the largest process of the tree, however short its life; the /proc
    reading adds up every process alive."""
    grandchild = "x = bytearray(96 << 20); x[::4096] = b'1' * len(x[::4096])"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {grandchild!r}], check=True)"
    measured = treerss.run_measured([sys.executable, "-c", child], "/dev/null")
    assert measured["rc"] == 0 and measured["max_process_rss_mb"] >= 96
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import sys; {grandchild}; sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == b"ready\n"
        assert treerss.tree_rss_kb(holder.pid) >= 96 * 1024
    finally:
        holder.communicate(b"")


def test_the_dataset_reads_back_into_the_report(dataset):
    """brickscope's own reader takes the directory: every span, both ranks, the operations
    counted by hand, the all-reduces as communication half hidden behind compute."""
    import json

    from brickscope.analysis import analyse, load, render

    root, _ = dataset
    report = json.loads(render(analyse(load(str(root))), "json"))
    assert report["spans"] == 224 and report["dropped"] == 0
    assert [rank["name"] for rank in report["ranks"]] == ["0", "1"]
    counts = {(op["kind"], op["name"]): op["count"] for op in report["operations"]}
    # a brick of a layer: once a layer, 2 layers, 2 steps, 2 ranks; the others once a step
    assert counts[("brick", "qkv_projection")] == 8 and counts[("brick", "lm_head")] == 4
    assert counts[("brick", "rms_norm")] == counts[("brick", "all_reduce")] == 16
    assert sum(op["count"] for op in report["operations"] if op["kind"] == "kernel") == 2 * 2 * 27
    communication = report["communication"]
    assert communication["count"] == 16  # the all-reduce bricks
    # each starts half its duration (rounded down) before the compute brick before it
    # ends, less the gap between the two: a little under half is hidden
    assert 0 < communication["overlapped_ns"] < communication["exposed_ns"]


def test_a_tree_past_the_memory_cap_is_killed():
    """On a shared machine the benchmark stops a command before it takes the machine down."""
    hog = "import time; x = bytearray(160 << 20); x[::4096] = b'1' * len(x[::4096]); time.sleep(3600)"
    measured = treerss.run_measured([sys.executable, "-c", hog], "/dev/null", rss_cap_mb=64)
    assert measured["rc"] == -9 and measured["killed"] == "killed: its memory passed 64 MB"
    assert measured["peak_rss_mb"] > 64


def test_reports_compared_figure_by_figure():
    a = {"schema": 1, "sources": ["a/"], "operations": [{"name": "x", "self_ns": 10, "share": 0.1}]}
    same = {"schema": 1, "sources": ["b/"], "operations": [{"name": "x", "self_ns": 10, "share": 0.1 + 1e-17}]}
    assert bench._first_difference(a, same) is None  # the inputs' names are no figure; floats to 1e-9
    other = {**a, "operations": [{"name": "x", "self_ns": 11, "share": 0.1}]}
    assert bench._first_difference(a, other) == ".operations[0].self_ns: 10 against 11"
    assert bench._first_difference(a, {**a, "operations": []}) == ".operations: 1 against 0 entries"
    assert bench._first_difference(a, {**a, "notes": ["cut"]}) == ".notes: None against ['cut']"


def test_growth_from_size_to_size():
    def size(spans, wall, rss, rc=0):
        run = {"rc": rc, "wall_s": wall, "peak_rss_mb": rss}
        return {"spans": spans, "generate": run, "engines": {"duckdb": run, "memory": {"skipped": "why"}, "spark": run}}

    sizes = [size(1_000, 2.0, 100.0), size(10_000, 30.0, 400.0), size(100_000, 0.0, 0.0, rc=-9)]
    growth = bench._growth(sizes)
    # 10x the spans: 15x the time, 4x the memory; a killed run is no size to grow to
    assert growth["duckdb"] == [{"from_spans": 1_000, "to_spans": 10_000, "spans": 10.0, "wall": 15.0, "peak_rss": 4.0}]
    assert growth["memory"] == []
