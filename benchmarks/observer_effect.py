# SPDX-License-Identifier: Apache-2.0
"""Observer effect: how much the file exporters slow the application thread's steps.

A step loop instrumented with brickscope (host clock, deferred sync: a step's end
resolves its spans on the application thread and hands them to the provider's
processors) runs with each case's exporters behind the OTel SDK's
``BatchSpanProcessor``, the way docs/exporters describe configuring them:

- ``null``: an exporter that drops every batch (the peer: the same pipeline, no export work);
- ``perfetto``: ``PerfettoSpanExporter`` writing a ``.pftrace``;
- ``perfetto+flamegraph``: that and ``FlamegraphSpanExporter`` (folded and speedscope
  files, rewritten every second instead of the default ten, the harsher case), each behind
  its own ``BatchSpanProcessor``.

A step is ``bricks`` bricks of four kernels each (plus the step span: ``1 + 5 x bricks``
spans), a fixed amount of Python work split over the kernels (a calibrated loop, not a
spin until a deadline: a step the interpreter was kept from running gets longer), then a
4 ms wait with the interpreter released, as a step waiting for its GPU. ``bricks`` is
chosen so the loop makes about ``--spans-per-s`` spans per second (steps of about 10 ms).

Each case runs in a fresh interpreter for ``--seconds`` after one second of warm-up
(and a full garbage collection after set-up: the imports leave a backlog that the first
full collection clears, once per process, and short windows would catch it);
rounds alternate the cases (the order rotates from round to round), so each sees the
same machine load. The figures are the application thread's step times pooled over the
rounds: median and p99 per case, and their ratios to ``null``'s. Per case also:
``stall_ms_max``, the longest gap a probe thread saw (it sleeps 1 ms in a loop and
records how late it woke: how long it waited for the interpreter, plus the OS's own
delay); ``gc_full_collections`` and ``gc_cpu_ms_max``, the full garbage collections in
the windows and the longest collection's CPU time (every thread waits for it);
``spans_per_s_achieved``, the rate the loop reached (lower than asked when steps are
slower than 10 ms, as on a loaded machine); ``spans_dropped``, what the batch queues
shed.

Usage::

    python benchmarks/observer_effect.py                      # 3,000 and 20,000 spans/s, a table
    python benchmarks/observer_effect.py --json               # one JSON object
    python benchmarks/observer_effect.py --spans-per-s 3000 --rounds 3 --seconds 5
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

CASES = ("null", "perfetto", "perfetto+flamegraph")
KERNELS_PER_BRICK = 4
STEP_WORK_MS = 6.0  # Python work per step, split over its kernels
GPU_WAIT_MS = 4.0  # the step's end: waiting for the GPU with the interpreter released
STEP_MS = STEP_WORK_MS + GPU_WAIT_MS


def bricks_for(spans_per_s: float) -> int:
    """Bricks per step so that steps of about ``STEP_MS`` make ``spans_per_s`` spans a second."""
    spans_per_step = spans_per_s * STEP_MS / 1000
    return max(1, round((spans_per_step - 1) / (1 + KERNELS_PER_BRICK)))


def _calibrate(work_ns: int) -> int:
    """Loop iterations of ``_work`` taking about ``work_ns`` on this machine (best of 5)."""
    n = 10_000
    best = min(_timed(n) for _ in range(5))
    return max(1, round(n * work_ns / best))


def _timed(n: int) -> int:
    start = time.perf_counter_ns()
    _work(n)
    return time.perf_counter_ns() - start


def _work(n: int) -> int:
    total = 0
    for i in range(n):
        total += i & 7
    return total


class _NullExporter:
    """The peer: accepts every batch and does nothing with it."""

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class _GcPauses:
    """Collections of the cyclic GC during the window: (generation, CPU ns).

    CPU time of the collecting thread, not wall time: on a loaded machine the wall time
    of a collection is mostly the OS running something else.
    """

    def __init__(self) -> None:
        self.pauses: list[tuple[int, int]] = []
        self._start = 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.thread_time_ns()
        else:
            self.pauses.append((info["generation"], time.thread_time_ns() - self._start))


class _Probe(threading.Thread):
    """Sleeps 1 ms in a loop and keeps the largest lateness of a wake-up."""

    def __init__(self) -> None:
        super().__init__(name="observer-probe", daemon=True)
        self.worst_ns = 0
        self.late: list[int] = []  # lateness of every wake-up, ns
        self.stopping = False

    def run(self) -> None:
        while not self.stopping:
            before = time.perf_counter_ns()
            time.sleep(0.001)
            late = time.perf_counter_ns() - before - 1_000_000
            self.late.append(late)
            self.worst_ns = max(self.worst_ns, late)


def child(case: str, spans_per_s: float, seconds: float, directory: str) -> dict[str, Any]:
    """One case in this (fresh) interpreter: the step times of the measured window."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    import brickscope as bs

    provider = TracerProvider()
    exporters: list[Any] = []
    if case == "null":
        exporters.append(_NullExporter())
    if case.startswith("perfetto"):
        from brickscope.exporter.perfetto import PerfettoSpanExporter

        exporters.append(PerfettoSpanExporter(os.path.join(directory, "trace.pftrace"), overwrite=True))
    if case.endswith("flamegraph"):
        from brickscope.exporter.flamegraph import FlamegraphSpanExporter

        exporters.append(
            FlamegraphSpanExporter(
                os.path.join(directory, "run.folded"),
                weight="host",
                speedscope_path=os.path.join(directory, "run.speedscope.json"),
                overwrite=True,
                write_interval_millis=1000,
            )
        )
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    session = bs.configure(provider, clock="host", sync_mode="deferred")
    # The imports above leave the collector a backlog that a first full collection clears
    # a few seconds in, once per process: clear it now, so the window sees steady state.
    gc.collect()
    bricks = bricks_for(spans_per_s)
    kernel_iterations = _calibrate(int(STEP_WORK_MS * 1e6 / (bricks * KERNELS_PER_BRICK)))
    names = [f"brick_{i}" for i in range(bricks)]
    probe = _Probe()
    probe.start()
    gc_pauses = _GcPauses()
    gc.callbacks.append(gc_pauses)
    steps: list[int] = []
    step = 0
    warm_until = time.perf_counter() + 1.0
    end = warm_until + seconds
    measuring = False
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        if not measuring and now >= warm_until:
            measuring = True
            probe.worst_ns = 0
            probe.late.clear()
            gc_pauses.pauses.clear()
        start = time.perf_counter_ns()
        with bs.step(step):
            for name in names:
                with bs.brick(name):
                    for _ in range(KERNELS_PER_BRICK):
                        with bs.kernel("k"):
                            _work(kernel_iterations)
            time.sleep(GPU_WAIT_MS / 1000)
        if measuring:
            steps.append(time.perf_counter_ns() - start)
        step += 1
    probe.stopping = True
    probe.join()
    gc.callbacks.remove(gc_pauses)
    full = sum(1 for generation, _ in gc_pauses.pauses if generation == 2)
    stats = session.stats()
    provider.shutdown()
    late = sorted(probe.late)
    return {
        "steps_ns": steps,
        "spans_per_step": 1 + bricks * (1 + KERNELS_PER_BRICK),
        "spans_produced": stats.get("spans_produced"),
        "spans_dropped": stats.get("spans_dropped"),
        "stall_ms_max": probe.worst_ns / 1e6,
        "stall_ms_p99": late[int(0.99 * (len(late) - 1))] / 1e6 if late else 0.0,
        "gc_cpu_ms_max": max((pause for _, pause in gc_pauses.pauses), default=0) / 1e6,
        "gc_full_collections": full,
        "spans_per_s": len(steps) * (1 + bricks * (1 + KERNELS_PER_BRICK)) / (sum(steps) / 1e9),
    }


