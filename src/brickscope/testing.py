# SPDX-License-Identifier: Apache-2.0
"""Helpers for testing code instrumented with brickscope (public, like OTel's InMemorySpanExporter).

:func:`capture_spans` records what instrumented code emits; :func:`make_span` and
:func:`gpu_attributes` build spans by hand for testing exporters and readers.

Example::

    from brickscope.testing import capture_spans

    def test_my_model_is_instrumented():
        with capture_spans() as captured:
            run_model()
        assert [s.name for s in captured.bricks()] == ["rms_norm", "ffn_down"]

Not thread-safe across concurrent captures: one capture at a time per process.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status

from brickscope import _catalog, _checksum, _kernel_sources, _record, _scope_data, _state
from brickscope._scope import _scopes
from brickscope.sdk import _config
from brickscope.trace import attributes as A


class SequentialIdGenerator(IdGenerator):
    """Span ids 0x1000, 0x1001, ... and trace ids 0x10000, 0x10001, ...: the same ids on every
    run, so two runs of one program (two implementations, say) can be compared span by span.

    Example: ``TracerProvider(id_generator=SequentialIdGenerator())``.
    """

    def __init__(self) -> None:
        self._spans = itertools.count(0x1000)
        self._traces = itertools.count(0x10000)

    def generate_span_id(self) -> int:
        return next(self._spans)

    def generate_trace_id(self) -> int:
        return next(self._traces)


class CapturedSpans:
    """Spans captured by :func:`capture_spans`; reading them syncs first."""

    def __init__(self, session: _config.Session, exporter: InMemorySpanExporter) -> None:
        self.session = session
        self.exporter = exporter

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        """Every finished span so far (brickscope's and any other), in end order."""
        self.session.sync()
        return self.exporter.get_finished_spans()

    def of_kind(self, kind: str) -> list[ReadableSpan]:
        """The brickscope spans whose ``brickscope.scope.kind`` is ``kind``."""
        return [s for s in self.spans if (s.attributes or {}).get(A.SCOPE_KIND) == kind]

    def bricks(self) -> list[ReadableSpan]:
        return self.of_kind(A.SCOPE_KIND_BRICK)

    def kernels(self) -> list[ReadableSpan]:
        return self.of_kind(A.SCOPE_KIND_KERNEL)

    def by_name(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name == name]

    def clear(self) -> None:
        self.session.sync()
        self.exporter.clear()


@contextlib.contextmanager
def capture_spans(tracer_provider: TracerProvider | None = None, **configure_kwargs: Any) -> Iterator[CapturedSpans]:
    """Configure brickscope onto a fresh (or the given) provider that records into memory.

    Keyword arguments go to :func:`brickscope.configure` (``clock`` defaults to
    ``"host"`` here). The session is shut down on exit and the globals reset.
    """
    provider = tracer_provider or TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    configure_kwargs.setdefault("clock", "host")
    session = _config.configure(provider, **configure_kwargs)
    try:
        yield CapturedSpans(session, exporter)
    finally:
        session.shutdown()
        reset_globals()


def reset_globals() -> None:
    """Forget the configured session, registered bricks and this context's scope stack."""
    if _config.current_session() is not None:
        _config.shutdown()
    _state.recorder = _state.configured = None
    _catalog.reset()
    _scopes._warned.clear()  # so each test sees its own once-only warnings
    _scope_data._warned.clear()
    _kernel_sources.reset()
    _checksum._warned.clear()
    _config._warned.clear()
    _record.TOP.set(None)


#: The trace id :func:`make_span` uses unless given another.
TEST_TRACE_ID = 0x0123456789ABCDEF0123456789ABCDEF
#: Thread attributes of a span recorded on the main thread (a realistic 64-bit thread id).
MAIN_THREAD = {A.THREAD_ID: 140_000_000_000_001, A.THREAD_NAME: "MainThread"}


def make_span(
    span_id: int,
    name: str,
    start: int,
    end: int,
    parent: int | None = None,
    *,
    attributes: Mapping[str, Any] | None = None,
    events: Sequence[Event] | None = None,
    links: Sequence[Link] | None = None,
    resource: Resource | None = None,
    trace_id: int = TEST_TRACE_ID,
    kind: SpanKind = SpanKind.INTERNAL,
    status: Status | None = None,
    scope: InstrumentationScope | None = None,
    remote_parent: bool = False,
) -> ReadableSpan:
    """An ended SDK span built by hand, as the core (or any instrumentation) would export it.

    The one span factory of the test suites and benchmarks: exporters and readers are
    tested on spans shaped exactly like the real ones without running a model.

    Example::

        step = make_span(1, "step", T0, T0 + 100, attributes=MAIN_THREAD)
        gemm = make_span(2, "gemm", T0 + 20, T0 + 80, 1, attributes=gpu_attributes(T0 + 5, 3, 60))
    """
    flags = TraceFlags(TraceFlags.SAMPLED)
    return ReadableSpan(
        name=name,
        context=SpanContext(trace_id, span_id, False, flags),
        parent=SpanContext(trace_id, parent, remote_parent, flags) if parent else None,
        resource=resource if resource is not None else Resource({"service.name": "test"}),
        attributes=dict(attributes or {}),
        events=events or [],
        links=links or [],
        kind=kind,
        status=status or Status(),
        start_time=start,
        end_time=end,
        instrumentation_scope=scope if scope is not None else InstrumentationScope("brickscope"),
    )


def gpu_attributes(
    host_start: int,
    host_duration: int,
    gpu_duration: int,
    *,
    device: int = 0,
    stream: int = 0x7F00,
    thread: Mapping[str, Any] = MAIN_THREAD,
    **extra: Any,
) -> dict[str, Any]:
    """Attributes of a GPU-timed kernel span per the span contract (docs/semantic-conventions.md).

    ``extra`` keys are attribute names (``**{A.BRICK_NAME: "gemm"}``) and override the defaults.
    """
    return {
        A.SCOPE_KIND: A.SCOPE_KIND_KERNEL,
        A.BRICK_CATEGORY: "attention",
        A.CLOCK: A.CLOCK_CUDA,
        A.HOST_START_NS: host_start,
        A.HOST_DURATION_NS: host_duration,
        A.GPU_DURATION_NS: gpu_duration,
        A.GPU_DEVICE_ID: device,
        A.GPU_STREAM_ID: stream,
        **thread,
        **extra,
    }
