# SPDX-License-Identifier: Apache-2.0
"""A program that calls every C entry point of brickscope with modest sizes, for the memory
checker (``tests/native/memcheck.py`` runs it under valgrind, once with the C accelerators
and once with ``BRICKSCOPE_PURE_PYTHON=1``).

What it exercises, per accelerator (docs/native.md):

- ``brickscope._hotpath``: the factories (cached and per-call bricks, kernels, layers,
  steps), entries and shared scope objects nested, re-entered and interleaved by generators,
  decorators, errors, ``enter_scope``/``exit_scope`` tokens ended out of order, twice, and
  from another thread, ``start_brick``/``end_brick``, disabled scopes, unsampled steps (the
  unsampled fold), threads and asyncio tasks, a reconfiguration mid-scope; at each sync the
  ``SpanMaker`` builds the spans and ``fold_sums`` folds them; with the simulated CUDA
  driver (``--cuda``), ``CudaMarker`` times the scopes;
- ``brickscope._tablerows``: the live report's table (``Session.report``), a table of the
  run's spans (``TableBuilder.add``) and the offline one (``add_records``);
- the Perfetto exporter's ``_fastread``: ``brickscope report`` reads back the ``.pftrace``
  the exporter wrote during the run; a trace of more spans than the reader holds back is
  written and read; and every ``.pftrace`` of the golden traces and of the bad-input
  corpus (cut short, bytes flipped, nested too deep) is read, errors included.

Example::

    python tests/native/memcheck_driver.py --steps 6 --out /tmp/memcheck
    # prints one line: the spans produced, the traces read back, the implementation in use
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import threading
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import brickscope as bs
from brickscope import native
from brickscope.analysis._table import TableBuilder
from brickscope.cli import main as cli_main
from brickscope.exporter.perfetto import PerfettoSpanExporter
from brickscope.offline import TraceFileError, open_records, open_spans
from brickscope.testing import SequentialIdGenerator, capture_spans, gpu_attributes, make_span
from brickscope.trace import attributes as A

TESTS = Path(__file__).resolve().parents[1]
#: Traces read as they are: the golden ones and the bad-input corpus's.
TRACES = sorted([*(TESTS / "golden").glob("*.pftrace"), *(TESTS / "corpus" / "files").glob("pftrace-*")])


def one_step(number: int, stream: object = None) -> None:
    """One step of an instrumented program: every shape of scope the hot path has."""

    @bs.brick("decorated", elements=3)
    def decorated(fail: bool) -> None:
        if fail:
            raise KeyError("decorated failed")

    @bs.brick("plain")  # the per-use entry as a decorator
    def plain() -> None:
        pass

    with bs.step(number), bs.layer(number % 3):
        with bs.brick("rms_norm", stream=stream):
            with bs.kernel("rms_kernel"), bs.kernel("launch", grid=(4, 1), block=128, shared_mem_bytes=64):
                pass
        with bs.brick("attention_score", category="attention", elements=4096, heads=8):
            bs.event("eos", token=number)
        with bs.brick("qkv", "matmul", 1 << 70):  # the per-call Brick built in C, elements past 64 bits
            pass
        shared = bs.brick("shared")
        with shared, shared:  # one shared object entered twice
            pass
        try:
            with bs.brick("raises", category="ffn"):
                raise ValueError(f"bad input {number}")
        except ValueError:
            pass
        decorated(False)
        with contextlib.suppress(KeyError):
            decorated(True)
        plain()
        repr(bs.brick("rms_norm"))
        # tokens ended out of order, twice, and a handle ended with an error
        outer = bs.enter_scope(bs.brick("outer"))
        inner = bs.enter_scope(bs.kernel("inner"))
        repr(inner)
        with bs.brick("innermost"):
            bs.exit_scope(outer)
        bs.exit_scope(inner)
        bs.exit_scope(inner)
        bs.exit_scope("not a token")  # misuse, counted
        handle = bs.start_brick("handle", elements=2)
        bs.end_brick(handle, RuntimeError("handle failed"))

        # two generators interleaving one shared scope object
        def gen() -> object:
            with shared:
                yield 1
                yield 2

        first, second = gen(), gen()
        next(first)
        next(second)
        for g in (first, second):
            for _ in g:
                pass

        # a token opened here and ended on another thread
        crossing = bs.enter_scope(bs.brick("crossing"))
        thread = threading.Thread(target=bs.exit_scope, args=(crossing,))
        thread.start()
        thread.join()
        bs.record_gpu("external", 1_500_000, 1_500_700, elements=4)


def workload(steps: int, tracer_provider: TracerProvider, stream: object = None, clock: str = "host") -> dict[str, int]:
    """Run ``steps`` steps (and the rest of the scope shapes) into ``tracer_provider``."""
    with capture_spans(tracer_provider, clock=clock, step_sampling="every=2") as captured:
        for number in range(steps):
            one_step(number, stream)
        bs.disable()
        with bs.brick("while_disabled"), bs.kernel("k"):
            pass
        bs.enable()

        def worker() -> None:
            for number in range(3):
                with bs.brick("in_thread"), bs.kernel(f"k{number}"):
                    pass

        threads = [threading.Thread(target=worker) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        async def task(name: str) -> None:
            with bs.brick(name):
                await asyncio.sleep(0)
                with bs.kernel("in_task"):
                    await asyncio.sleep(0)

        async def tasks() -> None:
            await asyncio.gather(*(task(f"task_{n}") for n in range(3)))

        asyncio.run(tasks())
        bs.sync()
        with contextlib.redirect_stdout(io.StringIO()):
            captured.session.report()  # the live table's rows
        stats = captured.session.stats()
        spans = captured.spans
        table = TableBuilder()
        table.add_all(spans)
        table.build()
        gpu_timed = sum(1 for span in spans if A.GPU_DURATION_NS in (span.attributes or {}))
    return {"spans": len(spans), "gpu_timed": gpu_timed, "scope_repairs": stats["scope_repairs"], "misuse": stats["misuse"]}


def reconfigure_mid_scope() -> None:
    """A scope open across configure(): it ends in the session it began in."""
    with capture_spans(TracerProvider()):
        token = bs.enter_scope(bs.brick("across"))
        with capture_spans(TracerProvider()):
            bs.exit_scope(token)
            with bs.brick("after"):
                pass


def large_trace(path: Path, spans: int) -> None:
    """A trace of ``spans`` GPU-timed kernel spans under one step each 100, written directly."""
    exporter = PerfettoSpanExporter(path, overwrite=True)
    batch: list[Any] = []
    for number in range(spans):
        start = 1_700_000_000_000_000_000 + number * 1_000
        if number % 100 == 0:
            step_id = 0x10_0000 + number
            batch.append(make_span(step_id, "step", start, start + 100_000, attributes={A.SCOPE_KIND: A.SCOPE_KIND_STEP}))
        batch.append(make_span(0x20_0000 + number, f"k{number % 7}", start, start + 900, step_id, attributes=gpu_attributes(start + 50, 900, 700)))
    exporter.export(batch)
    exporter.shutdown()


def read_traces(paths: list[Path]) -> dict[str, int]:
    """Read each trace as spans and as records (truncated ones allowed): spans, and refusals."""
    read = refused = 0
    for path in paths:
        for opener in (open_spans, open_records):
            try:
                with opener(path, allow_truncated=True) as stream:
                    read += sum(1 for _ in stream)
            except TraceFileError:
                refused += 1
    return {"read": read, "refused": refused}


def cuda_stream() -> int:
    """A stream on the simulated driver (found through LD_LIBRARY_PATH), current context set."""
    from cuda.bindings import driver

    driver.cuInit(0)
    driver.cuCtxSetCurrent(driver.cuDevicePrimaryCtxRetain(driver.cuDeviceGet(0)[1])[1])
    return int(driver.cuStreamCreate(1)[1])


def cuda_failures(stream: int) -> int:
    """Scopes whose event record fails on the simulated driver: the spans that say so."""
    import os
    import sys

    sys.path.insert(0, str(TESTS))
    from simdriver import SimDriver

    sim = SimDriver(Path(os.environ["LD_LIBRARY_PATH"].split(":")[0]) / "libcuda.so.1")
    with capture_spans(TracerProvider(), clock="cuda") as captured:
        for fail in (False, True, False, True):  # the stream set up first: then the C marker's record fails
            if fail:
                sim.inject_invalid_handle(1)  # the next event record fails
            with bs.brick("record_fails", stream=stream), bs.kernel("inside"):
                sim.enqueue_kernel(stream, 5_000)
        return sum(1 for span in captured.spans if A.GPU_DURATION_NS not in (span.attributes or {}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", type=Path, required=True, help="a directory for the .pftrace")
    parser.add_argument("--cuda", action="store_true", help="time scopes on the simulated CUDA driver too")
    parser.add_argument(
        "--prepare", action="store_true", help="only write the large trace into --out (the memory checker does it outside valgrind)"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    large = args.out / "large.pftrace"
    if args.prepare or not large.exists():
        large_trace(large, 9_000)  # more than the 8,192 spans the reader holds back
    if args.prepare:
        return 0
    trace = args.out / "driver.pftrace"
    provider = TracerProvider(id_generator=SequentialIdGenerator())
    exporter = PerfettoSpanExporter(trace, overwrite=True)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    result = workload(args.steps, provider)
    provider.shutdown()
    reconfigure_mid_scope()
    if args.cuda:
        stream = cuda_stream()
        timed = workload(args.steps, TracerProvider(), stream=stream, clock="cuda")
        result["cuda_spans"], result["cuda_gpu_timed"] = timed["spans"], timed["gpu_timed"]
        result["cuda_untimed_after_errors"] = cuda_failures(stream)
    result["traces"] = read_traces([*TRACES, large])  # type: ignore[assignment]
    report = io.StringIO()
    with contextlib.redirect_stdout(report):
        code = cli_main(["report", str(trace)])  # _fastread, then the offline table's rows
    result["report_exit"] = code
    result["report_lines"] = len(report.getvalue().splitlines())
    result["implementation"] = {part: found.in_use for part, found in native.implementations().items() if not part.startswith("sdk.")}  # type: ignore[assignment]
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
