# SPDX-License-Identifier: Apache-2.0
"""Analysis benchmarks: `brickscope report` on big traces, and the choice of engine.

Example::

    python benchmarks/analysis.py pipeline --spans 1000000     # file -> report, stages and peak RSS
    python benchmarks/analysis.py reader --spans 50000         # reading: ReadableSpans vs SpanRecords
    python benchmarks/analysis.py engines --spans 200000       # numpy vs pure Python (vs polars)
    python benchmarks/analysis.py pipeline --spans 1000000 --json
    python benchmarks/analysis.py pipeline --trace big.pftrace --no-pure-python   # a file written before
    python benchmarks/analysis.py scale --with-100m --json-out scale.json         # Parquet, 1M -> 100M

Sections:

- ``pipeline``: a decode-like trace of N spans (2 ranks x 2 GPUs, steps > layers >
  bricks > GPU-timed kernels, an all-reduce on a second stream) written once as a
  ``.pftrace`` (not timed), then analysed in a fresh interpreter the way
  ``brickscope report --format json`` does: read + build the table (``load``),
  ``analyse``, ``render``. Wall time of each stage, the child's CPU time and peak RSS.
- ``live``: what a live session's report table costs per resolved span: the copy on
  the resolving thread and the conversion into rows a batch later (best of 15).
- ``reader``: the reading part of ``load`` alone, per span, in one process (ratios
  survive load): ``open_spans`` into ``TableBuilder.add_all`` (ReadableSpans, the
  way ``load`` read before) against ``open_records`` into ``add_records`` (what
  ``load`` does), best of 3 in CPU time, on the ``.pftrace`` and on the OTLP JSON of
  the same spans.
- ``engines``: the same trace's table (built once in memory), analysed by each
  engine: the numpy backend, the pure-Python backend, and polars (when installed)
  computing the per-operation section (count, sums, exact nearest-rank p50/p90/p99,
  max), the part they can be compared on line by line. Ratios survive machine load;
  absolute times do not.
- ``scale``: analysis past one machine's memory. For each size (1M, 10M spans; 100M with
  ``--with-100m``) a Parquet dataset partitioned by rank is generated in a temporary
  directory (``benchmarks/_spangen.py``: vectorised, a row group at a time), its bytes a
  span counted, then ``brickscope report --format json`` run on it with each engine:
  DuckDB at every size, the in-memory engine up to ``--memory-max`` spans when the
  machine's available memory holds its ~0.75 KB a span, Spark (local mode) at
  ``--spark-at`` spans when pyspark and Java are there. Each command's wall time and the
  peak memory of its whole process tree (``benchmarks/_treerss.py``), the load average
  beside each, whether the engines' reports agree, and how each grows from size to size.
  The dataset is deleted after each size.

Requires brickscope[analysis] and brickscope-exporter-perfetto; ``scale`` brickscope[parquet]
and brickscope[duckdb] (and pyspark for its Spark figure).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan

from brickscope.testing import make_span
from brickscope.trace import attributes as A

T0 = 1_700_000_000_000_000_000
LAYERS = 4
BRICKS = [
    ("rms_norm", "norm", 7),
    ("qkv_projection", "attention", 7),
    ("attention_score", "attention", 7),
    ("o_proj", "attention", 7),
    ("all_reduce", "communication", 9),
    ("ffn_up", "ffn", 7),
    ("ffn_down", "ffn", 7),
]
SPANS_PER_STEP = 1 + LAYERS * (1 + 2 * len(BRICKS))  # step, layers, a brick and a kernel each
_RESOURCES = [
    Resource(
        {
            "service.name": "bench",
            A.RANK: rank,
            A.HOST_NAME: "node",
            A.GPU_DEVICE_NAMES: ("NVIDIA H100 80GB HBM3",) * 2,
        }
    )
    for rank in range(2)
]


def make_spans(count: int, seed: int = 1) -> Iterator[ReadableSpan]:
    """``count`` spans of decode steps alternating between two ranks, GPU-timed (us jitter)."""
    rng = random.Random(seed)
    span_id, made, step, clock = 1, 0, 0, [T0, T0]
    while made < count:
        for rank in (0, 1):
            resource, device = _RESOURCES[rank], rank
            step_id, step_start = span_id, clock[rank]
            span_id += 1
            t = step_start
            children = []
            for layer in range(LAYERS):
                layer_id, layer_start = span_id, t
                span_id += 1
                for name, category, stream in BRICKS:
                    duration = rng.randint(20_000, 60_000) * (10 if step == 0 else 1)  # a slow warm-up step
                    common = {
                        A.STEP_NUMBER: step,
                        A.LAYER_INDEX: layer,
                        A.CLOCK: A.CLOCK_CUDA,
                        A.GPU_DEVICE_ID: device,
                        A.GPU_STREAM_ID: stream,
                        A.BRICK_NAME: name,
                        A.BRICK_CATEGORY: category,
                    }
                    start = t if stream == 7 else t - duration // 2  # the all-reduce overlaps the brick before
                    brick = {
                        **common,
                        A.SCOPE_KIND: "brick",
                        A.BRICK_SELF_DURATION_NS: duration,
                        A.BRICK_ELEMENTS: 4096,
                        A.WORK_BYTES: 8 << 20,
                        A.WORK_FLOPS: 2e9,
                    }
                    children.append(
                        make_span(
                            span_id, name, start, start + duration, layer_id, attributes=brick, resource=resource
                        )
                    )
                    kernel = {**common, A.SCOPE_KIND: "kernel", A.KERNEL_NAME: f"{name}_kernel"}
                    children.append(
                        make_span(
                            span_id + 1,
                            f"{name}_kernel",
                            start + 1000,
                            start + duration - 1000,
                            span_id,
                            attributes=kernel,
                            resource=resource,
                        )
                    )
                    span_id += 2
                    t = max(t, start + duration) + rng.randint(0, 5_000)
                children.append(
                    make_span(
                        layer_id,
                        "layer",
                        layer_start,
                        t,
                        step_id,
                        resource=resource,
                        attributes={
                            A.SCOPE_KIND: "layer",
                            A.LAYER_INDEX: layer,
                            A.STEP_NUMBER: step,
                            A.CLOCK: A.CLOCK_CUDA,
                        },
                    )
                )
            clock[rank] = t + 10_000
            yield make_span(
                step_id,
                "step",
                step_start,
                t,
                None,
                resource=resource,
                attributes={A.SCOPE_KIND: "step", A.STEP_NUMBER: step, A.CLOCK: A.CLOCK_CUDA, A.STEP_TOKENS: 8},
            )
            yield from children
            made += SPANS_PER_STEP
        step += 1


def write_pftrace(path: str, count: int) -> None:
    from brickscope.exporter.perfetto import PerfettoSpanExporter

    exporter = PerfettoSpanExporter(path)
    batch: list[ReadableSpan] = []
    for span in make_spans(count):
        batch.append(span)
        if len(batch) == 4096:
            exporter.export(batch)
            batch = []
    exporter.export(batch)
    exporter.shutdown()


def _child_pipeline(path: str, backend: str) -> dict[str, Any]:
    """Run in a fresh interpreter: what `brickscope report --format json` does, timed by stage."""
    from brickscope.analysis import analyse, load, render

    t0 = time.perf_counter()
    table = load(path, backend=backend)
    t1 = time.perf_counter()
    report = analyse(table)
    t2 = time.perf_counter()
    text = render(report, "json")
    t3 = time.perf_counter()
    from brickscope import native

    return {
        "implementations": {part: found.in_use for part, found in native.implementations().items()},
        "spans": table.rows,
        "load_s": t1 - t0,
        "analyse_s": t2 - t1,
        "render_s": t3 - t2,
        "total_s": t3 - t0,
        "json_bytes": len(text),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        # CPU seconds of the whole child (start-up included): what load does not inflate
        "cpu_s": time.process_time(),
    }


def pipeline(spans: int, backend: str, pure_python: bool = True, trace: str | None = None) -> dict[str, Any]:
    """The pipeline with the C accelerators as installed, then (unless ``pure_python`` is
    False: at 10M it takes minutes) with ``BRICKSCOPE_PURE_PYTHON=1``, on the same file.
    ``trace``: a file written before by :func:`write_pftrace` (writing 10M spans takes
    longer than reading them), analysed instead of a new one."""

    def child(path: str, **env: str) -> dict[str, Any]:
        out = subprocess.run(
            [sys.executable, __file__, "_child", path, backend],
            capture_output=True, text=True, check=True, env={**os.environ, **env},
        )  # fmt: skip
        return json.loads(out.stdout)

    with tempfile.TemporaryDirectory() as directory:
        path = trace or os.path.join(directory, "trace.pftrace")
        started = time.perf_counter()
        if trace is None:
            write_pftrace(path, spans)
        written = time.perf_counter() - started
        size = os.path.getsize(path)
        result = child(path)
        pure = child(path, BRICKSCOPE_PURE_PYTHON="1") if pure_python else None
    result.update(
        file_mb=size / 1e6, write_s=written, backend=backend, spans_per_s=result["spans"] / result["total_s"]
    )
    if pure is not None:
        result["pure_python"] = pure
        result["accelerator_speedup_total"] = pure["total_s"] / result["total_s"]
    return result


def reader(spans: int, repeats: int = 3) -> dict[str, Any]:
    """Seconds per span to read into the table: via ReadableSpans, and via SpanRecords."""
    from brickscope.analysis._table import TableBuilder
    from brickscope.offline import open_records, open_spans

    def via_spans(path: str) -> None:
        with open_spans(path) as stream:
            TableBuilder().add_all(stream)

    def via_records(path: str) -> None:
        with open_records(path) as stream:
            TableBuilder().add_records(stream)

    results: dict[str, Any] = {"spans": spans}
    with tempfile.TemporaryDirectory() as directory:
        files = {"pftrace": os.path.join(directory, "trace.pftrace"), "otlp": os.path.join(directory, "trace.json")}
        write_pftrace(files["pftrace"], spans)
        write_otlp_json(files["otlp"], spans)
        for fmt, path in files.items():
            for how, read in (("spans", via_spans), ("records", via_records)):
                best = 1e18
                for _ in range(repeats):  # CPU time of this process: other processes' load does not count
                    started = time.process_time()
                    read(path)
                    best = min(best, time.process_time() - started)
                results[f"{fmt}_via_{how}_us_per_span"] = best / spans * 1e6
            results[f"{fmt}_speedup"] = (
                results[f"{fmt}_via_spans_us_per_span"] / results[f"{fmt}_via_records_us_per_span"]
            )
    return results


def write_otlp_json(path: str, count: int) -> None:
    """OTLP JSON Lines (hex ids, as the Collector's file exporter writes), a request per 4096 spans."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    def hex_ids(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") else hex_ids(v)
                for k, v in value.items()
            }
        return [hex_ids(v) for v in value] if isinstance(value, list) else value

    with open(path, "w") as out:
        batch: list[ReadableSpan] = []
        for span in make_spans(count):
            batch.append(span)
            if len(batch) == 4096:
                out.write(json.dumps(hex_ids(MessageToDict(encode_spans(batch)))) + "\n")
                batch = []
        if batch:
            out.write(json.dumps(hex_ids(MessageToDict(encode_spans(batch)))) + "\n")


