# SPDX-License-Identifier: Apache-2.0
"""Real-GPU smoke check: brickscope's GPU durations against torch.cuda.Event timings of the same work.

Run on a machine with an NVIDIA GPU, PyTorch with CUDA and ``brickscope[cuda]``::

    python examples/gpu_smoke.py [--size 4096] [--repeats 20]

Each repeat runs a matmul inside a brick (timed by brickscope with CUDA driver
events through cuda-bindings) and, around exactly the same launch, a pair of
``torch.cuda.Event(enable_timing=True)`` records. It prints both durations per
brick and their difference; they should agree within a few microseconds (the
events are recorded at slightly different points of the stream). Exits 1 if the
median difference exceeds ``--tolerance-us`` or if brickscope fell back to the
host clock; exits 2 when there is no GPU (nothing was checked).

This script was NOT run on real hardware by the project (no machine here has a
GPU); the CUDA path is tested against a simulated driver (see docs/cuda.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import brickscope as bs
from brickscope.trace import attributes as A


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096, help="square matmul size")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--tolerance-us", type=float, default=20.0, help="allowed median |difference|")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed (a CUDA build is needed: see pytorch.org): nothing checked", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("no CUDA device: nothing checked", file=sys.stderr)
        return 2

    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    session = bs.configure(provider, clock="cuda")
    stream = torch.cuda.Stream()
    a = torch.randn(args.size, args.size, device="cuda")
    b = torch.randn(args.size, args.size, device="cuda")
    torch_ms = []
    with torch.cuda.stream(stream):
        torch.mm(a, b)  # warm up cuBLAS
        for _ in range(args.repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with bs.brick("matmul", stream=stream, elements=args.size**3):
                start.record(stream)
                torch.mm(a, b)
                end.record(stream)
            torch_ms.append((start, end))
    stream.synchronize()
    session.sync()
    spans = [s for s in exporter.get_finished_spans() if s.name == "matmul"]
    if any(s.attributes[A.CLOCK] != "cuda" for s in spans):
        print(f"brickscope did not time on the GPU: {session.clock_fallback_reason}", file=sys.stderr)
        return 1
    differences = []
    print(f"{'#':>3}  {'brickscope us':>14}  {'torch.cuda.Event us':>20}  {'diff us':>8}")
    for index, (span, (start, end)) in enumerate(zip(spans, torch_ms)):
        ours = span.attributes[A.GPU_DURATION_NS] / 1e3
        theirs = start.elapsed_time(end) * 1e3
        differences.append(ours - theirs)
        print(f"{index:>3}  {ours:14.1f}  {theirs:20.1f}  {ours - theirs:8.1f}")
    median = statistics.median(abs(d) for d in differences)
    print(f"median |difference|: {median:.1f} us (tolerance {args.tolerance_us} us)")
    session.shutdown()
    return 0 if median <= args.tolerance_us else 1


if __name__ == "__main__":
    sys.exit(main())
