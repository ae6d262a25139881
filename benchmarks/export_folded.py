# SPDX-License-Identifier: Apache-2.0
"""Folded (flamegraph) export of 1,000,000 spans: spans per second and peak memory.

The spans are a 32-layer model's steps (step > layer > 4 bricks > 2 kernels, GPU-timed
bricks and kernels on one stream), built batch by batch as a ``BatchSpanProcessor``
would hand them over (children before parents), so the input never sits in memory
whole. Only ``export()`` and the final ``shutdown()`` (which writes the folded and
speedscope files) are timed. The run happens in a fresh interpreter, so the peak
RSS is this benchmark's alone; the baseline is that interpreter's RSS after its
imports, before the first span.

Usage::

    python benchmarks/export_folded.py                 # table
    python benchmarks/export_folded.py --json          # folded_spans_per_s, folded_peak_rss_mb_1m
    python benchmarks/export_folded.py --spans 200000
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import resource
import sys
import tempfile
import time
from collections.abc import Iterator

BATCH = 512
LAYERS = 32
BRICKS = ("rms_norm", "attention", "ffn", "residual")
KERNELS = ("rms_fwd", "qkv_gemm", "flash_attn", "o_gemm", "up_gemm", "down_gemm", "silu_mul", "add")


def _model_batches(spans: int) -> Iterator[list]:
    """Batches of ended spans, children before parents, until ``spans`` are made."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext

    from brickscope.trace import attributes as A

    resource_ = Resource({"service.name": "bench"})
    scope = InstrumentationScope("brickscope", "0.1.0")
    trace_id, ids = 0x5EED, itertools.count(1)
    thread = {A.THREAD_ID: 1, A.THREAD_NAME: "MainThread"}
    now, made, batch = 1_700_000_000_000_000_000, 0, []

    def span(name, context, parent, start, end, kind, gpu):
        attributes = {A.SCOPE_KIND: kind, A.HOST_START_NS: start, A.HOST_DURATION_NS: 700, **thread}
        if gpu:
            attributes.update(
                {
                    A.CLOCK: A.CLOCK_CUDA,
                    A.GPU_DURATION_NS: end - start,
                    A.GPU_DEVICE_ID: 0,
                    A.GPU_STREAM_ID: 0x7F00,
                }
            )
        else:
            attributes.update({A.CLOCK: A.CLOCK_HOST, A.HOST_DURATION_NS: end - start})
        return ReadableSpan(
            name=name,
            context=context,
            parent=parent,
            resource=resource_,
            attributes=attributes,
            start_time=start,
            end_time=end,
            instrumentation_scope=scope,
        )

    while made < spans:
        step, step_start = SpanContext(trace_id, next(ids), False), now
        for _ in range(LAYERS):
            layer, layer_start = SpanContext(trace_id, next(ids), False), now
            for b, brick_name in enumerate(BRICKS):
                brick, brick_start = SpanContext(trace_id, next(ids), False), now
                for k in range(2):
                    kernel = SpanContext(trace_id, next(ids), False)
                    batch.append(
                        span(KERNELS[2 * b + k], kernel, brick, now, now + 5_000, "kernel", True)
                    )
                    now += 5_500
                batch.append(span(brick_name, brick, layer, brick_start, now, "brick", True))
            batch.append(span("layer", layer, step, layer_start, now, "layer", False))
            if len(batch) >= BATCH:
                made += len(batch)
                yield batch
                batch = []
        batch.append(span("step", step, None, step_start, now, "step", False))
    if batch:
        yield batch


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _folded_run(spans: int) -> dict[str, float]:
    """Runs in a fresh interpreter (spawned): export, shutdown, measure."""
    from brickscope.exporter.flamegraph import FlamegraphSpanExporter

    with tempfile.TemporaryDirectory() as directory:
        exporter = FlamegraphSpanExporter(
            os.path.join(directory, "bench.folded"),
            "gpu",
            speedscope_path=os.path.join(directory, "bench.speedscope.json"),
            write_interval_millis=None,
        )
        batches = _model_batches(spans)
        first = next(batches)
        baseline = _peak_rss_mb()
        elapsed, exported = 0.0, 0
        for batch in itertools.chain([first], batches):
            start = time.perf_counter()
            exporter.export(batch)
            elapsed += time.perf_counter() - start
            exported += len(batch)
        start = time.perf_counter()
        exporter.shutdown()
        elapsed += time.perf_counter() - start
        with open(exporter.path, encoding="utf-8") as folded:
            lines = sum(1 for _ in folded)
    return {
        "spans": exported,
        "folded_lines": lines,
        "folded_spans_per_s": exported / elapsed,
        "folded_peak_rss_mb_1m": _peak_rss_mb(),
        "folded_baseline_rss_mb": baseline,
    }


def folded_benchmark(spans: int = 1_000_000) -> dict[str, float]:
    """Folded export of ``spans`` spans in a fresh interpreter; its throughput and peak RSS."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_folded_run, (spans,))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000, help="spans to export")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = folded_benchmark(args.spans)
    if args.json:
        keys = ("folded_spans_per_s", "folded_peak_rss_mb_1m", "folded_baseline_rss_mb")
        print(json.dumps({key: round(result[key], 1) for key in keys}))
    else:
        print(f"{result['spans']:,} spans -> {result['folded_lines']} folded lines")
        print(f"folded export: {result['folded_spans_per_s']:,.0f} spans/s")
        print(
            f"peak RSS: {result['folded_peak_rss_mb_1m']:.0f} MB "
            f"(baseline after imports: {result['folded_baseline_rss_mb']:.0f} MB)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