def engines(spans: int, backends: list[str]) -> dict[str, Any]:
    """Build the table from generated spans (no file), then time each engine on it."""
    from brickscope.analysis import analyse, get_backend
    from brickscope.analysis._table import TableBuilder

    builder = TableBuilder()
    started = time.perf_counter()
    builder.add_all(make_spans(spans))
    build_s = time.perf_counter() - started
    results: dict[str, Any] = {"spans": builder.rows, "spans_to_rows_s": build_s}
    for name in (b for b in backends if b != "polars"):
        table = builder.build(backend=get_backend(name))
        started = time.perf_counter()
        analyse(table)
        results[f"{name}_analyse_s"] = time.perf_counter() - started
        started = time.perf_counter()
        _operations_only(table)
        results[f"{name}_operations_s"] = time.perf_counter() - started
    if "polars" in backends or not backends:
        try:
            results["polars_operations_s"] = _polars_operations(builder.build(backend=get_backend("numpy")))
        except ImportError:
            results["polars_operations_s"] = None
    if "python_analyse_s" in results and "numpy_analyse_s" in results:
        results["python_over_numpy_analyse"] = results["python_analyse_s"] / results["numpy_analyse_s"]
    results["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return results


def live(repeats: int = 15) -> dict[str, Any]:
    """What a live session's report table costs per resolved span: the copy made on the
    resolving thread (``TableBuilder.add``) and the batch conversion into rows, best of ``repeats``."""
    import timeit

    from brickscope.analysis._table import TableBuilder

    span = next(s for s in make_spans(SPANS_PER_STEP) if s.name == "rms_norm")
    attributes = dict(span.attributes)
    builder = TableBuilder()
    add_ns = min(timeit.repeat(lambda: builder.add(span, attributes), number=4096, repeat=repeats)) / 4096 * 1e9
    flush_ns = 1e18
    for _ in range(repeats):
        builder = TableBuilder()
        for _ in range(16_383):  # one short of a batch: the flush is timed alone
            builder.add(span, attributes)
        started = time.perf_counter()
        builder._flush()
        flush_ns = min(flush_ns, (time.perf_counter() - started) / 16_383 * 1e9)
    return {"add_ns_per_span": add_ns, "to_row_ns_per_span": flush_ns, "total_ns_per_span": add_ns + flush_ns}


def _operations_only(table: Any) -> Any:
    from brickscope.analysis import _operations

    return _operations.operations(table)


def _polars_operations(table: Any) -> float:
    """The per-operation section with polars: group by op, count, sums, exact nearest-rank quantiles, max."""
    import polars as pl

    frame = pl.DataFrame({name: table[name] for name in ("op", "kind", "self", "duration", "elements", "bytes")})
    started = time.perf_counter()
    (
        frame.filter(pl.col("kind").is_in([3, 4]))
        .group_by("op")
        .agg(
            pl.len().alias("count"),
            pl.col("duration").sum(),
            pl.col("self").sum().alias("self_sum"),
            pl.col("elements").sum(),
            pl.col("bytes").sum(),
            *(
                pl.col("self").quantile(q, interpolation="higher").alias(f"p{int(q * 100)}")
                for q in (0.5, 0.9, 0.99)
            ),
            pl.col("self").max().alias("max"),
        )
    )
    return time.perf_counter() - started


SIZES = {"1M": 1_000_000, "10M": 10_000_000, "100M": 100_000_000}
#: Disk a span needs while a size is measured: the dataset (target <= 40 B) with room to spare.
DISK_BYTES_PER_SPAN = 60
#: Memory a span takes in the in-memory engine (this file's ``pipeline`` section: ~0.67 KB).
MEMORY_ENGINE_BYTES_PER_SPAN = 750


def _available_memory_bytes() -> int:
    with open("/proc/meminfo") as meminfo:
        return next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:"))


def _engines_at(spans: int, memory_max: int, spark_at: int) -> dict[str, str | None]:
    """Each engine to run at this size (as asked: the dataset holds a few more, whole
    steps), or the reason it is not run."""
    import importlib.util
    import shutil

    engines: dict[str, str | None] = {"duckdb": None}
    needed = spans * MEMORY_ENGINE_BYTES_PER_SPAN
    if spans > memory_max:
        engines["memory"] = f"above --memory-max {memory_max:,}"
    elif needed > 0.8 * _available_memory_bytes():
        engines["memory"] = f"needs ~{needed / 1e9:.1f} GB, {_available_memory_bytes() / 1e9:.1f} GB available"
    else:
        engines["memory"] = None
    if spans != spark_at:
        engines["spark"] = f"run at {spark_at:,} spans only (--spark-at)"
    elif importlib.util.find_spec("pyspark") is None or shutil.which("java") is None:
        engines["spark"] = "pyspark or java not installed"
    else:
        engines["spark"] = None
    return engines


def _first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two reports' JSON differ (floats to 1e-9 relative), or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key in ("sources", "engine"):  # the command's inputs and engine, not figures
                continue
            found = _first_difference(a.get(key), b.get(key), f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} against {len(b)} entries"
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := _first_difference(x, y, f"{path}[{i}]"))), None)
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= 1e-9 * max(abs(a), abs(b)):
            return None
    return None if a == b else f"{path}: {a!r} against {b!r}"