def _run_child(case: str, spans_per_s: float, seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="observer-") as directory:
        out = subprocess.run(
            [sys.executable, __file__, "--child", case, "--spans-per-s", str(spans_per_s),
             "--seconds", str(seconds), "--dir", directory],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    return json.loads(out.stdout)


def _quantile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(spans_per_s: float, rounds: int, seconds: float, cases: tuple[str, ...]) -> dict[str, Any]:
    """Alternated rounds of every case at one rate; pooled step-time figures and ratios to ``null``."""
    pooled: dict[str, list[int]] = {case: [] for case in cases}
    details: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
    for index in range(rounds):
        order = cases[index % len(cases):] + cases[:index % len(cases)]
        for case in order:
            result = _run_child(case, spans_per_s, seconds)
            pooled[case] += result.pop("steps_ns")
            details[case].append(result)
    out: dict[str, Any] = {"spans_per_s": spans_per_s, "spans_per_step": details[cases[0]][0]["spans_per_step"]}
    base_median = statistics.median(pooled["null"]) if "null" in pooled else None
    base_p99 = _quantile(pooled["null"], 0.99) if "null" in pooled else None
    for case in cases:
        median = statistics.median(pooled[case])
        p99 = _quantile(pooled[case], 0.99)
        out[case] = {
            "steps": len(pooled[case]),
            "median_ms": round(median / 1e6, 3),
            "p99_ms": round(p99 / 1e6, 3),
            "max_ms": round(max(pooled[case]) / 1e6, 3),
            "median_ratio": round(median / base_median, 3) if base_median else None,
            "p99_ratio": round(p99 / base_p99, 3) if base_p99 else None,
            "stall_ms_max": round(max(d["stall_ms_max"] for d in details[case]), 2),
            "stall_ms_p99": round(statistics.median(d["stall_ms_p99"] for d in details[case]), 3),
            "spans_per_s_achieved": round(statistics.median(d["spans_per_s"] for d in details[case])),
            "gc_cpu_ms_max": round(max(d["gc_cpu_ms_max"] for d in details[case]), 2),
            "gc_full_collections": sum(d["gc_full_collections"] for d in details[case]),
            "spans_dropped": sum(d["spans_dropped"] or 0 for d in details[case]),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--spans-per-s", default="3000,20000", help="comma-separated rates (default 3000,20000)")
    parser.add_argument("--rounds", type=int, default=5, help="alternated rounds per rate (default 5)")
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per case per round (default 4)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, float(args.spans_per_s), args.seconds, args.dir)))
        return
    cases = tuple(args.cases.split(","))
    unknown = [case for case in cases if case not in CASES]
    if unknown or "null" not in cases:
        parser.error(f"--cases must include null and name only {', '.join(CASES)}; got {args.cases!r}")
    try:
        rates = [float(rate) for rate in args.spans_per_s.split(",")]
    except ValueError:
        parser.error(f"--spans-per-s takes comma-separated numbers, got {args.spans_per_s!r}")
    if args.rounds < 1 or args.seconds <= 0 or any(rate <= 0 for rate in rates):
        parser.error("--rounds, --seconds and --spans-per-s must be positive")
    results = {
        "python": sys.version.split()[0],
        "load_average": os.getloadavg()[0],
        "rates": [measure(rate, args.rounds, args.seconds, cases) for rate in rates],
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"Python {results['python']}, load average {results['load_average']:.2f}")
    for rate in results["rates"]:
        print(f"\n~{rate['spans_per_s']:.0f} spans/s ({rate['spans_per_step']} spans a step)")
        print(
            f"{'case':<22}{'steps':>7}{'spans/s':>9}{'median ms':>11}{'p99 ms':>9}{'median x':>10}{'p99 x':>8}"
            f"{'stall max ms':>14}{'full GCs':>10}{'GC max ms':>11}{'dropped':>9}"
        )
        for case in cases:
            r = rate[case]
            print(
                f"{case:<22}{r['steps']:>7}{r['spans_per_s_achieved']:>9}{r['median_ms']:>11.3f}{r['p99_ms']:>9.3f}"
                f"{r['median_ratio']:>10.3f}{r['p99_ratio']:>8.3f}{r['stall_ms_max']:>14.2f}"
                f"{r['gc_full_collections']:>10}{r['gc_cpu_ms_max']:>11.2f}{r['spans_dropped']:>9}"
            )


if __name__ == "__main__":
    main()
