# SPDX-License-Identifier: Apache-2.0
"""How often ``brickscope diff --fail-above`` cries wolf, and how often it catches a real change.

Generates runs of one program and compares them with the function ``brickscope diff``
uses (``compare_runs``, after the same per-operation summary ``summarise`` makes of a
trace): A/A comparisons (base and new runs of identical code) give the false-alarm rate,
A/B comparisons (one operation 10 % slower in the new runs) the detection rate, at 1, 3
and 5 runs a side.

The program: eight operations (per-instance self times from 20 to 400 µs), each once per
layer in 4 layers (``lm_head`` once a step), 100 steps a run. The noise, all multiplicative
(log-normal):

- per run, a machine factor shared by every operation (σ 1 %) and a shift per operation
  (σ 1 %): the run-to-run noise identical code shows;
- per step, a factor shared by every operation of the step, AR(1) from step to step
  (σ 3 %, ρ 0.5): step-correlated noise (a busy host, clocks);
- per instance, σ 5 %, and rare stalls: 1 instance in 500 takes 5-20x as long.

Usage::

    .venv/bin/python benchmarks/diff_power.py [--trials 1000] [--seed 1] [--run-noise 1.0] [--json]

Seeded: the same arguments print the same figures. Results go in docs/benchmarks.md.
With one run a side the gate needs ``--allow-single-run`` and judges the change itself,
which is what the row measures.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from dataclasses import dataclass

import numpy as np

from brickscope.analysis import get_backend
from brickscope.analysis._diff import RunSummary, compare_runs, summarise_operation

#: (name, mean self time per instance in µs, instances per step)
OPERATIONS = (
    ("rms_norm", 20, 4),
    ("qkv_projection", 120, 4),
    ("attention", 300, 4),
    ("o_projection", 80, 4),
    ("ffn_up", 250, 4),
    ("ffn_down", 240, 4),
    ("all_reduce", 150, 4),
    ("lm_head", 400, 1),
)
CHANGED = "attention"
CHANGE = 1.10
FAIL_ABOVE = 5.0
RUNS = (1, 3, 5)


@dataclass(frozen=True)
class Noise:
    """The noise model's parameters (fractions: 0.015 is 1.5 %)."""

    machine: float = 0.01
    run_shift: float = 0.01
    step: float = 0.03
    step_correlation: float = 0.5
    instance: float = 0.05
    stall_probability: float = 0.002
    stall_factor: tuple[float, float] = (5.0, 20.0)
    steps: int = 100


def generate_run(rng: np.random.Generator, noise: Noise, slower: dict[str, float], backend: object) -> RunSummary:
    """One run's summary, as ``summarise`` makes it from a trace: per operation its sorted
    instance self times (ns) and its self time per step."""
    machine = rng.normal(0.0, noise.machine)
    innovations = rng.normal(0.0, noise.step, noise.steps)
    step_log = np.empty(noise.steps)
    step_log[0] = innovations[0]
    rho = noise.step_correlation
    for i in range(1, noise.steps):  # AR(1) with stationary standard deviation noise.step
        step_log[i] = rho * step_log[i - 1] + math.sqrt(1 - rho * rho) * innovations[i]
    operations = {}
    for name, micros, per_step in OPERATIONS:
        shift = machine + rng.normal(0.0, noise.run_shift)
        logs = shift + step_log[:, None] + rng.normal(0.0, noise.instance, (noise.steps, per_step))
        times = micros * 1000 * slower.get(name, 1.0) * np.exp(logs)
        stalls = rng.random(times.shape) < noise.stall_probability
        times[stalls] *= rng.uniform(*noise.stall_factor, int(stalls.sum()))
        ns = times.astype(np.int64)
        operations[("brick", name)] = summarise_operation(np.sort(ns, axis=None), ns.sum(axis=1).tolist(), backend)
    return RunSummary((), operations, backend)


