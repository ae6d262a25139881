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
- ``brickscope._tablerows``: the live report's table (``Session.report``) and the offline one;
- the Perfetto exporter's ``_fastread``: ``brickscope report`` reads back the ``.pftrace``
  the exporter wrote during the run.

Example::

    python tests/native/memcheck_driver.py --steps 6 --out /tmp/memcheck
    # prints one line: the spans produced, the rows read back, the implementation in use
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import threading
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import brickscope as bs
from brickscope import native
from brickscope.cli import main as cli_main
from brickscope.exporter.perfetto import PerfettoSpanExporter
from brickscope.testing import SequentialIdGenerator, capture_spans
from brickscope.trace import attributes as A


def one_step(number: int, stream: object = None) -> None:
    """One step of an instrumented program: every shape of scope the hot path has."""

    @bs.brick("decorated", elements=3)
    def decorated(fail: bool) -> None:
        if fail:
            raise KeyError("decorated failed")

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
        # tokens ended out of order, twice, and a handle ended with an error
        outer = bs.enter_scope(bs.brick("outer"))
        inner = bs.enter_scope(bs.kernel("inner"))
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


def cuda_stream() -> object:
    """A stream on the simulated driver (found through LD_LIBRARY_PATH), current context set."""
    from cuda.bindings import driver

    driver.cuInit(0)
    driver.cuCtxSetCurrent(driver.cuDevicePrimaryCtxRetain(driver.cuDeviceGet(0)[1])[1])
    return int(driver.cuStreamCreate(1)[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", type=Path, required=True, help="a directory for the .pftrace")
    parser.add_argument("--cuda", action="store_true", help="time scopes on the simulated CUDA driver too")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
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
