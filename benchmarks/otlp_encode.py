# SPDX-License-Identifier: Apache-2.0
"""OTLP span encoding: brickscope-exporter-otlp's encoder against the official one, in one run.

The spans are what a BatchSpanProcessor hands an OTLP exporter in a decode server: batches
of 512 from brickscope (host clock: a step, 32 layers, 10 bricks a layer, 12 attributes a
brick) and, separately, spans of the OTel SDK's own tracer (a request span with HTTP
attributes, an event and a status, as an instrumented web framework makes them). Each
case encodes every batch into request bytes (the official: ``encode_spans(batch)
.SerializePartialToString()``), ``--repeats`` times; the figure is the best repeat's CPU
time a span (the least disturbed on a shared VM, taken alike for both). The two encoders'
bytes are compared first: the benchmark refuses to time different outputs.

``export`` times what the batch processor's thread spends in ``export()`` (encoding plus
the transport's share on that thread) for brickscope's spans, the official exporters
against brickscope-exporter-otlp's, over OTLP/HTTP and OTLP/gRPC to a receiver on
127.0.0.1 in a process of its own (its CPU is not counted): thread CPU a span, best of
``--repeats``.

Usage::

    python benchmarks/otlp_encode.py            # a table
    python benchmarks/otlp_encode.py --json     # one JSON object: us a span, and the ratios
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

from always_on import Receiver as HttpReceiver
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as official_encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

import brickscope as bs
from brickscope.exporter.otlp._encode import SpanEncoder

BATCH = 512  # the BatchSpanProcessor's default max_export_batch_size
NAMES = (
    "rms_norm", "qkv_projection", "rope", "attention_score", "attention_softmax",
    "attention_output", "output_projection", "ffn_gate", "ffn_up", "ffn_down",
)  # fmt: skip
RESOURCE = Resource({"service.name": "decoder", "host.name": "node-7", "service.instance.id": "3f1c"})


def brickscope_spans(steps: int) -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    session = bs.configure(provider, clock="host")
    for number in range(steps):
        with bs.step(number):
            for index in range(32):
                with bs.layer(index):
                    for name in NAMES:
                        with bs.brick(name, elements=4096):
                            pass
    session.shutdown()
    return list(exporter.get_finished_spans())


def sdk_spans(count: int) -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app.server")
    for i in range(count):
        with tracer.start_as_current_span("POST /v1/completions") as span:
            span.set_attributes(
                {"http.request.method": "POST", "url.path": "/v1/completions", "http.response.status_code": 200,
                 "server.address": "10.0.0.7", "server.port": 8000, "user_agent.original": "client/1.0",
                 "app.request.id": f"req-{i}", "app.tokens": 50 + i % 7}
            )  # fmt: skip
            span.add_event("first_token", {"latency_ms": 41.5})
            span.set_status(Status(StatusCode.OK))
    provider.shutdown()
    return list(exporter.get_finished_spans())


def cpu_us_per_span(
    encode: Callable[[list[ReadableSpan]], bytes], batches: list[list[ReadableSpan]], repeats: int
) -> float:
    spans = sum(len(batch) for batch in batches)
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for batch in batches:
            encode(batch)
        best = min(best, time.process_time() - start)
    return best / spans * 1e6


def measure(spans: list[ReadableSpan], repeats: int) -> dict[str, Any]:
    batches = [spans[i : i + BATCH] for i in range(0, len(spans), BATCH)]
    encoder = SpanEncoder()

    def official(batch: list[ReadableSpan]) -> bytes:
        return official_encode_spans(batch).SerializePartialToString()

    for batch in batches:
        if encoder.encode(batch) != official(batch):
            raise SystemExit("the two encoders wrote different bytes: nothing timed")
    theirs = cpu_us_per_span(official, batches, repeats)
    ours = cpu_us_per_span(encoder.encode, batches, repeats)
    return {
        "spans": len(spans),
        "official_us_per_span": round(theirs, 2),
        "brickscope_us_per_span": round(ours, 2),
        "speedup": round(theirs / ours, 2),
        "bytes_per_span": round(sum(len(official(b)) for b in batches) / len(spans)),
    }


# A loopback OTLP/gRPC TraceService in its own process: takes each request's bytes, answers
# an empty response.
GRPC_RECEIVER = textwrap.dedent(
    """
    import sys
    from concurrent import futures
    import grpc
    def export(request, context):
        return b""
    handler = grpc.method_handlers_generic_handler(
        "opentelemetry.proto.collector.trace.v1.TraceService", {"Export": grpc.unary_unary_rpc_method_handler(export)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
    print(server.add_insecure_port("127.0.0.1:0"), flush=True)
    server.start()
    sys.stdin.read()
    server.stop(None)
    """
)


class GrpcReceiver:
    def __enter__(self) -> GrpcReceiver:
        self.process = subprocess.Popen(
            [sys.executable, "-c", GRPC_RECEIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.endpoint = f"127.0.0.1:{int(self.process.stdout.readline())}"
        return self

    def __exit__(self, *exc: Any) -> None:
        self.process.communicate(timeout=30)


def export_cpu_us_per_span(exporter: Any, batches: list[list[ReadableSpan]], repeats: int) -> float:
    """Thread CPU a span of ``exporter.export`` over every batch, best of ``repeats``."""
    spans = sum(len(batch) for batch in batches)
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        for batch in batches:
            if exporter.export(batch).name != "SUCCESS":
                raise SystemExit(f"{type(exporter).__module__}: export failed")
        best = min(best, time.thread_time() - start)
    exporter.shutdown()
    return best / spans * 1e6


def measure_export(spans: list[ReadableSpan], repeats: int) -> dict[str, Any]:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as OfficialGrpc
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as OfficialHttp

    from brickscope.exporter.otlp import OTLPGrpcSpanExporter, OTLPHttpSpanExporter

    batches = [spans[i : i + BATCH] for i in range(0, len(spans), BATCH)]
    results: dict[str, Any] = {}
    with HttpReceiver() as http:
        url = f"{http.endpoint}/v1/traces"
        theirs = export_cpu_us_per_span(OfficialHttp(endpoint=url), batches, repeats)
        ours = export_cpu_us_per_span(OTLPHttpSpanExporter(endpoint=url), batches, repeats)
        results["http"] = {
            "official_us_per_span": round(theirs, 2),
            "brickscope_us_per_span": round(ours, 2),
            "speedup": round(theirs / ours, 2),
        }
    with GrpcReceiver() as grpc_receiver:
        endpoint = grpc_receiver.endpoint
        theirs = export_cpu_us_per_span(OfficialGrpc(endpoint=endpoint, insecure=True), batches, repeats)
        ours = export_cpu_us_per_span(OTLPGrpcSpanExporter(endpoint=endpoint, insecure=True), batches, repeats)
        results["grpc"] = {
            "official_us_per_span": round(theirs, 2),
            "brickscope_us_per_span": round(ours, 2),
            "speedup": round(theirs / ours, 2),
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="decode steps of brickscope spans (353 spans each)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    spans = brickscope_spans(args.steps)
    results = {
        "brickscope_spans": measure(spans, args.repeats),
        "sdk_request_spans": measure(sdk_spans(len(spans)), args.repeats),
        "export": measure_export(spans, args.repeats),
    }
    if args.json:
        print(json.dumps(results))
        return 0
    print(f"OTLP encoding, CPU a span (best of {args.repeats}; batches of {BATCH}):")
    for case in ("brickscope_spans", "sdk_request_spans"):
        r = results[case]
        print(_row(case, r) + f"   ({r['spans']} spans, {r['bytes_per_span']} B each)")
    print("export() of brickscope's spans to a loopback receiver, the exporting thread's CPU a span:")
    for protocol, r in results["export"].items():
        print(_row(protocol, r))
    return 0


def _row(label: str, r: dict[str, Any]) -> str:
    official, ours = r["official_us_per_span"], r["brickscope_us_per_span"]
    return f"  {label:<20} official {official:6.2f} us   brickscope {ours:6.2f} us   x{r['speedup']:.2f}"


if __name__ == "__main__":
    sys.exit(main())
