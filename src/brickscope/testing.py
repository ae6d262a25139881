# SPDX-License-Identifier: Apache-2.0
"""Helpers for testing code instrumented with brickscope (public, like OTel's InMemorySpanExporter).

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
from typing import Any, Iterator

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from brickscope import _catalog, _config, _record, _scope, _state
from brickscope.trace import attributes as A


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
    _scope._warned.clear()  # noqa: SLF001 - so each test sees its own once-only warnings
    _record.TOP.set(None)
