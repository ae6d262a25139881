# SPDX-License-Identifier: Apache-2.0
"""Export benchmarks: what writing spans costs, per exporter, on the same spans.

Example::

    python benchmarks/export.py            # a table
    python benchmarks/export.py --json     # one JSON object, for docs/benchmarks.md

Sections (each a function returning a dict of results; add one to SECTIONS):

- ``pftrace``: 100,000 brickscope spans (GPU-timed kernels with their launch
  side, host-timed bricks, layers and steps) exported to a ``.pftrace`` by
  ``PerfettoSpanExporter``, against the official OTLP protobuf encoding of the
  same spans (``encode_spans(batch).SerializeToString()`` from
  ``opentelemetry-exporter-otlp-proto-common``), in batches of 512 as a
  ``BatchSpanProcessor`` would send them. Keys ``pftrace_spans_per_s``,
  ``otlp_spans_per_s``, ``pftrace_bytes_per_span``, ``otlp_bytes_per_span``.
- ``pftrace_memory``: peak RSS of a fresh process exporting 1,000,000 spans,
  and 2,000,000 to show it is flat, spans made batch by batch so only the
  exporter's own memory could grow. Keys ``peak_rss_mb_1m``, ``peak_rss_mb_2m``.
- ``parquet``: the same 100,000 spans and batches through ``ParquetSpanExporter`` (part
  files published at shutdown) and ``PerfettoSpanExporter``, alternating, best of
  ``--runs`` each, in this process. Keys ``parquet_spans_per_s``,
  ``parquet_pftrace_spans_per_s`` (the Perfetto exporter in the same run),
  ``parquet_speedup`` (the ratio, the figure to compare: target at least 1),
  ``parquet_bytes_per_span`` and, on 1,000,000 spans written by the exporter,
  ``parquet_bytes_per_span_1m`` (these spans' times are perfectly regular and cost
  almost nothing: the real runs' figures are the demo traces'); for each ``--demo-trace
  PATH`` (a ``.pftrace`` of ``examples/quickstart.py``) ``parquet_demo<i>_spans`` and
  ``parquet_demo<i>_bytes_per_span`` (the trace converted as ``brickscope convert`` does).
- ``folded``: the same spans, 1,000,000 of them, through ``FlamegraphSpanExporter``
  (GPU self time, folded plus speedscope file written at shutdown) in a freshly
  spawned interpreter. Keys ``folded_spans_per_s``, ``folded_peak_rss_mb_1m``.

Requires: brickscope, brickscope-exporter-perfetto and
opentelemetry-exporter-otlp-proto-common (the exporter's ``bench`` extra);
brickscope-exporter-parquet for ``parquet``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from brickscope.testing import make_span
from brickscope.trace import attributes as A

BATCH = 512
SPANS = 100_000
T0 = 1_700_000_000_000_000_000
_RESOURCE = Resource({"service.name": "bench", "process.pid": 4242})
_SCOPE = InstrumentationScope("brickscope", "0.1.0")
_BRICKS = [("rms_norm", "norm"), ("qkv_projection", "attention"), ("attention_score", "attention"), ("ffn_down", "ffn")]


def _span_id(i: int) -> int:
    """A random-looking 64-bit span id (the SDK draws them at random), stable for ``i``."""
    return ((i + 1) * 0x9E3779B97F4A7C15) & 0xFFFF_FFFF_FFFF_FFFF or 1


def make_spans(count: int, first: int = 0) -> Iterator[ReadableSpan]:
    """Spans as the core emits them: per layer, bricks (host) each with two GPU kernels.

    Span ``first + i`` is the same whatever the chunk, so chunks can be made lazily.
    Ids are full-width like the SDK's random ones (small ids would flatter varints).
    """
    for i in range(first, first + count):
        trace_id = (0x5DEECE66D * (1 + i // 10_000) * 0x9E3779B97F4A7C15) & ((1 << 128) - 1)
        layer, slot = divmod(i, 12)
        base = T0 + layer * 120_000
        brick_index, part = divmod(slot, 3)
        name, category = _BRICKS[brick_index]
        thread = {A.THREAD_ID: 140_000_000_000_001, A.THREAD_NAME: "MainThread"}
        common = {A.BRICK_NAME: name, A.BRICK_CATEGORY: category, A.LAYER_INDEX: layer % 32, **thread}
        start = base + brick_index * 30_000
        if part == 0:  # the brick, host-timed
            attributes = {
                A.SCOPE_KIND: A.SCOPE_KIND_BRICK,
                A.CLOCK: A.CLOCK_HOST,
                A.HOST_START_NS: start,
                A.HOST_DURATION_NS: 25_000,
                A.BRICK_ELEMENTS: 4096,
                **common,
            }
            span_start, span_end, parent = start, start + 25_000, None
        else:  # a kernel, GPU-timed: the span is the GPU interval, the launch is host-side
            gpu_start = start + 40_000 + part * 9_000
            attributes = {
                A.SCOPE_KIND: A.SCOPE_KIND_KERNEL,
                A.KERNEL_NAME: f"{name}_k{part}",
                A.KERNEL_GRID: (128, 1, 1),
                A.KERNEL_BLOCK: (256, 1, 1),
                A.CLOCK: A.CLOCK_CUDA,
                A.HOST_START_NS: start + part * 8_000,
                A.HOST_DURATION_NS: 4_000,
                A.GPU_DURATION_NS: 8_000,
                A.GPU_DEVICE_ID: 0,
                A.GPU_STREAM_ID: 0x7F3A_0000_1000,
                **common,
            }
            span_start, span_end, parent = gpu_start, gpu_start + 8_000, i - part
        yield make_span(
            _span_id(i),
            attributes.get(A.KERNEL_NAME, name),
            span_start,
            span_end,
            _span_id(parent) if parent is not None else None,
            attributes=attributes,
            resource=_RESOURCE,
            trace_id=trace_id,
            scope=_SCOPE,
        )


def _batches(spans: list[ReadableSpan]) -> list[list[ReadableSpan]]:
    return [spans[i : i + BATCH] for i in range(0, len(spans), BATCH)]


def _best_of(runs: int, fn: Callable[[], int]) -> tuple[float, int]:
    """Best wall time of ``runs`` calls, and the byte count the last call returned."""
    best, size = float("inf"), 0
    for _ in range(runs):
        started = time.perf_counter()
        size = fn()
        best = min(best, time.perf_counter() - started)
    return best, size


def pftrace(runs: int) -> dict[str, Any]:
    """Our .pftrace export against OTLP protobuf encoding, same spans, same batches."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from brickscope.exporter.perfetto import PerfettoSpanExporter

    batches = _batches(list(make_spans(SPANS)))

    def ours() -> int:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "bench.pftrace")
            with PerfettoSpanExporter(path) as exporter:
                for batch in batches:
                    exporter.export(batch)
            return os.path.getsize(path)

    def otlp() -> int:
        return sum(len(encode_spans(batch).SerializeToString()) for batch in batches)

    ours_s, ours_bytes = _best_of(runs, ours)
    otlp_s, otlp_bytes = _best_of(runs, otlp)
    return {
        "pftrace_spans_per_s": round(SPANS / ours_s),
        "otlp_spans_per_s": round(SPANS / otlp_s),
        "pftrace_bytes_per_span": round(ours_bytes / SPANS, 1),
        "otlp_bytes_per_span": round(otlp_bytes / SPANS, 1),
    }


