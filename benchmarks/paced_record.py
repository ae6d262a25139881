# SPDX-License-Identifier: Apache-2.0
"""What a brick's record costs when the recording thread sleeps between steps.

``always_on.py`` paces a decode token (a step of 32 layers x 10 bricks, host clock, metrics
only) at 50 tokens/s and finds the application thread's record dearer than ``hot_path.py``'s
tight loop. This separates the two causes, each in thread CPU per brick with the same loop
without brickscope subtracted:

- ``tight``: tokens back to back;
- ``paced_sleep``: 50 tokens/s, sleeping between tokens (as ``always_on.py`` does);
- ``paced_spin``: 50 tokens/s, spinning between tokens (the thread never sleeps);

and ``first_layer_ns`` / ``other_layers_ns``: wall time per scope of a paced token's first
layer against the median of its other layers (a core woken from a sleep starts cold).

Usage::

    python benchmarks/paced_record.py            # a table
    python benchmarks/paced_record.py --json     # one JSON object
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

LAYERS = 32
NAMES = (
    "rms_norm", "qkv_projection", "rope", "attention_score", "attention_softmax",
    "attention_output", "output_projection", "ffn_gate", "ffn_up", "ffn_down",
)  # fmt: skip
BRICKS = LAYERS * len(NAMES)
PERIOD_S = 0.02  # 50 tokens/s: 16,000 bricks/s


def token(bs: Any, step: int, marks: list[int] | None = None) -> None:
    """One decode token: marks (if given) gets the wall clock before each layer and at the end."""
    with bs.step(step):
        for index in range(LAYERS):
            if marks is not None:
                marks.append(time.perf_counter_ns())
            with bs.layer(index):
                for name in NAMES:
                    with bs.brick(name, elements=1):
                        pass
        if marks is not None:
            marks.append(time.perf_counter_ns())


def bare(step: int) -> None:
    """The same loop without brickscope."""
    for _ in range(LAYERS):
        for _ in NAMES:
            pass


def cpu_per_brick(work: Callable[[int], None], tokens: int, pause: str) -> float:
    """Thread CPU ns per brick of ``tokens`` tokens; ``pause``: "none", "sleep" or "spin"
    (the spinning itself is not counted)."""
    spun = 0
    start_cpu, start = time.thread_time_ns(), time.perf_counter()
    for number in range(tokens):
        work(number)
        due = start + (number + 1) * PERIOD_S
        if pause == "sleep":
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        elif pause == "spin":
            spin_start = time.thread_time_ns()
            while time.perf_counter() < due:
                pass
            spun += time.thread_time_ns() - spin_start
    return (time.thread_time_ns() - start_cpu - spun) / (tokens * BRICKS)


def layer_profile(bs: Any, tokens: int) -> tuple[float, float]:
    """Paced (sleeping) tokens: median wall ns per scope of the first layer, and of the others."""
    first, others = [], []
    start = time.perf_counter()
    for number in range(tokens):
        marks: list[int] = []
        token(bs, number, marks)
        per_scope = [(b - a) / (len(NAMES) + 1) for a, b in zip(marks, marks[1:])]
        first.append(per_scope[0])
        others.append(statistics.median(per_scope[1:]))
        delay = start + (number + 1) * PERIOD_S - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    return statistics.median(first), statistics.median(others)


def measure(tokens: int, rounds: int) -> dict[str, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    import brickscope as bs

    session = bs.configure(
        TracerProvider(sampler=ALWAYS_OFF), clock="host", meter_provider=MeterProvider(), resolver="thread"
    )
    cases: dict[str, list[float]] = {"tight": [], "paced_sleep": [], "paced_spin": []}
    try:
        cpu_per_brick(lambda n: token(bs, n), 20, "none")  # warm up
        for _ in range(rounds):  # interleaved, so drift hits every case alike
            for case, pause in (("tight", "none"), ("paced_sleep", "sleep"), ("paced_spin", "spin")):
                n = tokens * 5 if pause == "none" else tokens
                with_bs = cpu_per_brick(lambda number: token(bs, number), n, pause)
                cases[case].append(with_bs - cpu_per_brick(bare, n, pause))
        first, others = layer_profile(bs, tokens)
    finally:
        session.shutdown()
    result: dict[str, Any] = {f"{case}_ns_per_brick": round(statistics.median(v)) for case, v in cases.items()}
    result["rounds"] = {case: [round(x) for x in v] for case, v in cases.items()}
    result["first_layer_ns_per_scope"] = round(first)
    result["other_layers_ns_per_scope"] = round(others)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=200, help="paced tokens per case and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (the median is reported)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    result = measure(args.tokens, args.rounds)
    if args.json:
        print(json.dumps(result))
        return 0
    print("thread CPU per brick, the loop without brickscope subtracted (median of rounds):")
    for case in ("tight", "paced_sleep", "paced_spin"):
        print(f"  {case:<12} {result[f'{case}_ns_per_brick']:6d} ns  {result['rounds'][case]}")
    print(
        f"paced token, wall per scope: first layer {result['first_layer_ns_per_scope']} ns, "
        f"the others {result['other_layers_ns_per_scope']} ns (median)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
