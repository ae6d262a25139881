# SPDX-License-Identifier: Apache-2.0
"""A scripted instrumented program, run by test_native.py once per implementation of the hot
path (``BRICKSCOPE_PURE_PYTHON`` set by the test): prints one JSON document with every span
it produced (ids, parents, times, attributes, events, status), the session's counters and
the metrics. Everything that could differ between two runs is driven: the host clock (each
read advances it by 1 µs), ids (sequential), the epoch offset and thread ids (renumbered).
"""

from __future__ import annotations

import asyncio
import json
import threading

from opentelemetry import context as otel_context, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

import brickscope as bs
from brickscope import _scope_data, native
from brickscope.sdk.trace import _recorder, _spans
from brickscope.testing import SequentialIdGenerator, capture_spans

EPOCH = 1_700_000_000_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        self.now += 1_000
        return self.now



def program(tracer: trace.Tracer) -> None:
    """Every path of the record: nesting, errors, out-of-order ends, tokens, decorators,
    disabled, step sampling, an unsampled and a user parent, another thread, a task."""

    @bs.brick("decorated", elements=3)
    def decorated(fail: bool) -> None:
        if fail:
            raise KeyError("decorated failed")

    for number in range(4):  # step_sampling every=2: steps 0 and 2 are traced
        with bs.step(number):
            with bs.layer(0):
                with bs.brick("rms_norm", elements=4096):
                    with bs.kernel("rms_kernel", grid=(4, 1), block=128):
                        pass
                with bs.brick("attention_score", category="attention", heads=8):
                    trace.get_current_span().set_attribute("user.key", number)
                    bs.event("eos", token=7)
                with bs.brick("attention_score"):  # the shared form, twice nested
                    with bs.brick("attention_score"):
                        pass
                try:
                    with bs.brick("ffn_down"):
                        raise ValueError(f"bad input {number}")
                except ValueError:
                    pass
                decorated(False)
                try:
                    decorated(True)
                except KeyError:
                    pass
                # elements past 64 bits, and GPU work timed elsewhere inside a brick
                with bs.brick("wide", elements=1 << 70):
                    bs.record_gpu("external", 1_500_000, 1_500_700, elements=4)
            # out of order: an outer token ends before the inner scopes
            outer = bs.enter_scope(bs.brick("outer"))
            inner = bs.enter_scope(bs.brick("inner"))
            with bs.brick("innermost"):
                bs.exit_scope(outer)
            bs.exit_scope(inner)
            bs.exit_scope(inner)  # twice: misuse, counted
            handle = bs.start_brick("handle", elements=2)
            bs.end_brick(handle, RuntimeError("handle failed"))
            # interleaved generators on one shared scope object
            shared = bs.brick("shared")

            def gen() -> object:
                with shared:  # noqa: B023 - both generators run within this iteration
                    yield 1
                    yield 2

            first, second = gen(), gen()
            next(first)
            next(second)
            for g in (first, second):
                for _ in g:
                    pass

    bs.disable()
    with bs.step(9), bs.brick("while_disabled"):
        pass
    bs.enable()

    # under a user span, and a brick inside a user span inside a brick
    with tracer.start_as_current_span("request"):
        with bs.brick("under_request"):
            with tracer.start_as_current_span("user_inside"):
                with bs.brick("under_user_span"):
                    pass
    # under an unsampled remote parent: metrics only
    parent = NonRecordingSpan(SpanContext(0xABC, 0xDEF, True, TraceFlags(0)))
    token = otel_context.attach(trace.set_span_in_context(parent))
    try:
        with bs.brick("unsampled_parent"), bs.kernel("unsampled_kernel"):
            pass
    finally:
        otel_context.detach(token)

    def worker() -> None:
        with bs.brick("in_thread"):
            pass

    thread = threading.Thread(target=worker, name="worker")
    thread.start()
    thread.join()

    async def task(name: str) -> None:
        with bs.brick(name):
            await asyncio.sleep(0)

    async def both() -> None:
        await asyncio.gather(task("task_a"), task("task_b"))

    asyncio.run(both())
    bs.sync()


def main() -> None:
    clock = Clock()
    _recorder.perf_counter_ns = clock
    _spans.EPOCH_OFFSET_NS = EPOCH
    _scope_data.host_ns = lambda: clock() + EPOCH
    reader = InMemoryMetricReader()
    provider = TracerProvider(sampler=ParentBased(ALWAYS_ON), id_generator=SequentialIdGenerator())
    with capture_spans(
        provider, step_sampling="every=2", meter_provider=MeterProvider(metric_readers=[reader])
    ) as captured:
        program(provider.get_tracer("user"))
        stats = {k: v for k, v in captured.session.stats().items() if "cpu_ns" not in k}
        metrics = sorted(
            (
                metric.name,
                sorted(dict(point.attributes).items()),
                getattr(point, "count", None),
                getattr(point, "sum", None),
                getattr(point, "value", None),  # the exact counters (count, self time, elements)
            )
            for resource in reader.get_metrics_data().resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            for point in metric.data.data_points
            if not metric.name.endswith("cpu_time")  # measured CPU time differs between runs
        )
        spans = captured.spans
    threads: dict[int, int] = {}

    def attribute(key: str, value: object) -> object:
        if key == "thread.id":
            return threads.setdefault(value, len(threads))  # type: ignore[arg-type]
        return list(value) if isinstance(value, tuple) else value

    out = {
        "implementation": {part: found.in_use for part, found in native.implementations().items()},
        "stats": stats,
        "metrics": metrics,
        "spans": [
            {
                "name": span.name,
                "trace_id": span.context.trace_id,
                "span_id": span.context.span_id,
                "parent": None if span.parent is None else [span.parent.trace_id, span.parent.span_id],
                "scope": span.instrumentation_scope.name,
                # the user's spans are timed by the OTel SDK on the real clock
                "start": span.start_time if span.instrumentation_scope.name == "brickscope" else None,
                "end": span.end_time if span.instrumentation_scope.name == "brickscope" else None,
                "attributes": {k: attribute(k, v) for k, v in sorted(span.attributes.items())},
                "events": [
                    [e.name, e.timestamp, {k: attribute(k, v) for k, v in sorted(e.attributes.items())}]
                    for e in span.events
                ],
                "status": [span.status.status_code.name, span.status.description],
            }
            for span in spans
        ],
    }
    print(json.dumps(out, sort_keys=True, default=repr))


if __name__ == "__main__":
    main()
