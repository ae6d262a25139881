# SPDX-License-Identifier: Apache-2.0
"""What one instrumented module call costs, all in, counted in instructions (callgrind).

Wall-clock figures on a shared machine move by tens of percent between minutes;
instruction counts do not. This script runs a fixed workload under
``valgrind --tool=callgrind`` and counts the instructions of two regions of it:

- ``bare``: forward passes (with the loss) of a tiny copy of examples/torch_gpt.py's
  model, not instrumented;
- ``brickscope``: the same passes of an identical copy under ``instrument(model)``.

brickscope is configured for both (host clock, spans resolved at each step's end, a ``BatchSpanProcessor`` to an exporter
that drops the spans, the default CategoryAggregator), and every pass runs in its own
``bs.step(n)``; each region ends with ``force_flush()``, so the spans' building at the
step's end, the hand-off to the processors, the batch processor's export and the
aggregator's rows going into the live report's table (a batch of up to 2,048 rows, which
would otherwise land in whichever region fills it) are inside it (callgrind counts every
thread). The difference between the regions over the
instrumented module calls they made is brickscope's instructions a module call.

By default every step makes spans. ``--sample-every N`` configures ``step_sampling="every=N"``
instead, as a production run traces one step in N (every call still timed and folded into the
metrics and totals; the steps that make spans cost what the default figure says): each region
then holds ``--steps / N`` sampled steps, and the figure is the average module call of such a
run, the spanned steps' share included. ``--steps`` must be a multiple of N.

Regions are cut by a marker (``os.getppid()``, called nowhere else) that callgrind dumps
its counters before (``--dump-before=getppid``). Both regions run twice, alternated,
after warm-up passes; the bare rounds agree to a fraction of a percent, and the second
instrumented round shows what grows with the spans already made. The estimate takes the
larger of the two.

The µs estimate divides by the machine's instructions per µs on this workload: the bare
region's instruction count over its best wall time outside valgrind (best of
``--repeats``). It assumes brickscope's instructions run at the bare workload's rate; the
timed figure does not: the instrumented region's best wall time minus the bare one's, over
its module calls (both best of ``--repeats``, alternated; noisier, and it includes what
instructions do not show: cache misses, the worker threads' share of the cores). Target: at
most 2 µs a module call (all in).

Usage::

    python benchmarks/call_cost.py             # table
    python benchmarks/call_cost.py --json      # one JSON object
    python benchmarks/call_cost.py --sample-every 100   # spans for one step in 100
    BRICKSCOPE_PURE_PYTHON=1 python benchmarks/call_cost.py   # the pure-Python implementation
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any

from _callgrind import load_example, run_callgrind

PER_CALL_TARGET_NS = 2000.0
# The tiny model: (GPT arguments, batch, context). 24 instrumented module calls a pass: the model,
# 2 embeddings, 2 x (a layer and its 8 modules), the final norm, the head and the loss.
MODEL = ({"dim": 16, "heads": 2, "blocks": 2, "context": 8}, 2, 8)
REGIONS = ("bare", "brickscope", "bare", "brickscope")  # in this order, after the warm-up


def marker() -> None:
    """Where callgrind cuts a region (``--dump-before=getppid``)."""
    os.getppid()


def workload(warmup: int, sample_every: int) -> tuple[Any, int]:
    """(run(model name, passes), instrumented module calls a pass), set up and warmed up."""
    import torch
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    import brickscope as bs
    import brickscope.torch as bt

    class DropExporter(SpanExporter):
        """Takes every batch and keeps nothing."""

        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    example = load_example()
    torch.set_num_threads(1)
    arguments, batch, context = MODEL
    models = {}
    for name in ("bare", "brickscope"):
        torch.manual_seed(0)
        models[name] = example.GPT(**arguments).eval()
    x, y = next(example.batches(batch=batch, context=context))
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DropExporter()))
    # Resolution at each step's end only, as natively for steps far shorter than a second:
    # under valgrind (some 50x slower) the default 1 s timer would also resolve mid-step.
    sampling = f"every={sample_every}" if sample_every else None
    session = bs.configure(provider, clock="host", max_delay_millis=1e9, step_sampling=sampling)
    handle = bt.instrument(models["brickscope"], nvtx=False)
    step = 0

    def run(name: str, count: int) -> None:
        nonlocal step
        model = models[name]
        with torch.no_grad():
            for _ in range(count):
                with bs.step(step):
                    model(x, y)
                step += 1
        session.force_flush()

    for name in ("bare", "brickscope"):
        run(name, warmup)
    calls = len(handle.modules)  # every instrumented module runs once a pass
    return run, calls


def child(steps: int, warmup: int, sample_every: int) -> None:
    """The workload as callgrind sees it: the regions between markers."""
    run, _ = workload(warmup, sample_every)
    marker()
    for name in REGIONS:
        run(name, steps)
        marker()


def timed(steps: int, warmup: int, repeats: int, sample_every: int) -> tuple[dict[str, float], int, dict[str, bool]]:
    """({region: best wall ns}, module calls a pass, implementations), outside valgrind: the
    bare and instrumented regions alternated, each the best of ``repeats``."""
    from brickscope import native

    run, calls = workload(warmup, sample_every)
    best = {"bare": float("inf"), "brickscope": float("inf")}
    for _ in range(repeats):
        for name in best:
            start = time.perf_counter_ns()
            run(name, steps)
            best[name] = min(best[name], time.perf_counter_ns() - start)
    return best, calls, {part: found.in_use for part, found in native.implementations().items()}


def counted(steps: int, warmup: int, sample_every: int) -> list[int]:
    """Instructions of each region of :func:`child`, from callgrind's dumps."""
    child_args = ["--child", "--steps", str(steps), "--warmup", str(warmup), "--sample-every", str(sample_every)]
    totals, _ = run_callgrind("call_cost", [sys.executable, __file__, *child_args])
    # part 1: start-up and warm-up (to the first marker); then one part per region; the last: exit
    ordered = [totals[k] for k in sorted(totals)]
    if len(ordered) < len(REGIONS) + 1:
        raise SystemExit(f"call_cost: callgrind wrote {len(ordered)} dumps, expected {len(REGIONS) + 2}")
    return ordered[1 : 1 + len(REGIONS)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--steps", type=int, default=100, help="forward passes a region (default 100)")
    parser.add_argument("--warmup", type=int, default=20, help="warm-up passes per model (default 20)")
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats outside valgrind (default 7)")
    parser.add_argument(
        "--sample-every",
        type=int,
        default=0,
        help="spans for one step in N (step_sampling every=N); default: every step",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for option, value in (("--steps", args.steps), ("--warmup", args.warmup), ("--repeats", args.repeats)):
        if value < 1:
            print(f"call_cost: {option} must be at least 1, got {value}", file=sys.stderr)
            return 2
    if args.sample_every < 0 or (args.sample_every and args.steps % args.sample_every):
        print(
            f"call_cost: --steps ({args.steps}) must be a multiple of --sample-every ({args.sample_every})",
            file=sys.stderr,
        )
        return 2
    if args.child:
        child(args.steps, args.warmup, args.sample_every)
        return 0
    regions = counted(args.steps, args.warmup, args.sample_every)
    best_ns, calls, implementations = timed(args.steps, args.warmup, args.repeats, args.sample_every)
    bare_ns = best_ns["bare"]
    bare = [n for name, n in zip(REGIONS, regions) if name == "bare"]
    ours = [n for name, n in zip(REGIONS, regions) if name == "brickscope"]
    per_call = [(o - b) / (args.steps * calls) for o, b in zip(ours, bare)]
    per_us = min(bare) / (bare_ns / 1000)
    estimate_ns = 1000 * max(per_call) / per_us
    import torch

    result = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "implementations": implementations,
        "module_calls_per_pass": calls,
        "passes_per_region": args.steps,
        "spans_for_one_step_in": args.sample_every or 1,
        "region_instructions": dict(zip([f"{n}_{i // 2 + 1}" for i, n in enumerate(REGIONS)], regions)),
        "instructions_per_call": per_call,
        "bare_instructions_per_pass": min(bare) / args.steps,
        "instructions_per_us": per_us,
        "ns_per_call_estimate": estimate_ns,
        "ns_per_call_timed": (best_ns["brickscope"] - bare_ns) / (args.steps * calls),
        "target_ns": PER_CALL_TARGET_NS,
        "met": estimate_ns <= PER_CALL_TARGET_NS,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"CPython {result['python']}  torch {result['torch']}  {implementations}")
    print(
        f"{calls} instrumented module calls a pass, {args.steps} passes a region, spans for one step in "
        f"{args.sample_every or 1}; bare "
        f"{result['bare_instructions_per_pass']:.0f} instructions a pass"
    )
    print(
        "brickscope: " + " / ".join(f"{p:.0f}" for p in per_call) + " instructions a module call (two rounds); "
        f"{per_us:.0f} instructions/µs -> {estimate_ns:.0f} ns a call "
        f"(target {PER_CALL_TARGET_NS:.0f}: {'met' if result['met'] else 'MISSED'}); "
        f"timed: {result['ns_per_call_timed']:.0f} ns a call"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