def scale(
    sizes: list[int], ranks: int, directory: str, memory_max: int, spark_at: int, cap_gb: float | None
) -> dict[str, Any]:
    """Generate each size's dataset, run ``report`` with each engine on it, delete it. A
    report whose processes pass ``cap_gb`` (default: 90 % of the memory available when it
    starts) is killed."""
    import platform
    import shutil
    from importlib.metadata import PackageNotFoundError, version

    from _treerss import run_measured

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    results: dict[str, Any] = {
        "ranks": ranks,
        "cpus": os.cpu_count(),
        "memory_gb": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9,
        "versions": {
            "python": platform.python_version(),
            **{name: installed(name) for name in ("pyarrow", "duckdb", "pyspark")},
        },
        "sizes": [],
    }
    for spans in sizes:
        free = shutil.disk_usage(directory).free
        if free < spans * DISK_BYTES_PER_SPAN:
            need = spans * DISK_BYTES_PER_SPAN / 1e9
            raise SystemExit(f"{directory}: {free / 1e9:.1f} GB free, {spans:,} spans need {need:.1f} GB")
        work = tempfile.mkdtemp(prefix="brickscope-scale-", dir=directory)
        try:
            root, out = os.path.join(work, "dataset"), os.path.join(work, "out")
            load = os.getloadavg()[0]
            made = run_measured([sys.executable, __file__, "_generate", root, str(spans), str(ranks)], out)
            if made["rc"] != 0:
                raise SystemExit(f"generating {spans:,} spans failed: {' '.join(made['stderr_tail'])}")
            with open(out) as written:
                size: dict[str, Any] = json.load(written)
            size["bytes_per_span"] = size["bytes"] / size["spans"]
            size["generate"] = {**_figures(made), "load_average": load}
            size["engines"], reports = {}, {}
            for engine, skipped in _engines_at(spans, memory_max, spark_at).items():
                if skipped:
                    size["engines"][engine] = {"skipped": skipped}
                    continue
                load = os.getloadavg()[0]
                command = ["report", root, "--engine", engine, "--format", "json"]
                cap_mb = cap_gb * 1024 if cap_gb else 0.9 * _available_memory_bytes() / 2**20
                measured = run_measured([sys.executable, "-m", "brickscope", *command], out, rss_cap_mb=cap_mb)
                after = os.getloadavg()[0]
                size["engines"][engine] = {**_figures(measured), "load_average": load, "load_average_after": after}
                if measured["rc"] == 0:
                    with open(out) as report:
                        reports[engine] = json.load(report)
                else:
                    why = [measured["killed"]] if measured["killed"] else measured["stderr_tail"]
                    size["engines"][engine]["error"] = why
            if "duckdb" in reports:
                size["agreement"] = {
                    f"duckdb_vs_{other}": _first_difference(reports["duckdb"], reports[other]) or "same figures"
                    for other in reports
                    if other != "duckdb"
                }
        finally:
            shutil.rmtree(work)
        results["sizes"].append(size)
    results["growth"] = _growth(results["sizes"])
    return results


