# SPDX-License-Identifier: Apache-2.0
"""Always-on in production: what brickscope costs at LLM-server rates, and in launch-bound loops.

Two measurements, each in one process, cases interleaved:

``cpu_pct_of_core``: a decode server at 50 tokens/s with 320 bricks per token (32
layers x 10 bricks, host clock) is 16,000 bricks/s. Each case runs paced at that
rate: set-up and 1 s of warm-up (then a flush), then a measured window of
``--seconds`` that ends when the export pipelines have flushed what it produced.
The CPU time of every thread over the window (the app, brickscope's resolver
thread, the SDK's BatchSpanProcessor and metric reader threads, OTLP/HTTP protobuf
encoding, the final flush), minus the same paced loop without brickscope measured
in the same round, is the percent of one core brickscope plus export costs, split
by thread in ``cpu_pct_of_core_by_thread``. Rounds interleave the baseline and every
case; the figure is the median round (``--rounds``, every round listed). Spans and
metrics (``--metric-export-interval-millis``, 1 s by default: 60x the SDK's default,
the harsh case) go by OTLP/HTTP to a receiver on 127.0.0.1 in a separate process
(its CPU is not counted). Spans go through brickscope-exporter-otlp's ``OTLPHttpSpanExporter``
(the official OTLP/HTTP exporter with brickscope's encoder, what docs/deploy.md recommends);
``cpu_pct_of_core_official_otlp_exporter`` gives the span-exporting cases again with the
official exporter, measured in the same rounds. Cases: ``metrics_only`` (the OTel sampler keeps no trace;
every brick still in the metrics), ``metrics_only_histogram_all`` (the same with
``duration_histogram="all"``: one OTel SDK ``Histogram.record`` per brick, the
distribution's cost), ``sampled_1_in_100`` (``step_sampling="every=100"``; windows of
an even number of seconds hold exactly one sampled step per 2 s), ``full`` (every
step traced); all with ``resolver="thread"``.

``launch_bound_overhead_pct``: the decode step of ``sync_modes.py`` (one brick
per kernel, 5 us launch cost spun by the simulated driver, CUDA events) at
several kernel durations, in deferred mode with inline resolution (the default,
and what docs/deploy.md recommends for launch-bound loops), as the median step
time's overhead over the uninstrumented loop, in percent;
``launch_bound_overhead_pct_resolver_thread`` is the same with ``resolver="thread"``
(under the GIL the thread cannot overlap the launches, and costs more than inline
there).

Usage::

    python benchmarks/always_on.py            # a table
    python benchmarks/always_on.py --json     # one JSON object (keys above, plus details)
    python benchmarks/always_on.py --cpu-only --rounds 3 --seconds 4   # the CPU cases only, quicker

Uses the simulated driver (tests/simdriver, built with the system C compiler):
brickscope's host-side cost against cheap C driver calls, not a real GPU.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

from _simcuda import load_simdriver, make_stream
from sync_modes import decode_step, median_step_ns

BRICKS_PER_S = 16_000
LAYERS, BRICKS = 32, 10
NAMES = (
    "rms_norm", "qkv_projection", "rope", "attention_score", "attention_softmax",
    "attention_output", "output_projection", "ffn_gate", "ffn_up", "ffn_down",
)  # fmt: skip
CASES = ("metrics_only", "metrics_only_histogram_all", "sampled_1_in_100", "full")
#: The cases measured a second time with the official OTLP span exporter.
OFFICIAL_EXPORTER_CASES = ("sampled_1_in_100", "full")
OFFICIAL = "_official_exporter"  # the suffix of their labels
KERNEL_US = (3, 5, 10, 20, 50)

# A loopback OTLP/HTTP receiver in its own process: reads each request, answers 200
# with an empty (valid) protobuf response, and prints the bytes it received on exit
# (all, and the span requests' bodies).
RECEIVER = textwrap.dedent(
    """
    import sys, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    received = {"bytes": 0, "requests": 0, "trace_bytes": 0}
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            received["bytes"] += len(body)
            received["requests"] += 1
            if self.path == "/v1/traces":
                received["trace_bytes"] += len(body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()
        def log_message(self, *args):
            pass
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()
    print(received["bytes"], received["requests"], received["trace_bytes"], flush=True)
    """
)


class Receiver:
    def __enter__(self) -> Receiver:
        self.process = subprocess.Popen(
            [sys.executable, "-c", RECEIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.endpoint = f"http://127.0.0.1:{int(self.process.stdout.readline())}"
        return self

    def __exit__(self, *exc: Any) -> None:
        out, _ = self.process.communicate(timeout=30)
        self.bytes_received, _, self.trace_bytes_received = (int(field) for field in out.split())


def paced_tokens(bs: Any, seconds: float, first_step: int) -> int:
    """Decode tokens at 50/s (320 bricks each) for ``seconds``; returns bricks recorded."""
    period = LAYERS * BRICKS / BRICKS_PER_S
    tokens = round(seconds / period)
    start = time.perf_counter()
    for token in range(tokens):
        if bs is None:
            for _ in range(LAYERS):
                for _ in NAMES:
                    pass
        else:
            with bs.step(first_step + token):
                for index in range(LAYERS):
                    with bs.layer(index):
                        for name in NAMES:
                            with bs.brick(name, elements=1):
                                pass
        delay = start + (token + 1) * period - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    return tokens * LAYERS * BRICKS


class ThreadClocks:
    """CPU time of each live thread (by name) and of the whole process, read together."""

    def __init__(self) -> None:
        self.process = time.process_time()
        self.threads: dict[str, float] = {}
        for thread in threading.enumerate():
            try:
                clock = time.pthread_getcpuclockid(thread.ident)
                cpu = time.clock_gettime(clock)
            except (OSError, TypeError):  # the thread ended meanwhile
                continue
            self.threads[_role(thread)] = self.threads.get(_role(thread), 0.0) + cpu

    def since(self, before: ThreadClocks) -> dict[str, float]:
        """CPU seconds per role between ``before`` and now; ``other``: threads that came and
        went between the two readings (the rest of the process total)."""
        spent = {role: cpu - before.threads.get(role, 0.0) for role, cpu in self.threads.items()}
        spent = {role: cpu for role, cpu in spent.items() if cpu > 0}
        spent["other"] = max(0.0, (self.process - before.process) - sum(spent.values()))
        return spent


def _role(thread: threading.Thread) -> str:
    """The thread's role in the measurement: the names the SDK and brickscope give their threads."""
    if thread is threading.main_thread():
        return "application"
    name = thread.name
    for prefix, role in (
        ("brickscope-resolver", "resolver"),
        ("OtelBatchSpan", "batch_span_processor"),
        ("OtelPeriodicExportingMetricReader", "metric_reader"),
    ):
        if name.startswith(prefix):
            return role
    return "other"


class GcClock:
    """Wall time the cyclic GC spent collecting (any thread), through ``gc.callbacks``."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started
            self.collections += 1


def flush_apart(session: Any, meters: Any) -> float:
    """Flush spans (every span of the window resolved, batched, encoded and sent) and
    metrics (collected and sent once more) on a thread of its own; its CPU seconds."""
    spent = []

    def flush() -> None:
        cpu = time.thread_time()
        session.force_flush()
        meters.force_flush()
        spent.append(time.thread_time() - cpu)

    thread = threading.Thread(target=flush, name="window-flush")
    thread.start()
    thread.join()
    return spent[0]


#: Tokens paced before the measured window of each case: imports, caches and the first
#: sampled step are warm, and a flush empties every queue before the window opens.
WARMUP_TOKENS = 50


def cpu_case(label: str, endpoint: str, seconds: float, export_interval_millis: int) -> dict[str, Any]:
    """CPU of one paced window of a case (``label``: the case, with the ``OFFICIAL`` suffix
    for the official span exporter): every thread of the process from the window's first
    token until the export pipelines have flushed what it produced.

    Set-up, warm-up and shutdown are outside the window (a server pays them once): the
    window holds the steady state, and ends with a flush of spans and metrics so every
    span it produced is encoded and sent inside it. Step numbers continue from the
    warm-up, so a window of ``2 * k`` seconds holds exactly ``k`` steps sampled 1 in 100.
    """
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as OfficialSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

    import brickscope as bs
    from brickscope.exporter.otlp import OTLPHttpSpanExporter

    case = label.removesuffix(OFFICIAL)
    span_exporter = OfficialSpanExporter if label.endswith(OFFICIAL) else OTLPHttpSpanExporter
    gc_clock = GcClock()
    if case == "baseline":
        paced_tokens(None, WARMUP_TOKENS * LAYERS * BRICKS / BRICKS_PER_S, 0)
        before = ThreadClocks()
        bricks = paced_tokens(None, seconds, WARMUP_TOKENS)
        return {"cpu_s": ThreadClocks().since(before), "bricks": bricks}
    cpu0 = time.process_time()
    provider = TracerProvider(sampler=ALWAYS_OFF if case.startswith("metrics_only") else ALWAYS_ON)
    provider.add_span_processor(BatchSpanProcessor(span_exporter(endpoint=f"{endpoint}/v1/traces")))
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics"), export_interval_millis=export_interval_millis
    )
    meters = MeterProvider(metric_readers=[reader])
    session = bs.configure(
        provider,
        clock="host",
        meter_provider=meters,
        resolver="thread",
        step_sampling="every=100" if case == "sampled_1_in_100" else None,
        duration_histogram="all" if case == "metrics_only_histogram_all" else None,
        max_delay_millis=100,
    )
    paced_tokens(bs, WARMUP_TOKENS * LAYERS * BRICKS / BRICKS_PER_S, 0)
    session.force_flush()
    meters.force_flush()
    setup_cpu = time.process_time() - cpu0
    stats_before = session.stats()
    gc.callbacks.append(gc_clock)
    before = ThreadClocks()
    try:
        bricks = paced_tokens(bs, seconds, WARMUP_TOKENS)
        flush_s = flush_apart(session, meters)
        cpu = ThreadClocks().since(before)
        cpu["other"] = max(0.0, cpu.get("other", 0.0) - flush_s)
        cpu["final_flush"] = flush_s
    finally:
        gc.callbacks.remove(gc_clock)
    stats = session.stats()
    cpu1 = time.process_time()
    session.shutdown()
    provider.shutdown()
    meters.shutdown()
    window = {key: stats[key] - stats_before.get(key, 0) for key in stats if isinstance(stats[key], int)}
    return {
        "cpu_s": cpu,
        "bricks": bricks,
        "gc_s": gc_clock.seconds,
        "gc_collections": gc_clock.collections,
        "setup_warmup_shutdown_cpu_s": setup_cpu + time.process_time() - cpu1,
        "spans_emitted": window["spans_emitted"],
        "forced_syncs": window["forced_syncs"],
        # brickscope's self-telemetry over the window, for comparison with what was measured here
        "export_bytes_reported": stats["export_bytes"],
        "record_cpu_ns_estimated_per_brick": round(window["record_cpu_ns_estimated"] / bricks),
        "resolution_cpu_ns_per_brick": round(
            (window["resolution_cpu_ns_app"] + window["resolution_cpu_ns_worker"]) / bricks
        ),
    }


def measure_cpu(seconds: float, rounds: int, export_interval_millis: int = 1000) -> dict[str, Any]:
    """Rounds of [baseline, each case], interleaved; per case the median round (and every
    round), in percent of one core at 16,000 bricks/s, with its CPU split by thread."""
    labels = [*CASES, *(case + OFFICIAL for case in OFFICIAL_EXPORTER_CASES)]
    results: dict[str, list[float]] = {label: [] for label in labels}
    by_thread: dict[str, list[dict[str, float]]] = {label: [] for label in labels}
    details: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    reported = 0
    with Receiver() as receiver:
        for _ in range(rounds):
            base = cpu_case("baseline", receiver.endpoint, seconds, export_interval_millis)
            base_s_per_brick = sum(base["cpu_s"].values()) / base["bricks"]
            for label in labels:
                run = cpu_case(label, receiver.endpoint, seconds, export_interval_millis)
                per_brick = {role: cpu / run["bricks"] for role, cpu in run["cpu_s"].items()}
                per_brick["application"] = per_brick.get("application", 0.0) - base_s_per_brick
                extra_s_per_brick = sum(per_brick.values())
                results[label].append(100 * extra_s_per_brick * BRICKS_PER_S)
                by_thread[label].append({role: 100 * v * BRICKS_PER_S for role, v in per_brick.items()})
                detail = {k: v for k, v in run.items() if k != "cpu_s"}
                detail["cpu_ns_per_brick_measured"] = round(extra_s_per_brick * 1e9)
                detail["baseline_cpu_ns_per_brick"] = round(base_s_per_brick * 1e9)
                details[label].append(detail)
                reported += run["export_bytes_reported"]
    medians = {label: statistics.median(values) for label, values in results.items()}
    median_round = {
        label: min(range(rounds), key=lambda i, label=label: abs(results[label][i] - medians[label])) for label in labels
    }
    return {
        "cpu_pct_of_core": {case: round(medians[case], 2) for case in CASES},
        "cpu_pct_of_core_official_otlp_exporter": {
            case: round(medians[case + OFFICIAL], 2) for case in OFFICIAL_EXPORTER_CASES
        },
        "cpu_pct_of_core_statistic": f"median of {rounds} rounds of {seconds:g} s (baseline subtracted per round)",
        "cpu_pct_of_core_all_rounds": {label: [round(v, 2) for v in values] for label, values in results.items()},
        "cpu_pct_of_core_by_thread": {
            label: {role: round(statistics.median(r.get(role, 0.0) for r in rounds_), 3) for role in _roles(rounds_)}
            for label, rounds_ in by_thread.items()
        },
        "cpu_details": {label: details[label][median_round[label]] for label in labels},
        # brickscope.export.bytes over every case and round against the receiver's count
        "export_bytes_received": receiver.bytes_received,
        "span_export_bytes_received": receiver.trace_bytes_received,
        "span_export_bytes_reported_by_brickscope": reported,
        "metric_export_interval_millis": export_interval_millis,
    }


def _roles(rounds: list[dict[str, float]]) -> list[str]:
    return sorted({role for r in rounds for role in r})


def measure_launch_bound(steps: int, rounds: int, launch_us: float) -> dict[str, Any]:
    from opentelemetry.sdk.trace import TracerProvider

    import brickscope as bs

    sim = load_simdriver()
    drv, stream = make_stream()
    handle = int(stream)
    launch_ns = int(launch_us * 1000)
    thread: dict[str, float] = {}
    inline: dict[str, float] = {}
    for kernel_us in KERNEL_US:
        kernel_ns = kernel_us * 1000
        base, with_thread, with_inline = [], [], []
        for _ in range(rounds):  # interleaved, so drift on a shared machine hits every case alike
            base.append(median_step_ns(lambda: decode_step(sim, drv, stream, handle, kernel_ns, launch_ns, None), steps))  # noqa: B023 - called in this iteration
            for resolver, samples in (("thread", with_thread), ("inline", with_inline)):
                session = bs.configure(TracerProvider(), clock="cuda", sync_mode="deferred", resolver=resolver)

                def instrumented() -> None:
                    decode_step(sim, drv, stream, handle, kernel_ns, launch_ns, bs)  # noqa: B023 - called in this iteration

                instrumented()  # warm the event pool and stream cache
                samples.append(median_step_ns(instrumented, steps))
                session.shutdown()
        b = statistics.median(base)
        thread[str(kernel_us)] = round(100 * (statistics.median(with_thread) - b) / b, 1)
        inline[str(kernel_us)] = round(100 * (statistics.median(with_inline) - b) / b, 1)
    return {"launch_bound_overhead_pct": inline, "launch_bound_overhead_pct_resolver_thread": thread}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured paced traffic per CPU case")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (the median is reported)")
    parser.add_argument("--rounds-launch", type=int, default=2, help="interleaved launch-bound rounds")
    parser.add_argument(
        "--metric-export-interval-millis", type=int, default=1000, help="the metric reader's interval (SDK: 60000)"
    )
    parser.add_argument("--cpu-only", action="store_true", help="skip the launch-bound sweep")
    parser.add_argument("--steps", type=int, default=9, help="decode steps per launch-bound measurement")
    parser.add_argument("--launch-us", type=float, default=5.0, help="host cost of one simulated launch")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    if not args.cpu_only:
        results.update(measure_launch_bound(args.steps, args.rounds_launch, args.launch_us))
    results.update(measure_cpu(args.seconds, args.rounds, args.metric_export_interval_millis))
    if args.json:
        print(json.dumps(results))
        return 0
    print(f"CPU of brickscope + OTLP export at {BRICKS_PER_S} bricks/s, % of one core")
    print(f"({results['cpu_pct_of_core_statistic']}; every round in brackets):")
    official = {case + OFFICIAL: pct for case, pct in results["cpu_pct_of_core_official_otlp_exporter"].items()}
    for label, pct in {**results["cpu_pct_of_core"], **official}.items():
        rounds = ", ".join(f"{v:.2f}" for v in results["cpu_pct_of_core_all_rounds"][label])
        threads = ", ".join(f"{role} {v:.2f}" for role, v in results["cpu_pct_of_core_by_thread"][label].items())
        print(f"  {label:<35} {pct:7.2f} %  [{rounds}]  ({threads})")
    if "launch_bound_overhead_pct" not in results:
        return 0
    print("deferred overhead in a launch-bound loop (1 brick per kernel), % of the step:")
    print(f"  {'kernel us':<10} {'inline':>8} {'thread':>8}")
    for kernel_us, pct in results["launch_bound_overhead_pct"].items():
        print(f"  {kernel_us:<10} {pct:8.1f} {results['launch_bound_overhead_pct_resolver_thread'][kernel_us]:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
