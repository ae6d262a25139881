# SPDX-License-Identifier: Apache-2.0
"""Measure CudaTimer's host-timeline alignment error and mark() cost on the simulator.

Example::

    .venv/bin/python tests/gpu/measure.py            # prints the numbers quoted in docs/cuda.md

Not a test (pytest does not collect it): the numbers depend on the machine and
its load. Anchor strategies compared, each against the simulator's true event
completion time:

* ``poll``: what CudaTimer does: midpoint of [before cuEventRecord, cuEventQuery
  first reports completion], narrowest of ANCHOR_TRIES attempts.
* ``sync``: midpoint of [before cuEventRecord, after cuEventSynchronize].
* ``after-sync``: the host time right after cuEventSynchronize returns.
"""

from __future__ import annotations

import atexit
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simdriver import SimDriver, build_simdriver


def summary(name: str, values: list[int]) -> str:
    """Signed median, 99th percentile and maximum of |error|."""
    magnitudes = sorted(abs(v) for v in values)
    p99 = magnitudes[int(len(magnitudes) * 0.99) - 1]
    return (
        f"{name:<22} n={len(values):5d}  median {statistics.median(values):+6.0f} ns  "
        f"p99 |e| {p99:6d} ns  max |e| {magnitudes[-1]:6d} ns"
    )


def main() -> None:
    directory = tempfile.mkdtemp(prefix="simcuda-")
    atexit.register(shutil.rmtree, directory, True)  # the library stays mapped until exit
    sim = SimDriver.preload(build_simdriver(Path(directory)))
    from cuda.bindings import driver as drv

    from brickscope._gpu import CudaTimer, _timer

    offset = _timer._EPOCH_OFFSET_NS
    timer = CudaTimer()
    ctx = drv.cuDevicePrimaryCtxRetain(0)[1]
    drv.cuCtxSetCurrent(ctx)
    stream = drv.cuStreamCreate(1)[1]
    ref = timer.stream_ref(stream)
    c = timer._contexts[ref.ctx]

    # 1. Anchor error of each strategy: estimate - true completion time.
    errors: dict[str, list[int]] = {"poll (CudaTimer)": [], "sync midpoint": [], "after-sync": []}
    windows: list[int] = []
    event = drv.cuEventCreate(1)[1]
    anchor_stream = c.anchor_stream
    for _ in range(2000):
        with c.lock:
            anchor = timer._anchor(c)
        windows.append(anchor.window_ns)
        errors["poll (CudaTimer)"].append(anchor.host_ns - (sim.event_time_ns(anchor.event) + offset))
        t0 = _timer.host_epoch_ns()
        drv.cuEventRecord(event, anchor_stream)
        drv.cuEventSynchronize(event)
        t1 = _timer.host_epoch_ns()
        truth = sim.event_time_ns(event) + offset
        errors["sync midpoint"].append((t0 + t1) // 2 - truth)
        errors["after-sync"].append(t1 - truth)
    print("anchor error (estimate - truth):")
    for name, values in errors.items():
        print("  " + summary(name, values))
    print(f"  anchor window: median {statistics.median(windows):.0f} ns, max {max(windows)} ns")

    # 2. End to end: host_time_ns of marks on a stream with queued work vs the truth.
    mark_errors: list[int] = []
    for _ in range(50):
        timer.reanchor()
        marks = []
        for _ in range(100):
            marks.append(timer.mark(ref))
            sim.enqueue_kernel(ref.handle, 20_000)
        timer.wait(marks[-1])
        for m in marks:
            mark_errors.append(timer.host_time_ns(m) - (sim.event_time_ns(timer._marks[m][0]) + offset))
            timer.release(m)
    print("mark host time error (host_time_ns - truth):")
    print("  " + summary("marks, fresh anchor", mark_errors))

    # 3. mark() cost: median per call, with and without the driver's own cuEventRecord.
    clock = time.perf_counter_ns
    raw_event = drv.cuEventCreate(0)[1]
    cu = drv.CUstream(ref.handle)

    def median_ns(fn, *args, rounds: int = 50, n: int = 2000) -> float:
        samples = []
        for _ in range(rounds):
            t0 = clock()
            for _ in range(n):
                fn(*args)
            samples.append((clock() - t0) / n)
        return statistics.median(samples)

    record = median_ns(drv.cuEventRecord, raw_event, cu)
    marks_only: list[float] = []
    for _ in range(50):
        t0 = clock()
        ids = [timer.mark(ref) for _ in range(2000)]
        marks_only.append((clock() - t0) / 2000)
        for m in ids:
            timer.release(m)
    mark = statistics.median(marks_only)
    release = median_ns(lambda: timer.release(timer.mark(ref))) - mark
    print("cost (median ns per call):")
    print(f"  cuEventRecord through cuda-bindings (incl. simulator): {record:.0f}")
    print(f"  CudaTimer.mark():                                       {mark:.0f}")
    print(f"  mark() overhead beyond cuEventRecord:                   {mark - record:.0f}")
    print(f"  CudaTimer.release():                                    {release:.0f}")
    timer.close()


if __name__ == "__main__":
    main()