def peak_rss_mb() -> float:
    """This process's peak resident set size, MB.

    ``VmHWM`` from /proc, not ``getrusage``: Linux keeps ``ru_maxrss`` across fork and
    exec, so a child started by a big parent would report the parent's peak.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux


def _peak_child(count: int) -> float:
    """Peak RSS (MB) of a fresh interpreter exporting ``count`` spans."""
    out = subprocess.run(
        [sys.executable, __file__, "--export-only", str(count)], check=True, capture_output=True, text=True
    )
    return float(out.stdout.strip())


def pftrace_memory(runs: int) -> dict[str, Any]:
    """Peak memory while exporting 1,000,000 spans in batches, and twice as many for comparison."""
    return {"peak_rss_mb_1m": _peak_child(1_000_000), "peak_rss_mb_2m": _peak_child(2_000_000)}


def _export_only(count: int) -> None:
    from brickscope.exporter.perfetto import PerfettoSpanExporter

    with tempfile.TemporaryDirectory() as folder:
        with PerfettoSpanExporter(os.path.join(folder, "bench.pftrace")) as exporter:
            for first in range(0, count, BATCH):
                exporter.export(list(make_spans(min(BATCH, count - first), first)))
    print(peak_rss_mb())


def _parquet_dir_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(root, f)) for root, _dirs, files in os.walk(folder) for f in files)


def parquet(runs: int, demo_traces: list[str] | None = None) -> dict[str, Any]:
    """The Parquet exporter against the Perfetto exporter: same spans, same batches, same run;
    bytes a span on the generated spans and on each of ``demo_traces`` (real runs' .pftrace)."""
    from brickscope.exporter.parquet import ParquetSpanExporter
    from brickscope.exporter.perfetto import PerfettoSpanExporter

    batches = _batches(list(make_spans(SPANS)))

    def to_parquet() -> int:
        with tempfile.TemporaryDirectory() as folder:
            with ParquetSpanExporter(os.path.join(folder, "ds")) as exporter:
                for batch in batches:
                    exporter.export(batch)
            return _parquet_dir_bytes(folder)

    def to_pftrace() -> int:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "bench.pftrace")
            with PerfettoSpanExporter(path) as exporter:
                for batch in batches:
                    exporter.export(batch)
            return os.path.getsize(path)

    best_parquet, best_pftrace, size = float("inf"), float("inf"), 0
    for _ in range(runs):  # alternating, so both see the same machine load
        seconds, size = _best_of(1, to_parquet)
        best_parquet = min(best_parquet, seconds)
        best_pftrace = min(best_pftrace, _best_of(1, to_pftrace)[0])
    results: dict[str, Any] = {
        "parquet_spans_per_s": round(SPANS / best_parquet),
        "parquet_pftrace_spans_per_s": round(SPANS / best_pftrace),
        "parquet_speedup": round(best_pftrace / best_parquet, 2),
        "parquet_bytes_per_span": round(size / SPANS, 1),
    }
    with tempfile.TemporaryDirectory() as folder:
        count = 1_000_000
        with ParquetSpanExporter(os.path.join(folder, "ds")) as exporter:
            for first in range(0, count, BATCH):
                exporter.export(list(make_spans(min(BATCH, count - first), first)))
        results["parquet_bytes_per_span_1m"] = round(_parquet_dir_bytes(folder) / count, 1)
    from brickscope.offline import ParquetSpanWriter, open_spans

    for index, trace in enumerate(demo_traces or ()):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "demo.parquet")
            with ParquetSpanWriter(path, run="demo") as writer, open_spans(trace) as spans:
                writer.write(spans)
            results[f"parquet_demo{index}_spans"] = writer.spans_written
            results[f"parquet_demo{index}_bytes_per_span"] = round(os.path.getsize(path) / writer.spans_written, 1)
    return results


