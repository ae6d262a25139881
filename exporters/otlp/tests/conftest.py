# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures: batches of spans as a batch processor hands them to an exporter."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags


@pytest.fixture
def make_spans() -> Callable[[int], list[ReadableSpan]]:
    """``make_spans(count)``: brick-like spans of one trace, under a remote parent, with
    string, int (small and large) and bool attributes."""

    def spans(count: int) -> list[ReadableSpan]:
        resource = Resource({"service.name": "decoder"})
        return [
            ReadableSpan(
                name=f"brick{i % 4}",
                context=SpanContext(0xABC, i, is_remote=False, trace_flags=TraceFlags(1)),
                parent=SpanContext(0xABC, 1000, is_remote=True),
                attributes={
                    "brickscope.scope.kind": "brick",
                    "brickscope.step.number": i,
                    "thread.id": 140447922391936,
                    "app.ok": i % 2 == 0,
                },
                resource=resource,
                start_time=1_700_000_000_000_000_000 + i,
                end_time=1_700_000_000_000_000_900 + i,
            )
            for i in range(1, count + 1)
        ]

    return spans
