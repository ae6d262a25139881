# SPDX-License-Identifier: Apache-2.0
"""What ``brickscope.torch.instrument`` costs on a training step, against torch.profiler, in one run.

Three identical copies of examples/torch_gpt.py's model take training steps (forward,
backward, AdamW) in alternated rounds, so that all three see the same machine load:

- ``bare``: not instrumented;
- ``brickscope``: ``instrument(model)``, brickscope on with a ``BatchSpanProcessor`` to an
  exporter that drops the spans: all in (recording, building the spans at the step's
  end, handing them to the processors);
- ``profiler``: the bare copy inside ``torch.profiler.profile(activities=[CPU])``, opened
  before the round and closed after it: its recording only (the trace it builds when it
  stops is not counted, which flatters the profiler).

Every variant runs its steps inside ``bs.step(n)``. Step times are per-step
CPU times of the process (``time.process_time_ns``: all its threads, the span processor's
included, and not the time it waits for a core, so a shared machine's load changes
them less than wall time; torch runs on one thread). A variant's overhead is, per round,
the median of its steps over the median of bare's steps in that round, minus one; the
figure is the median over rounds. The cost per module call is brickscope's overhead times
bare's median step over the instrumented module calls per step.
Targets: at most 2 µs a module call, and brickscope's overhead at most 1/4 of the
profiler's, on the small model.

Usage::

    python benchmarks/torch_overhead.py                # table, small and medium models
    python benchmarks/torch_overhead.py --json         # one JSON object
    python benchmarks/torch_overhead.py --rounds 30    # more rounds (default 12)
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from typing import Any

import torch
from _callgrind import load_example
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from torch.profiler import ProfilerActivity, profile

import brickscope as bs
import brickscope.torch as bt
from brickscope import native
from brickscope.testing import reset_globals

# name -> (GPT arguments, batch, context)
MODELS = {
    "small": ({"dim": 64, "heads": 4, "blocks": 6}, 8, 32),
    "medium": ({"dim": 128, "heads": 4, "blocks": 8, "context": 64}, 8, 64),
}
VARIANTS = ("bare", "brickscope", "profiler")
PER_CALL_TARGET_NS = 2000.0
PROFILER_SHARE_TARGET = 0.25


class DropExporter(SpanExporter):
    """Takes every batch and keeps nothing."""

    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def measure(example: Any, name: str, rounds: int, steps: int) -> dict[str, Any]:
    """Median step time per variant (ns) and the figures derived from them, for one model."""
    arguments, batch, context = MODELS[name]
    copies = {}
    for variant in VARIANTS:
        torch.manual_seed(0)
        model = example.GPT(context=arguments.get("context", context), **{k: v for k, v in arguments.items() if k != "context"})
        copies[variant] = (model, torch.optim.AdamW(model.parameters(), lr=1e-3))
    x, y = next(example.batches(batch=batch, context=context))
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(DropExporter()))
    session = bs.configure(provider, clock="host")
    times: dict[str, list[int]] = {variant: [] for variant in VARIANTS}
    per_round: list[dict[str, float]] = []  # each round's median step time per variant
    step = 0
    with bt.instrument(copies["brickscope"][0], nvtx=False) as handle:
        for round_index in range(rounds + 1):  # round 0 warms up (allocator, AdamW state)
            order = VARIANTS[round_index % 3 :] + VARIANTS[: round_index % 3]
            medians_now: dict[str, float] = {}
            for variant in order:
                model, optimizer = copies[variant]
                profiler = profile(activities=[ProfilerActivity.CPU]) if variant == "profiler" else None
                if profiler is not None:
                    profiler.__enter__()
                for _ in range(steps):
                    start = time.process_time_ns()
                    with bs.step(step):
                        example.train_step(model, optimizer, x, y)
                    elapsed = time.process_time_ns() - start
                    step += 1
                    if round_index:
                        times[variant].append(elapsed)
                if profiler is not None:
                    profiler.__exit__(None, None, None)
                if round_index:
                    medians_now[variant] = statistics.median(times[variant][-steps:])
            if medians_now:
                per_round.append(medians_now)
        calls = len(handle.modules)  # every instrumented module of this model runs once a step
    session.shutdown()
    reset_globals()
    medians = {variant: statistics.median(values) for variant, values in times.items()}
    # Overheads from each round's own bare steps (the machine's load drifts between rounds),
    # then the median over rounds.
    brickscope_overhead = statistics.median(r["brickscope"] / r["bare"] - 1 for r in per_round)
    profiler_overhead = statistics.median(r["profiler"] / r["bare"] - 1 for r in per_round)
    per_call = brickscope_overhead * medians["bare"] / calls
    return {
        "step_ns": medians,
        # the spread the medians come from: first and third quartiles of each variant's steps
        "step_quartiles_ns": {variant: statistics.quantiles(values, n=4)[::2] for variant, values in times.items()},
        "module_calls_per_step": calls,
        "brickscope_overhead": brickscope_overhead,
        "profiler_overhead": profiler_overhead,
        "brickscope_over_profiler": brickscope_overhead / profiler_overhead if profiler_overhead > 0 else None,
        "ns_per_module_call": per_call,
        "steps_per_variant": len(times["bare"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rounds", type=int, default=12, help="alternated rounds (default 12)")
    parser.add_argument("--steps", type=int, default=5, help="steps per variant per round (default 5)")
    parser.add_argument("--models", default="small,medium", help="comma-separated: small, medium")
    args = parser.parse_args(argv)
    models = args.models.split(",")
    for option, value in (("--rounds", args.rounds), ("--steps", args.steps)):
        if value < 1:
            print(f"torch_overhead: {option} must be at least 1, got {value}", file=sys.stderr)
            return 2
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        print(f"torch_overhead: unknown model {unknown[0]!r} (known: {', '.join(MODELS)})", file=sys.stderr)
        return 2
    torch.set_num_threads(1)  # one core: the step's time is host time, as the figures assume
    example = load_example()
    result: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "models": {name: measure(example, name, args.rounds, args.steps) for name in models},
        # which implementation each part used (C accelerators or pure Python), known once it ran
        "implementations": {part: found.in_use for part, found in native.implementations().items()},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['date']}  CPython {result['python']}  torch {result['torch']}  {result['implementations']}")
    for name, m in result["models"].items():
        ratio = m["brickscope_over_profiler"]
        print(
            f"{name}: bare {m['step_ns']['bare'] / 1e6:.2f} ms/step, {m['module_calls_per_step']} module calls; "
            f"brickscope +{m['brickscope_overhead']:.1%} ({m['ns_per_module_call']:.0f} ns a call, "
            f"target {PER_CALL_TARGET_NS:.0f}: {'met' if m['ns_per_module_call'] <= PER_CALL_TARGET_NS else 'MISSED'}); "
            f"profiler +{m['profiler_overhead']:.1%}; brickscope/profiler "
            + ("n/a" if ratio is None else f"{ratio:.2f} (target {PROFILER_SHARE_TARGET}: "
               f"{'met' if ratio <= PROFILER_SHARE_TARGET else 'MISSED'})")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
