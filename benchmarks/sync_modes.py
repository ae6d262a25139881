# SPDX-License-Identifier: Apache-2.0
"""Wall-time overhead of each sync policy on a simulated decode step (CUDA events, simulated driver).

A decode step is 32 layers x 10 bricks; each brick launches one kernel on a
non-blocking stream. A launch costs ~5 us of host time (spun by the simulator,
as a real launch costs the CPU) and the kernel runs 20 us on the simulated GPU
(``--kernel-us``; ``--kernel-us 3`` is the launch-bound variant). Each step
ends as a real decode step does: the host waits for the logits
(``cuStreamSynchronize``). The same loop runs uninstrumented and under each
policy, interleaved, in one process; the figure is the median step time's
overhead over the uninstrumented median, in percent.

This uses the simulated driver from ``tests/simdriver`` (built here with the
system C compiler): it measures brickscope's host-side cost and blocking
behaviour against a driver whose calls are cheap C functions, not a real GPU's.

Usage::

    python benchmarks/sync_modes.py [--kernel-us 20] [--steps 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from _simcuda import load_simdriver, make_stream

LAYERS, BRICKS = 32, 10
BRICK_NAMES = (
    "rms_norm", "qkv_projection", "rope", "attention_score", "attention_softmax",
    "attention_output", "output_projection", "ffn_gate", "ffn_up", "ffn_down",
)  # fmt: skip
POLICIES = ("immediate", "per_layer", "deferred", "none")


def decode_step(sim: Any, drv: Any, stream: Any, handle: int, kernel_ns: int, launch_ns: int, bs: Any) -> None:
    if bs is None:
        for _ in range(LAYERS):
            for _ in range(BRICKS):
                sim.enqueue_kernel(handle, kernel_ns, launch_ns)
    else:
        with bs.step(0):
            for index in range(LAYERS):
                with bs.layer(index):
                    for name in BRICK_NAMES:
                        with bs.brick(name, stream=handle):
                            sim.enqueue_kernel(handle, kernel_ns, launch_ns)
    drv.cuStreamSynchronize(stream)  # the host waits for the logits


def median_step_ns(run: Callable[[], None], steps: int) -> float:
    samples = []
    for _ in range(steps):
        start = time.perf_counter_ns()
        run()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples)


def measure(kernel_us: float, launch_us: float, steps: int, rounds: int) -> dict[str, float]:
    sim = load_simdriver()
    drv, stream = make_stream()
    handle = int(stream)
    kernel_ns, launch_ns = int(kernel_us * 1000), int(launch_us * 1000)
    from opentelemetry.sdk.trace import TracerProvider

    import brickscope as bs

    def baseline() -> None:
        decode_step(sim, drv, stream, handle, kernel_ns, launch_ns, None)

    base_samples: list[float] = []
    policy_samples: dict[str, list[float]] = {p: [] for p in POLICIES}
    for _ in range(rounds):  # interleave, so drift on a shared machine hits every case alike
        base_samples.append(median_step_ns(baseline, steps))
        for policy in POLICIES:
            session = bs.configure(TracerProvider(), clock="cuda", sync_mode=policy)

            def instrumented() -> None:
                decode_step(sim, drv, stream, handle, kernel_ns, launch_ns, bs)

            instrumented()  # warm the event pool and stream cache
            policy_samples[policy].append(median_step_ns(instrumented, steps))
            session.shutdown()
    base = statistics.median(base_samples)
    results = {p: round(100 * (statistics.median(s) - base) / base, 2) for p, s in policy_samples.items()}
    results["baseline_step_ms"] = round(base / 1e6, 3)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel-us", type=float, default=20.0, help="simulated kernel time (3 = launch-bound)")
    parser.add_argument("--launch-us", type=float, default=5.0, help="host cost of one simulated launch")
    parser.add_argument("--steps", type=int, default=15, help="steps per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--json", action="store_true", help="print one JSON object (overhead %% per policy)")
    args = parser.parse_args(argv)
    results = measure(args.kernel_us, args.launch_us, args.steps, args.rounds)
    if args.json:
        print(json.dumps(results))
        return 0
    print(f"decode step: {LAYERS} layers x {BRICKS} bricks, kernel {args.kernel_us} us, launch {args.launch_us} us")
    print(f"uninstrumented step: {results['baseline_step_ms']} ms")
    for policy in POLICIES:
        print(f"{policy:<10} {results[policy]:7.2f} % overhead")
    return 0


if __name__ == "__main__":
    sys.exit(main())
