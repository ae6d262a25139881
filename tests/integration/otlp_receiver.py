# SPDX-License-Identifier: Apache-2.0
"""Real OTLP receivers on 127.0.0.1 for the integration tests, from the official protos.

Example::

    with GrpcReceiver() as receiver:                      # ephemeral port
        run_app(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint)
        receiver.wait_for(lambda r: len(r.spans()) >= 10, timeout_s=10)
        spans = receiver.spans()                          # decoded ReceivedSpan objects

``GrpcReceiver`` serves the OTLP ``TraceService``, ``MetricsService`` and
``LogsService`` with grpcio and the ``opentelemetry-proto`` service definitions;
``HttpReceiver`` is a stdlib ``http.server`` decoding ``/v1/traces`` and
``/v1/metrics`` bodies (``application/x-protobuf``, optionally gzip) with the same
messages. Faults are scripted per signal: answer UNAVAILABLE (gRPC, with a
RetryInfo delay; HTTP 503) or, over gRPC, stall, for the next N calls. Requests a stalled call's client gave up
on are not recorded: the exporter counted them as failed.
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

_REQUEST = {
    "traces": trace_service_pb2.ExportTraceServiceRequest,
    "metrics": metrics_service_pb2.ExportMetricsServiceRequest,
}
_RESPONSE = {
    "traces": trace_service_pb2.ExportTraceServiceResponse,
    "metrics": metrics_service_pb2.ExportMetricsServiceResponse,
}


def any_value(value: AnyValue) -> Any:
    """An OTLP AnyValue as a Python value (arrays as lists, kvlists as dicts)."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [any_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return None if kind is None else getattr(value, kind)


def attributes(pairs: Any) -> dict[str, Any]:
    """Repeated KeyValue as a dict."""
    return {pair.key: any_value(pair.value) for pair in pairs}


@dataclass
class ReceivedSpan:
    """One span as it arrived, decoded."""

    name: str
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str  # "" for a root
    start_ns: int
    end_ns: int
    kind: int
    status_code: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    events: list[str] = field(default_factory=list)
    event_attributes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class ReceivedPoint:
    """One metric data point as it arrived, decoded (sums and histograms)."""

    metric: str
    kind: str  # "sum", "gauge" or "histogram"
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    time_ns: int
    value: float = 0.0  # sum / gauge value
    count: int = 0  # histogram
    total: float = 0.0  # histogram sum
    exemplars: list[tuple[str, str, float]] = field(default_factory=list)  # (trace id, span id, value)


def decode_spans(request: trace_service_pb2.ExportTraceServiceRequest) -> list[ReceivedSpan]:
    out = []
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        kind=span.kind,
                        status_code=span.status.code,
                        attributes=attributes(span.attributes),
                        resource=resource,
                        scope=scope_spans.scope.name,
                        events=[event.name for event in span.events],
                        event_attributes=[attributes(event.attributes) for event in span.events],
                    )
                )
    return out


def decode_points(request: metrics_service_pb2.ExportMetricsServiceRequest) -> list[ReceivedPoint]:
    out = []
    for resource_metrics in request.resource_metrics:
        resource = attributes(resource_metrics.resource.attributes)
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                kind = metric.WhichOneof("data")
                if kind not in ("sum", "gauge", "histogram"):
                    continue
                for point in getattr(metric, kind).data_points:
                    received = ReceivedPoint(
                        metric=metric.name,
                        kind=kind,
                        attributes=attributes(point.attributes),
                        resource=resource,
                        scope=scope_metrics.scope.name,
                        time_ns=point.time_unix_nano,
                        exemplars=[
                            (e.trace_id.hex(), e.span_id.hex(), e.as_double or float(e.as_int)) for e in point.exemplars
                        ],
                    )
                    if kind == "histogram":
                        received.count, received.total = point.count, point.sum
                    else:
                        received.value = point.as_double or float(point.as_int)
                    out.append(received)
    return out