def _figures(measured: dict[str, Any]) -> dict[str, Any]:
    return {key: measured[key] for key in ("rc", "wall_s", "cpu_s", "peak_rss_mb", "tree_rss_mb", "max_process_rss_mb")}


def _growth(sizes: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per engine, from each size to the next it ran at: the factor on spans, wall time and peak memory."""
    growth: dict[str, list[dict[str, Any]]] = {}
    for engine in ("generate", "duckdb", "memory", "spark"):
        ran = [(s["spans"], s[engine] if engine == "generate" else s["engines"][engine]) for s in sizes]
        ran = [(spans, m) for spans, m in ran if m.get("rc") == 0]
        growth[engine] = [
            {
                "from_spans": a_spans,
                "to_spans": b_spans,
                "spans": b_spans / a_spans,
                "wall": b["wall_s"] / a["wall_s"],
                "peak_rss": b["peak_rss_mb"] / a["peak_rss_mb"],
            }
            for (a_spans, a), (b_spans, b) in zip(ran, ran[1:])
        ]
    return growth


def _scale_table(results: dict[str, Any]) -> str:
    lines = [
        "| spans | what | wall | CPU | peak RSS (tree) | load avg | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in results["sizes"]:
        gen = size["generate"]
        lines.append(
            f"| {size['spans']:,} | generate ({size['files']} files, {size['bytes'] / 1e6:,.0f} MB, "
            f"{size['bytes_per_span']:.1f} B/span) | {gen['wall_s']:.1f} s | {gen['cpu_s']:.1f} s | "
            f"{gen['peak_rss_mb']:,.0f} MB | {gen['load_average']:.1f} | |"
        )
        for engine, m in size["engines"].items():
            if "skipped" in m:
                lines.append(f"| {size['spans']:,} | report, {engine} | - | - | - | - | not run: {m['skipped']} |")
                continue
            note = "; ".join(m.get("error", [])) or size.get("agreement", {}).get(f"duckdb_vs_{engine}", "")
            lines.append(
                f"| {size['spans']:,} | report, {engine} | {m['wall_s']:.1f} s | {m['cpu_s']:.1f} s | "
                f"{m['peak_rss_mb']:,.0f} MB | {m['load_average']:.1f}-{m['load_average_after']:.1f} | {note} |"
            )
    for engine, steps in results["growth"].items():
        for g in steps:
            lines.append(
                f"growth {engine} {g['from_spans']:,} -> {g['to_spans']:,} spans (x{g['spans']:.1f}): "
                f"wall x{g['wall']:.2f}, peak RSS x{g['peak_rss']:.2f}"
            )
    return "\n".join(lines)


def _size(text: str) -> int:
    """1M, 10M, 100M, or a number of spans."""
    return SIZES[text] if text in SIZES else int(text.replace("_", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("section", choices=("pipeline", "reader", "engines", "live", "scale", "_child", "_generate"))
    parser.add_argument("args", nargs="*")
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--backend", default="numpy", choices=("numpy", "python"))
    parser.add_argument(
        "--engines", default="numpy,python,polars", help="engines section: which to run (comma-separated)"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--no-pure-python", action="store_true", help="pipeline: skip the BRICKSCOPE_PURE_PYTHON=1 run"
    )
    parser.add_argument("--trace", help="pipeline: analyse this file (written before by write_pftrace)")
    parser.add_argument("--sizes", default="1M,10M", help="scale: sizes in spans (1M, 10M, 100M or a number)")
    parser.add_argument("--with-100m", action="store_true", help="scale: add 100M spans (the target; ~4 GB of disk)")
    parser.add_argument("--ranks", type=int, default=8, help="scale: ranks (one directory of files each)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="scale: where the datasets go (deleted after)")
    parser.add_argument("--memory-max", default="10M", help="scale: largest size the in-memory engine runs at")
    parser.add_argument("--spark-at", default="10M", help="scale: the size Spark runs at")
    parser.add_argument("--json-out", help="scale: also write the results as JSON to this file")
    parser.add_argument(
        "--memory-cap-gb", type=float, help="scale: kill a report past this memory (default: 90%% of what is available)"
    )
    args = parser.parse_args()
    if args.section == "_child":
        print(json.dumps(_child_pipeline(*args.args)))
        return
    if args.section == "_generate":
        from _spangen import write_dataset

        root, spans, ranks = args.args
        print(json.dumps(write_dataset(root, int(spans), ranks=int(ranks))))
        return
    if args.section == "scale":
        try:
            sizes = [_size(s) for s in args.sizes.split(",")] + ([SIZES["100M"]] if args.with_100m else [])
            memory_max, spark_at = _size(args.memory_max), _size(args.spark_at)
        except (KeyError, ValueError) as error:
            parser.exit(2, f"analysis.py: error: sizes are 1M, 10M, 100M or a number of spans: {error}\n")
        result = scale(sizes, args.ranks, args.dir, memory_max, spark_at, args.memory_cap_gb)
        if args.json_out:
            with open(args.json_out, "w") as out:
                json.dump(result, out, indent=1)
        print(json.dumps(result) if args.json else _scale_table(result))
        return
    if args.section == "pipeline":
        result = pipeline(args.spans, args.backend, pure_python=not args.no_pure_python, trace=args.trace)
    elif args.section == "live":
        result = live()
    elif args.section == "reader":
        result = reader(args.spans)
    else:
        result = engines(args.spans, args.engines.split(","))
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>28}: {value:.4g}" if isinstance(value, float) else f"{key:>28}: {value}")


if __name__ == "__main__":
    main()