def folded(runs: int) -> dict[str, Any]:
    """Folded flamegraph export (and its speedscope file) of 1,000,000 of the same spans,
    GPU-weighted, in a fresh interpreter: spans per second and peak RSS."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        spans_per_s, peak_mb = pool.apply(_folded_child, (1_000_000,))
    return {"folded_spans_per_s": round(spans_per_s), "folded_peak_rss_mb_1m": peak_mb}


def _folded_child(count: int) -> tuple[float, float]:
    """In the spawned interpreter: export ``count`` spans; only export() and shutdown() timed."""
    from brickscope.exporter.flamegraph import FlamegraphSpanExporter

    elapsed = 0.0
    with tempfile.TemporaryDirectory() as folder:
        exporter = FlamegraphSpanExporter(
            os.path.join(folder, "bench.folded"),
            "gpu",
            speedscope_path=os.path.join(folder, "bench.speedscope.json"),
            write_interval_millis=None,
        )
        for first in range(0, count, BATCH):
            batch = list(make_spans(min(BATCH, count - first), first))
            started = time.perf_counter()
            exporter.export(batch)
            elapsed += time.perf_counter() - started
        started = time.perf_counter()
        exporter.shutdown()
        elapsed += time.perf_counter() - started
    return count / elapsed, peak_rss_mb()


SECTIONS: list[Callable[[int], dict[str, Any]]] = [pftrace, pftrace_memory, parquet, folded]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=3, help="best of this many runs (default 3)")
    parser.add_argument("--export-only", type=int, metavar="N", help=argparse.SUPPRESS)
    parser.add_argument(
        "--section", action="append", choices=[s.__name__ for s in SECTIONS], help="run only these sections"
    )
    parser.add_argument(
        "--demo-trace", action="append", default=[], metavar="PATH", help="parquet: also measure this .pftrace"
    )
    args = parser.parse_args()
    if args.export_only:
        _export_only(args.export_only)
        return 0
    results: dict[str, Any] = {}
    for section in SECTIONS:
        if args.section and section.__name__ not in args.section:
            continue
        results.update(parquet(args.runs, args.demo_trace) if section is parquet else section(args.runs))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for key, value in results.items():
            print(f"{key:28} {value:>14,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