class _Receiver:
    """What both transports share: the requests received and the scripted faults."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[str, list[Any]] = {"traces": [], "metrics": [], "logs": []}
        self._faults: dict[str, deque[tuple[str, float]]] = {"traces": deque(), "metrics": deque(), "logs": deque()}
        self.calls: dict[str, int] = {"traces": 0, "metrics": 0, "logs": 0}
        self.rejected: dict[str, int] = {"traces": 0, "metrics": 0, "logs": 0}
        self._release = threading.Event()  # ends every stall at once (stop())
        self._held = threading.Event()  # ends the held calls (release_held())
        self._held_status: Any = None
        self.holding: dict[str, int] = {"traces": 0, "metrics": 0, "logs": 0}
        #: HTTP request bodies received, as sent (compressed or not), per signal.
        self.body_bytes: dict[str, int] = {"traces": 0, "metrics": 0, "logs": 0}

    def fail_next(self, calls: int, signal: str = "traces", retry_after_s: float = 0.2) -> None:
        """Answer the next ``calls`` export calls of ``signal`` with UNAVAILABLE (503 over HTTP)."""
        with self._lock:
            self._faults[signal].extend([("unavailable", retry_after_s)] * calls)

    def stall_next(self, calls: int, seconds: float, signal: str = "traces") -> None:
        """Hold the next ``calls`` export calls of ``signal`` for ``seconds`` before answering."""
        with self._lock:
            self._faults[signal].extend([("stall", seconds)] * calls)

    def hold_next(self, calls: int, signal: str = "traces") -> None:
        """Hold the next ``calls`` export calls of ``signal`` until :meth:`release_held` (gRPC only).

        Unlike a stall, nothing here depends on time: the test decides when the call ends.
        """
        with self._lock:
            self._faults[signal].extend([("hold", 0.0)] * calls)

    def release_held(self, status: Any) -> None:
        """End every held call with the gRPC ``status`` (a non-retryable one fails the batch at once)."""
        self._held_status = status
        self._held.set()

    def _next_fault(self, signal: str) -> tuple[str, float] | None:
        with self._lock:
            self.calls[signal] += 1
            return self._faults[signal].popleft() if self._faults[signal] else None

    def _record(self, signal: str, request: Any) -> None:
        with self._lock:
            self._requests[signal].append(request)

    def requests(self, signal: str) -> list[Any]:
        with self._lock:
            return list(self._requests[signal])

    def spans(self) -> list[ReceivedSpan]:
        """Every span received so far, decoded, in arrival order."""
        return [span for request in self.requests("traces") for span in decode_spans(request)]

    def points(self) -> list[ReceivedPoint]:
        """Every metric point received so far, decoded, in arrival order."""
        return [point for request in self.requests("metrics") for point in decode_points(request)]

    def latest_points(self) -> dict[tuple[str, tuple], ReceivedPoint]:
        """The last point of each (metric, attributes) series: the totals, with cumulative temporality."""
        latest: dict[tuple[str, tuple], ReceivedPoint] = {}
        for point in self.points():
            key = (point.metric, tuple(sorted((k, str(v)) for k, v in point.attributes.items())))
            if key not in latest or point.time_ns >= latest[key].time_ns:
                latest[key] = point
        return latest

    def wait_for(self, predicate: Callable[[_Receiver], bool], timeout_s: float) -> bool:
        """Poll ``predicate(self)`` until it holds or ``timeout_s`` passes; returns whether it held."""
        deadline = time.monotonic() + timeout_s
        while True:
            if predicate(self):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


#: A held call is ended after this long even if the test never released it (a failed test).
_MAX_HOLD_S = 120.0


class _GrpcService:
    """One OTLP Export method: scripted faults, then record the request."""

    def __init__(self, receiver: GrpcReceiver, signal: str, response: type) -> None:
        self._receiver = receiver
        self._signal = signal
        self._response = response

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:  # the proto's name
        receiver = self._receiver
        fault = receiver._next_fault(self._signal)
        if fault is not None:
            what, seconds = fault
            if what == "unavailable":
                delay = Duration()
                delay.FromNanoseconds(int(seconds * 1e9))
                retry_info = RetryInfo(retry_delay=delay).SerializeToString()
                context.set_trailing_metadata((("google.rpc.retryinfo-bin", retry_info),))
                with receiver._lock:
                    receiver.rejected[self._signal] += 1
                context.abort(grpc.StatusCode.UNAVAILABLE, "scripted: receiver unavailable")
            if what == "hold":
                with receiver._lock:
                    receiver.holding[self._signal] += 1
                receiver._held.wait(_MAX_HOLD_S)
                with receiver._lock:
                    receiver.holding[self._signal] -= 1
                    receiver.rejected[self._signal] += 1
                context.abort(receiver._held_status or grpc.StatusCode.ABORTED, "scripted: held, then released")
            receiver._release.wait(seconds)
            if not context.is_active():  # the client gave up: it counts the batch as failed
                with receiver._lock:
                    receiver.rejected[self._signal] += 1
                return self._response()
        receiver._record(self._signal, request)
        return self._response()


class _TraceServicer(_GrpcService, trace_service_pb2_grpc.TraceServiceServicer):
    pass


class _MetricsServicer(_GrpcService, metrics_service_pb2_grpc.MetricsServiceServicer):
    pass


class _LogsServicer(_GrpcService, logs_service_pb2_grpc.LogsServiceServicer):
    pass


class GrpcReceiver(_Receiver):
    """An OTLP/gRPC receiver (traces, metrics, logs) on 127.0.0.1.

    Args:
        port: the port to listen on; 0 picks a free one. A receiver stopped and
            started again on the same port models a collector restart.
    """

    def __init__(self, port: int = 0) -> None:
        super().__init__()
        self.port = port
        self._server: grpc.Server | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> GrpcReceiver:
        self._release.clear()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(
            _TraceServicer(self, "traces", trace_service_pb2.ExportTraceServiceResponse), server
        )
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(
            _MetricsServicer(self, "metrics", metrics_service_pb2.ExportMetricsServiceResponse), server
        )
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(
            _LogsServicer(self, "logs", logs_service_pb2.ExportLogsServiceResponse), server
        )
        port = server.add_insecure_port(f"127.0.0.1:{self.port}")
        if port == 0:
            raise RuntimeError(f"cannot listen on 127.0.0.1:{self.port}")
        self.port = port
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        """Stop at once (open calls are cancelled, stalls and holds released). Idempotent."""
        self._release.set()
        self._held.set()
        if self._server is not None:
            self._server.stop(grace=0).wait(5)
            self._server = None

    def __enter__(self) -> GrpcReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class HttpReceiver(_Receiver):
    """An OTLP/HTTP (protobuf) receiver on 127.0.0.1: POST /v1/traces and /v1/metrics."""

    def __init__(self) -> None:
        super().__init__()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                signal = {"/v1/traces": "traces", "/v1/metrics": "metrics"}.get(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if signal is None:
                    self.send_error(404)
                    return
                with receiver._lock:
                    receiver.body_bytes[signal] += len(body)
                fault = receiver._next_fault(signal)
                if fault is not None and fault[0] == "unavailable":
                    with receiver._lock:
                        receiver.rejected[signal] += 1
                    self.send_response(503)
                    self.send_header("Retry-After", "1")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_error(415)
                    return
                receiver._record(signal, _REQUEST[signal].FromString(body))
                payload = _RESPONSE[signal]().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:  # keep the test output clean
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-http", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> HttpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> HttpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port() -> int:
    """A port nothing listens on right now (for a receiver that is absent at first)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


__all__ = [
    "GrpcReceiver",
    "HttpReceiver",
    "ReceivedPoint",
    "ReceivedSpan",
    "any_value",
    "attributes",
    "free_port",
]
