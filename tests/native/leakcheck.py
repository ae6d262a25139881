# SPDX-License-Identifier: Apache-2.0
"""A million scopes, spans and table rows leave the interpreter's object count, its
allocated blocks and the process's RSS flat (``make memcheck``; docs/native.md).

The workload runs a warm-up batch, is measured, runs a million more scopes, and is
measured again (the rows waiting for a full table built first, each time). Each scope
becomes a span (every step sampled; brickscope's own work at each step end and any GC pause
inside a scope become spans of their own too, counted apart) that the aggregator folds
and an exporter turns into a table row (a table of 10,000 rows at a time, built and let
go), so the C scope machine, span maker, fold and row maker (or their Python references)
each see a million. The growth between the two measures must stay under:

- ``MAX_OBJECTS`` objects the cyclic GC tracks (``len(gc.get_objects())``): a leak of
  one object per scope would add 1,000,000, a thousand times the bound;
- ``MAX_BLOCKS`` allocated blocks (``sys.getallocatedblocks()``, which counts the objects
  the GC does not track too; between the two measures it moves by about 10,000 either way
  as buffers and free lists settle): a hundredth of what one leaked block a scope adds;
- ``MAX_RSS_BYTES`` of resident memory: one leaked 32-byte block per scope would add
  32 MB (more with malloc's overhead), four times the bound. RSS also sees what C code
  allocates with ``malloc`` directly, which neither count above does.

``tracemalloc`` is not used: tracing every allocation of a million scopes slows them
several times, and ``sys.getallocatedblocks()`` counts the same object allocations for free.

Example::

    python tests/native/leakcheck.py            # both implementations, one process each
    BRICKSCOPE_PURE_PYTHON=1 python tests/native/leakcheck.py --this-process

Exit status: 0 flat, 1 a bound was passed (the figures are printed).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

#: Scopes per step: step, layer, 3 bricks (one per-call, one shared, one token), 3 kernels.
SCOPES_PER_STEP = 8
WARMUP_STEPS = 12_500  # 100,000 scopes: every cache and free list at its working size
STEPS = 125_000  # 1,000,000 scopes, spans and rows
TABLE_ROWS = 10_000  # rows per table built by the exporter
REPORT_MAX_SPANS = 1_000  # the live report's table stops growing during the warm-up

MAX_OBJECTS = 1_000
MAX_BLOCKS = 10_000
MAX_RSS_BYTES = 8 << 20


def rss_bytes() -> int:
    """Resident memory of this process, from /proc (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure() -> dict[str, int]:
    gc.collect()
    return {"objects": len(gc.get_objects()), "blocks": sys.getallocatedblocks(), "rss": rss_bytes()}


def run_here(steps: int, warmup_steps: int) -> dict[str, Any]:
    """The workload in this process (its implementation as imported); the measures."""
    os.environ["BRICKSCOPE_REPORT_MAX_SPANS"] = str(REPORT_MAX_SPANS)
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    import brickscope as bs
    from brickscope import native
    from brickscope.analysis._table import TableBuilder
    from brickscope.trace import attributes as A

    class TableRows(SpanExporter):
        """Every span becomes a table row; a table is built and let go every TABLE_ROWS rows."""

        def __init__(self) -> None:
            self.builder = TableBuilder()
            self.spans = self.rows = self.host_intervals = 0

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            self.spans += len(spans)
            for span in spans:
                # brickscope's own work at each step end, and GC pauses: spans too, counted apart
                if span.attributes.get(A.SCOPE_KIND) in (A.SCOPE_KIND_OVERHEAD, A.SCOPE_KIND_GC):
                    self.host_intervals += 1
                self.builder.add(span)
            if self.builder.rows >= TABLE_ROWS:
                self.flush()
            return SpanExportResult.SUCCESS

        def flush(self) -> None:
            """Build the rows gathered so far and let the table go (before each measure, so
            rows waiting for a full table are not counted as growth)."""
            self.rows += self.builder.build(release=True).rows
            self.builder = TableBuilder()

    def batch(first: int, count: int) -> None:
        for number in range(first, first + count):
            with bs.step(number), bs.layer(number % 4):
                with bs.brick("rms_norm"), bs.kernel("rms_kernel"):
                    pass
                with bs.brick("attention", "attention", 4096), bs.kernel("softmax", grid=8, block=128):
                    pass
                token = bs.enter_scope(bs.brick("ffn"))
                with bs.kernel("gemm"):
                    pass
                bs.exit_scope(token)

    rows = TableRows()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(rows))
    session = bs.configure(provider, clock="host")
    try:
        batch(0, warmup_steps)
        session.sync()
        rows.flush()
        before = measure()
        rows.spans = rows.rows = rows.host_intervals = 0
        started = time.monotonic()
        batch(warmup_steps, steps)
        session.sync()
        rows.flush()
        seconds = time.monotonic() - started
        after = measure()
    finally:
        session.shutdown()
    return {
        "implementation": native.implementations()["brickscope._hotpath"].in_use,
        "scopes": steps * SCOPES_PER_STEP,
        "spans": rows.spans - rows.host_intervals,
        "host_intervals": rows.host_intervals,
        "rows": rows.rows,
        "seconds": round(seconds, 1),
        "growth": {key: after[key] - before[key] for key in before},
    }


def verdict(result: dict[str, Any]) -> list[str]:
    """The bounds ``result`` passes, as lines of text; empty when it is flat."""
    growth = result["growth"]
    problems = []
    if result["spans"] != result["scopes"]:
        problems.append(f"{result['spans']} spans for {result['scopes']} scopes: the workload did not run as meant")
    for key, bound in (("objects", MAX_OBJECTS), ("blocks", MAX_BLOCKS), ("rss", MAX_RSS_BYTES)):
        if growth[key] > bound:
            problems.append(f"{key} grew by {growth[key]:,} (bound {bound:,})")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--this-process", action="store_true", help="run the workload here and print its figures as JSON")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"steps measured ({SCOPES_PER_STEP} scopes each)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    if args.this_process:
        print(json.dumps(run_here(args.steps, WARMUP_STEPS)))
        return 0
    failed = False
    for pure in ("0", "1"):
        env = dict(os.environ, BRICKSCOPE_PURE_PYTHON=pure)
        proc = subprocess.run(
            [sys.executable, __file__, "--this-process", "--steps", str(args.steps)],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            print(f"leakcheck: the workload failed (BRICKSCOPE_PURE_PYTHON={pure}): {proc.stderr.strip()[-500:]}", file=sys.stderr)
            return 1
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        growth = result["growth"]
        problems = verdict(result)
        print(
            f"{result['implementation']:>6}: {result['scopes']:,} scopes, {result['spans']:,} spans "
            f"(+{result['host_intervals']:,} overhead and GC spans), {result['rows']:,} rows "
            f"in {result['seconds']} s; growth: {growth['objects']:+,} objects, {growth['blocks']:+,} blocks, "
            f"{growth['rss'] / 2**20:+.1f} MiB RSS" + ("".join(f"\n    FAILED: {p}" for p in problems))
        )
        failed = failed or bool(problems)
    print("leakcheck: FAILED" if failed else "leakcheck: flat")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
