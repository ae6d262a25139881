# SPDX-License-Identifier: Apache-2.0
"""Hand-built step graphs on two CUDA streams, whose critical paths and slack the tests
compute by hand (times in microseconds after T0, so the arithmetic shows).

Step 0, ``two_streams(0)`` (all GPU-timed; the layer, which names no stream, on A's lane)::

    stream 1:  A [0,30]      B [35,60]           D [70,100]
    stream 2:       C [10,50]     E [55,80]   (E holds kernel k [60,70] on stream 2)
    layer [0,100] in step [0,100]

- D ends last: the layer waited for it. Stream 1 is a chain A -> B -> D, so A, B, D
  are critical: path 30 + 25 + 30 = 85 us of 100 (gaps 5 + 10 = 15).
- E: may end at 100 (the layer's end): slack 20. C: must end 5 us (the observed gap)
  before E's latest start 100 - 25 = 75, so by 70: slack 20.
- k: E's latest end 100 minus E's tail after k (80 - 70 = 10) is 90: slack 20.
- A's host-timed launch kernel ``a_launch`` is on another clock: off the timeline.
"""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource

from brickscope.analysis import load_spans
from brickscope.testing import MAIN_THREAD, make_span
from brickscope.trace import attributes as A

T0 = 1_700_000_000_000_000_000
US = 1_000
RESOURCE = Resource({"service.name": "graph-test", "brickscope.rank": 0})
SOURCE_HASH = "9f86d081884c7d65"


def gpu(kind: str, stream: int | None, step: int, layer: int | None = None, **extra: object) -> dict[str, object]:
    attributes: dict[str, object] = {A.SCOPE_KIND: kind, A.CLOCK: A.CLOCK_CUDA, A.STEP_NUMBER: step, **MAIN_THREAD}
    if layer is not None:
        attributes[A.LAYER_INDEX] = layer
    if stream is not None:
        attributes.update({A.GPU_DEVICE_ID: 0, A.GPU_STREAM_ID: stream})
    attributes.update(extra)
    return attributes


def two_streams(step: int, base: int = 0, stretch: int = 0) -> list:
    """Step ``step`` at T0 + base us; ``stretch`` us added to D (and so to the layer and step)."""

    def t(offset: int) -> int:
        return T0 + (base + offset) * US

    ids = 1000 * (step + 1)
    brick = {A.BRICK_CATEGORY: "attention"}
    end = 100 + stretch
    return [
        make_span(ids + 1, "step", t(0), t(end), attributes=gpu("step", None, step), resource=RESOURCE),
        make_span(ids + 2, "layer", t(0), t(end), ids + 1, attributes=gpu("layer", None, step, 0), resource=RESOURCE),
        make_span(ids + 3, "A", t(0), t(30), ids + 2, attributes=gpu("brick", 1, step, 0, **brick), resource=RESOURCE),
        make_span(ids + 4, "C", t(10), t(50), ids + 2, attributes=gpu("brick", 2, step, 0, **brick), resource=RESOURCE),
        make_span(ids + 5, "B", t(35), t(60), ids + 2, attributes=gpu("brick", 1, step, 0, **brick), resource=RESOURCE),
        make_span(ids + 6, "E", t(55), t(80), ids + 2, attributes=gpu("brick", 2, step, 0, **brick), resource=RESOURCE),
        make_span(ids + 7, "D", t(70), t(end), ids + 2, attributes=gpu("brick", 1, step, 0, **brick), resource=RESOURCE),
        make_span(
            ids + 8, "k", t(60), t(70), ids + 6, resource=RESOURCE,
            attributes=gpu(
                "kernel", 2, step, 0, **{
                    A.KERNEL_GRID: (4, 1, 1), A.KERNEL_BLOCK: (128, 1, 1), A.KERNEL_SHARED_MEM_BYTES: 0,
                    A.KERNEL_SOURCE_HASH: SOURCE_HASH,
                },
            ),
        ),  # fmt: skip
        make_span(
            ids + 9, "a_launch", t(-5), t(-2), ids + 3, resource=RESOURCE,
            attributes={A.SCOPE_KIND: "kernel", A.CLOCK: A.CLOCK_HOST, A.STEP_NUMBER: step, A.LAYER_INDEX: 0, **MAIN_THREAD},
        ),
    ]


def table_of(spans: list, backend: str = "python"):
    return load_spans(spans, backend=backend)
