# SPDX-License-Identifier: Apache-2.0
"""The floor under call_cost.py's figure that is not brickscope's: what OpenTelemetry's own
BatchSpanProcessor costs a span, counted in instructions (callgrind).

Spans are made before the counted regions; each region hands its spans to a fresh
``BatchSpanProcessor`` (an exporter that drops them), lets go of them and ends with
``force_flush()``, so it counts the hand-off, the worker thread's export and the
spans' freeing (callgrind counts every thread). Regions, in this order:

- ``minimal``: the cheapest ReadableSpan the SDK takes (a name, a SpanContext, times,
  no attributes; one shared resource), each given to ``on_end``;
- ``brickscope``: spans as brickscope makes them for call_cost.py's workload (captured
  from an instrumented run of its tiny model), each given to ``on_end``;
- ``brickscope_handoff``: spans of that kind as brickscope hands them over: a batch
  appended to the queue at once, the exporter wrapped in brickscope's delivery count.

The queue holds every span of a region (no span is shed; the script checks that the
exporter saw them all); the export batch size is the SDK's default (512). A region's
instructions over its spans is the cost a span; each region runs twice.

Usage::

    python benchmarks/export_floor.py            # table
    python benchmarks/export_floor.py --json     # one JSON object
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from _callgrind import load_example, run_callgrind

REGIONS = ("minimal", "brickscope", "brickscope_handoff")


def marker() -> None:
    """Where callgrind cuts a region (``--dump-before=getppid``)."""
    os.getppid()


def brickscope_spans(passes: int) -> list[Any]:
    """The spans brickscope makes for ``passes`` of call_cost.py's workload (its tiny model,
    host clock, one step a pass), captured by a processor that keeps them."""
    import torch
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    import brickscope as bs
    import brickscope.torch as bt

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import call_cost

    class Keep(SpanProcessor):
        def __init__(self) -> None:
            self.spans: list[Any] = []

        def on_end(self, span: Any) -> None:
            self.spans.append(span)

    keep = Keep()
    provider = TracerProvider()
    provider.add_span_processor(keep)
    session = bs.configure(provider, clock="host", max_delay_millis=1e9, aggregate=False)
    example = load_example()
    torch.set_num_threads(1)
    arguments, batch, context = call_cost.MODEL
    torch.manual_seed(0)
    model = example.GPT(**arguments).eval()
    x, y = next(example.batches(batch=batch, context=context))
    bt.instrument(model, nvtx=False)
    with torch.no_grad():
        for step in range(passes):
            with bs.step(step):
                model(x, y)
    session.force_flush()
    session.shutdown()
    spans, keep.spans = keep.spans, []
    if any(sys.getrefcount(span) != 3 or sys.getrefcount(span._attributes) != 2 for span in spans):
        raise SystemExit("export_floor: a captured span is still referred to elsewhere")
    return spans


def minimal_spans(count: int) -> list[Any]:
    """``count`` of the cheapest spans the SDK's processors take."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, TraceFlags

    resource = Resource.create({})
    flags = TraceFlags(TraceFlags.SAMPLED)
    return [
        ReadableSpan("x", SpanContext(1, i + 1, False, flags), start_time=i, end_time=i + 1, resource=resource)
        for i in range(count)
    ]


class _Drop:
    """An exporter that counts what it is given and keeps nothing."""

    def __init__(self) -> None:
        self.seen = 0

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        self.seen += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def region(name: str, spans: list[Any]) -> int:
    """One counted region: ``spans`` handed over (and let go of), then flushed. Returns how many."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from brickscope.sdk._otel_internals import enqueue, sdk_batch_queue
    from brickscope.sdk.trace._delivery import _counting

    drop = _Drop()
    count = len(spans)
    processor = BatchSpanProcessor(drop, max_queue_size=max(count, 2048), schedule_delay_millis=1e9)
    if name == "brickscope_handoff":
        batch = sdk_batch_queue(processor)
        batch._exporter, account = _counting(batch._exporter, batch._queue)
        marker()
        account.handed += count
        enqueue(batch, spans)
    else:
        on_end = processor.on_end
        marker()
        for span in spans:
            on_end(span)
    spans.clear()  # the processor holds the only references now: the export frees them
    processor.force_flush()
    marker()
    processor.shutdown()
    if drop.seen != count:
        raise SystemExit(f"export_floor: {name}: the exporter saw {drop.seen} of {count} spans")
    return count


def child(passes: int) -> None:
    """The workload as callgrind sees it: one region between each pair of markers."""
    import gc

    made = brickscope_spans(2 * passes + 2 * passes)
    count = len(made) // 4
    batches = [made[i * count : (i + 1) * count] for i in range(4)]
    del made
    for _ in range(2):
        for name in REGIONS:
            spans = minimal_spans(count) if name == "minimal" else batches.pop()
            gc.collect()
            region(name, spans)
    print(json.dumps({"spans_per_region": count}))


def counted(passes: int) -> tuple[list[int], int]:
    """(instructions of each region, spans a region), from callgrind's dumps."""
    totals, stdout = run_callgrind("export_floor", [sys.executable, __file__, "--child", "--passes", str(passes)])
    count = json.loads(stdout.strip().splitlines()[-1])["spans_per_region"]
    # markers open and close each region: parts 2, 4, 6, ... are the regions
    ordered = [totals[k] for k in sorted(totals)]
    regions = ordered[1::2][: 2 * len(REGIONS)]
    if len(regions) < 2 * len(REGIONS):
        raise SystemExit(f"export_floor: callgrind wrote {len(ordered)} dumps, expected {4 * len(REGIONS) + 1}")
    return regions, count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--passes", type=int, default=30, help="model passes whose spans make a region (default 30)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.passes < 1:
        print(f"export_floor: --passes must be at least 1, got {args.passes}", file=sys.stderr)
        return 2
    if args.child:
        child(args.passes)
        return 0
    regions, count = counted(args.passes)
    per_span = {name: [regions[i] / count, regions[i + len(REGIONS)] / count] for i, name in enumerate(REGIONS)}
    result = {"python": platform.python_version(), "spans_per_region": count, "instructions_per_span": per_span}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"CPython {result['python']}, {count} spans a region")
    for name, (first, second) in per_span.items():
        print(f"{name:20s} {first:8.0f} / {second:8.0f} instructions a span (two rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