def trial(
    rng: np.random.Generator, noise: Noise, runs: int, slower: dict[str, float], backend: object
) -> tuple[bool, bool, bool, bool, float | None]:
    """One comparison: (gate fired on the changed operation, on any other, any significant verdict
    on another operation, the changed operation significant, the median run noise diff reported)."""
    base = [generate_run(rng, noise, {}, backend) for _ in range(runs)]
    new = [generate_run(rng, noise, slower, backend) for _ in range(runs)]
    comparison = compare_runs(base, new)
    gated = {c.name for c in comparison.above(FAIL_ABOVE)}
    significant = {c.name for c in comparison.changes if c.verdict != "unchanged"}
    changed = CHANGED if slower else None
    spreads = sorted(c.run_spread_pct for c in comparison.changes if c.run_spread_pct is not None)
    return (
        changed in gated,
        bool(gated - {changed}),
        bool(significant - {changed}),
        changed in significant,
        spreads[len(spreads) // 2] if spreads else None,
    )


def measure(trials: int, seed: int, noise: Noise) -> list[dict[str, object]]:
    """Rates per runs a side: A/A false alarms of the gate and of any verdict; A/B detection."""
    backend = get_backend("numpy")
    rows = []
    for runs in RUNS:
        rng = np.random.default_rng([seed, runs])
        same = [trial(rng, noise, runs, {}, backend) for _ in range(trials)]
        changed = [trial(rng, noise, runs, {CHANGED: CHANGE}, backend) for _ in range(trials)]
        rows.append({
            "runs_a_side": runs,
            "trials": trials,
            "false_alarm_rate": sum(t[1] for t in same) / trials,
            "aa_any_significant_rate": sum(t[2] for t in same) / trials,
            "detection_rate": sum(t[0] for t in changed) / trials,
            "changed_significant_rate": sum(t[3] for t in changed) / trials,
            "other_gated_rate": sum(t[1] for t in changed) / trials,
            "median_run_noise_pct": None if runs == 1 else float(np.median([t[4] for t in same])),
        })  # fmt: skip
    return rows


def _positive(text: str) -> int:
    value = int(text) if text.isdigit() else 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive integer")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=_positive, default=1000, help="comparisons per case (1000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--run-noise", type=float, default=1.0, help="per-operation run shift σ, percent (1.0)")
    parser.add_argument("--machine-noise", type=float, default=1.0, help="whole-run shift σ, percent (1.0)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args()
    noise = Noise(machine=args.machine_noise / 100, run_shift=args.run_noise / 100)
    started = time.perf_counter()
    rows = measure(args.trials, args.seed, noise)
    elapsed = time.perf_counter() - started
    meta = {
        "command": " ".join(["benchmarks/diff_power.py", *sys.argv[1:]]),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "seed": args.seed,
        "noise": {**noise.__dict__, "stall_factor": list(noise.stall_factor)},
        "changed": f"{CHANGED} x{CHANGE}",
        "fail_above_pct": FAIL_ABOVE,
        "seconds": round(elapsed, 1),
    }
    if args.json:
        print(json.dumps({"meta": meta, "rows": rows}, indent=2))
        return
    print(
        f"{args.trials} A/A and {args.trials} A/B comparisons per row; {CHANGED} {CHANGE - 1:+.0%} in A/B;"
        f" --fail-above {FAIL_ABOVE:g}; run noise σ {args.run_noise:g}% per operation"
        f" + {args.machine_noise:g}% per run"
    )
    print(
        f"{'runs a side':>11}  {'run noise':>9}  {'A/A false alarms':>16}  {'A/A any verdict':>15}  {'detected':>8}"
        f"  {'significant':>11}  {'other gated':>11}"
    )
    for row in rows:
        spread = "-" if row["median_run_noise_pct"] is None else f"{row['median_run_noise_pct']:.2f}%"
        print(
            f"{row['runs_a_side']:>11}  {spread:>9}  {row['false_alarm_rate']:>16.1%}"
            f"  {row['aa_any_significant_rate']:>15.1%}  {row['detection_rate']:>8.1%}"
            f"  {row['changed_significant_rate']:>11.1%}  {row['other_gated_rate']:>11.1%}"
        )
    print(f"targets at 3 runs a side: false alarms <= 5%, detected >= 90%, other gated 0 ({elapsed:.0f} s)")


if __name__ == "__main__":
    main()
