# SPDX-License-Identifier: Apache-2.0
"""A small instrumented decode loop for the integration tests, configured only by the environment.

Example::

    OTEL_TRACES_EXPORTER=otlp OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317 \\
        python decoder_app.py --steps 3 --layers 2 --report out.json

Each step is ``step(i) > layer(l) > {rms_norm, attention, ffn_down}``, each brick with
one kernel carrying a launch configuration, all under a user span ``generate``:
``1 + 7 * layers`` brickscope spans per step. With ``--simdriver LIB`` (the simulated
CUDA driver, also on ``LD_LIBRARY_PATH``, and ``BRICKSCOPE_CLOCK=cuda``) every kernel
enqueues simulated GPU work of a known duration on a stream of its own, so the
bricks' GPU time is known: see ``KERNEL_NS``.

Phases (``--phases``) are separated by a handshake for fault tests: the app prints
``PHASE <k> <seconds>`` and waits for a line on stdin; an OTLP gRPC export that fails
prints ``EXPORT_FAILED <signal>`` to stderr. ``--annotate`` adds attributes and
events inside the attention bricks the way OTel users do (``trace.get_current_span()``) and
with ``bs.event``. ``--spawn-child`` starts a
second rank inside step 0 with the trace context in ``TRACEPARENT``. ``--no-setup``
leaves the set-up to ``opentelemetry-instrument``: the app then only uses scopes.
The report (JSON) says what the app did: trace id, span ids of its steps, timings,
brickscope's counters.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from opentelemetry import trace

import brickscope as bs

#: (brick, category, kernel, grid, block, shared memory, simulated GPU ns)
BRICKS = (
    ("rms_norm", "norm", "rms_norm_fwd", (4, 1, 1), (128, 1, 1), 0, 20_000),
    ("attention", "attention", "flash_attn_fwd", (8, 4, 1), (128, 1, 1), 49_152, 300_000),
    ("ffn_down", "ffn", "gemm_down", (16, 1, 1), (256, 1, 1), 16_384, 100_000),
)
KERNEL_NS = {brick: ns for brick, *_, ns in BRICKS}
ELEMENTS = 4096


def simulated_gpu(lib: str) -> tuple[object, int]:
    """The simulator's test hooks and a non-blocking stream on device 0."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from cuda.bindings import driver as drv
    from simdriver import SimDriver

    drv.cuInit(0)
    drv.cuCtxPushCurrent(drv.cuDevicePrimaryCtxRetain(0)[1])
    stream = int(drv.cuStreamCreate(0x1)[1])
    drv.cuCtxPopCurrent()
    return SimDriver(Path(lib)), stream


def decode_step(step: int, layers: int, sim: object | None, stream: int | None, annotate: bool = False) -> str:
    """One step of the loop; returns the step span's id (hex), as other processes would see it."""
    with bs.step(step):
        step_span_id = format(trace.get_current_span().get_span_context().span_id, "016x")
        for index in range(layers):
            with bs.layer(index):
                for brick, category, kernel, grid, block, smem, ns in BRICKS:
                    with bs.brick(brick, category=category, elements=ELEMENTS, stream=stream):
                        if annotate and brick == "attention":  # what OTel users write inside a brick
                            trace.get_current_span().set_attribute("app.kv_blocks", 10 * step + index)
                            trace.get_current_span().add_event("kv.lookup", {"hit": index % 2 == 0})
                        with bs.kernel(kernel, grid=grid, block=block, shared_mem_bytes=smem):
                            if annotate and brick == "attention":
                                bs.event("launch.retry", attempt=1)
                            if sim is not None:
                                sim.enqueue_kernel(stream, ns)
    return step_span_id


def spawn_child(args: argparse.Namespace) -> subprocess.Popen:
    """Start rank 1 with this context (the open step) in TRACEPARENT, as a launcher would."""
    from brickscope.propagation import inject_into_environment

    env = inject_into_environment()
    env.update(RANK="1", LOCAL_RANK="1", WORLD_SIZE="2")
    child_report = str(Path(args.report).with_suffix(".child.json"))
    return subprocess.Popen(
        [sys.executable, __file__, "--steps", str(args.steps), "--layers", str(args.layers), "--report", child_report,
         "--no-generate-span"],
        env=env,
    )  # fmt: skip


def report_export_failures() -> None:
    """Print ``EXPORT_FAILED <signal>`` to stderr each time an OTLP gRPC exporter gives a batch up.

    The exporter logs that failure, but its logger drops a record equal to the last one
    (whatever the signal) for up to 20 s; this filter, put first, sees every record. Fault
    tests wait for the line instead of sleeping through the exporter's retries.
    """

    class SeeFailures(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if str(record.msg).startswith("Failed to export") and record.args:
                print(f"EXPORT_FAILED {record.args[0]}", file=sys.stderr, flush=True)
            return True

    logging.getLogger("opentelemetry.exporter.otlp.proto.grpc.exporter").filters.insert(0, SeeFailures())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2, help="steps per phase")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--phases", type=int, default=1)
    parser.add_argument("--report", required=True)
    parser.add_argument("--simdriver", help="path of the simulated libcuda.so.1")
    parser.add_argument("--spawn-child", action="store_true")
    parser.add_argument("--annotate", action="store_true", help="attributes and events added inside the bricks")
    parser.add_argument("--no-setup", action="store_true", help="opentelemetry-instrument configured brickscope")
    parser.add_argument("--no-generate-span", action="store_true", help="steps are roots (or TRACEPARENT's children)")
    parser.add_argument("--pause-at-end", action="store_true", help="the handshake after the last phase too")
    args = parser.parse_args()

    report_export_failures()
    session = None if args.no_setup else bs.configure()
    sim, stream = simulated_gpu(args.simdriver) if args.simdriver else (None, None)
    tracer = trace.get_tracer("decoder_app")
    report: dict = {"pid": os.getpid(), "steps": [], "phase_seconds": [], "stream": stream}
    child = None

    def run_phase(phase: int) -> None:
        started = time.perf_counter()
        for number in range(phase * args.steps, (phase + 1) * args.steps):
            if args.spawn_child and number == 0:
                with bs.step(0):  # the step the child joins
                    report["steps"].append(format(trace.get_current_span().get_span_context().span_id, "016x"))
                    nonlocal child
                    child = spawn_child(args)
                    child.wait(timeout=60)
                continue
            report["steps"].append(decode_step(number, args.layers, sim, stream, args.annotate))
        if session is not None:
            session.sync()  # the app's own sync point: waits for the GPU, not for exporters
        report["phase_seconds"].append(time.perf_counter() - started)

    def run() -> None:
        for phase in range(args.phases):
            run_phase(phase)
            if phase + 1 < args.phases or args.pause_at_end:
                print(f"PHASE {phase} {report['phase_seconds'][-1]:.6f}", flush=True)
                sys.stdin.readline()

    if args.no_generate_span:
        run()
        report["trace_id"] = None
    else:
        with tracer.start_as_current_span("generate") as span:
            report["trace_id"] = format(span.get_span_context().trace_id, "032x")
            run()
    if session is not None:
        report["resource"] = dict(session.tracer_provider.resource.attributes)
        started = time.perf_counter()
        bs.shutdown()  # emits what is pending and shuts the provider down (its exporters flush)
        report["shutdown_seconds"] = time.perf_counter() - started
        report["stats"] = session.stats()
    if child is not None:
        report["child_returncode"] = child.returncode
    Path(args.report).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
