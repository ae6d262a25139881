# SPDX-License-Identifier: Apache-2.0
"""A small synthetic two-rank, two-GPU trace whose every figure the tests compute by hand,
and writers of it as OTLP JSON and .pftrace files (imported as ``analysis_synthetic``)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

from brickscope.trace import attributes as A

T0 = 1_700_000_000_000_000_000
US = 1_000
TRACE_ID = 0x0123456789ABCDEF0123456789ABCDEF
MODEL = "NVIDIA H100 80GB HBM3"


def _resource(rank: int) -> Resource:
    return Resource(
        {
            "service.name": "train",
            A.RANK: rank,
            A.HOST_NAME: "node",
            A.GPU_DEVICE_NAMES: (MODEL, MODEL),
        }
    )


def span(
    span_id: int,
    name: str,
    kind: str,
    start_us: int,
    end_us: int,
    resource: Resource,
    *,
    parent: int | None = None,
    device: int | None = None,
    stream: int | None = None,
    step: int | None = None,
    category: str | None = None,
    self_us: int | None = None,
    brick: str | None = None,
    **extra: object,
) -> ReadableSpan:
    """A brickscope span as the recorder would emit it (GPU-timed when ``device`` is given)."""
    attributes: dict[str, object] = {
        A.SCOPE_KIND: kind,
        A.CLOCK: "cuda" if device is not None or kind == "step" else "host",
    }
    if device is not None:
        attributes[A.GPU_DEVICE_ID] = device
        attributes[A.GPU_STREAM_ID] = stream
        attributes[A.GPU_DURATION_NS] = (end_us - start_us) * US
    if step is not None:
        attributes[A.STEP_NUMBER] = step
    if kind == "brick":
        attributes[A.BRICK_NAME] = name
        attributes[A.BRICK_CATEGORY] = category or "other"
        attributes[A.BRICK_SELF_DURATION_NS] = (end_us - start_us if self_us is None else self_us) * US
    if kind == "kernel":
        attributes[A.KERNEL_NAME] = name
        attributes[A.BRICK_NAME] = brick
        attributes[A.BRICK_CATEGORY] = category
    attributes.update(extra)
    context = SpanContext(TRACE_ID, span_id, False, TraceFlags(TraceFlags.SAMPLED))
    parent_context = SpanContext(TRACE_ID, parent, False, TraceFlags(TraceFlags.SAMPLED)) if parent else None
    return ReadableSpan(
        name=name,
        context=context,
        parent=parent_context,
        resource=resource,
        attributes=attributes,
        start_time=T0 + start_us * US,
        end_time=T0 + end_us * US,
    )


def two_rank_trace() -> dict[int, list[ReadableSpan]]:
    """The hand-computed trace (times in us from T0), by rank.

    rank 0, gpu 0, streams 7 (compute) and 9 (communication)::

        step 0 [0,1000)     gemm s7 [0,900) (warm-up)   all_reduce s9 [800,1000)
        step 1 [1000,1400)  gemm s7 [1000,1100)  all_reduce s9 [1050,1250)  gemm s7 [1300,1400)
        step 2 [1400,1700)  ffn s7 [1400,1700) containing gemm s7 [1400,1500)

    rank 1, gpu 1, stream 7::

        step 0 [0,500)      gemm [0,100)   all_reduce [100,450)
        step 1 [500,800)    gemm [500,600) with kernel sgemm [500,590)
        step 2 [800,900)    gemm [800,900)
    """
    r0, r1 = _resource(0), _resource(1)
    gpu0 = {"device": 0}
    gpu1 = {"device": 1}
    rank0 = [
        span(1, "step", "step", 0, 1000, r0, step=0, **{A.STEP_TOKENS: 8}),
        span(
            2,
            "gemm",
            "brick",
            0,
            900,
            r0,
            parent=1,
            stream=7,
            step=0,
            category="matmul",
            **gpu0,
            **{A.BRICK_ELEMENTS: 1000, A.WORK_BYTES: 8_000_000, A.WORK_FLOPS: 4e9},
        ),
        span(
            3,
            "all_reduce",
            "brick",
            800,
            1000,
            r0,
            parent=1,
            stream=9,
            step=0,
            category="communication",
            **gpu0,
            **{A.WORK_BYTES: 2_000_000},
        ),
        span(4, "step", "step", 1000, 1400, r0, step=1, **{A.STEP_TOKENS: 8}),
        span(
            5,
            "gemm",
            "brick",
            1000,
            1100,
            r0,
            parent=4,
            stream=7,
            step=1,
            category="matmul",
            **gpu0,
            **{A.WORK_OUTPUT_SHAPE: (1000, 500), A.WORK_DTYPE: "bfloat16"},
        ),
        span(
            6, "all_reduce", "brick", 1050, 1250, r0, parent=4, stream=9, step=1, category="communication", **gpu0
        ),
        span(7, "gemm", "brick", 1300, 1400, r0, parent=4, stream=7, step=1, category="matmul", **gpu0),
        span(8, "step", "step", 1400, 1700, r0, step=2, **{A.STEP_TOKENS: 8}),
        span(9, "ffn", "brick", 1400, 1700, r0, parent=8, stream=7, step=2, category="ffn", self_us=200, **gpu0),
        span(10, "gemm", "brick", 1400, 1500, r0, parent=9, stream=7, step=2, category="matmul", **gpu0),
    ]
    rank1 = [
        span(11, "step", "step", 0, 500, r1, step=0, **{A.STEP_TOKENS: 8}),
        span(12, "gemm", "brick", 0, 100, r1, parent=11, stream=7, step=0, category="matmul", **gpu1),
        span(
            13, "all_reduce", "brick", 100, 450, r1, parent=11, stream=7, step=0, category="communication", **gpu1
        ),
        span(14, "step", "step", 500, 800, r1, step=1, **{A.STEP_TOKENS: 8}),
        span(15, "gemm", "brick", 500, 600, r1, parent=14, stream=7, step=1, category="matmul", **gpu1),
        span(
            16,
            "sgemm",
            "kernel",
            500,
            590,
            r1,
            parent=15,
            stream=7,
            step=1,
            category="matmul",
            brick="gemm",
            **gpu1,
        ),
        span(17, "step", "step", 800, 900, r1, step=2, **{A.STEP_TOKENS: 8}),
        span(18, "gemm", "brick", 800, 900, r1, parent=17, stream=7, step=2, category="matmul", **gpu1),
    ]
    return {0: rank0, 1: rank1}


def write_otlp_json(path: Path, spans: list[ReadableSpan]) -> Path:
    """OTLP JSON Lines, one request, via the official protobuf encoder."""
    from google.protobuf import json_format
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    message = json_format.MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    path.write_text(json.dumps(_hex_ids(message)) + "\n")
    return path


def write_pftrace(path: Path, spans: list[ReadableSpan]) -> Path:
    from brickscope.exporter.perfetto import PerfettoSpanExporter

    exporter = PerfettoSpanExporter(str(path))
    exporter.export(spans)
    exporter.shutdown()
    return path


def _hex_ids(value: object) -> object:
    if isinstance(value, dict):
        return {
            k: base64.b64decode(v).hex()
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str)
            else _hex_ids(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value
