# SPDX-License-Identifier: Apache-2.0
"""Delivery accounting: what becomes of the spans brickscope hands to export pipelines.

An export pipeline is an SDK ``SimpleSpanProcessor`` or ``BatchSpanProcessor`` on the
session's provider. configure() wraps each one's exporter in a :class:`CountingExporter`
that keeps an :class:`Account` of brickscope's spans (not the application's own):

- *handed*: given to the processor by the resolver;
- *taken*: passed to the exporter, then *exported* (``SUCCESS``) or *failed*;
- *queued*: still in a batch processor's queue (read from the queue);
- *shed*: what the batch queue dropped when full: handed, never taken, no longer queued.
  The SDK does not say which spans it sheds, so this one is the difference of the
  exact counts above; the others are counted as they happen.

It also counts the bytes the exporter writes or sends while the session is open, where
the exporter makes them knowable (``_export_bytes``: the Perfetto and flamegraph
exporters, OTLP/HTTP request bodies): the pipeline's bytes, the application's own
spans in the same batches included.

At shutdown, what is still queued or being exported when the deadline passes is
counted dropped and the account is closed: a late result does not count again. So
after shutdown ``spans_produced == spans_exported + spans_dropped`` for every pipeline
(counts are per pipeline: a span sent to two exporters is produced twice).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Sequence
from operator import countOf
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from brickscope.sdk._otel_internals import provider_processors, swap_batch_exporter
from brickscope.sdk.trace._export_bytes import byte_reader
from brickscope.sdk.trace._spans import INSTRUMENTATION_SCOPE, SPAN_TYPE


def ours(spans: Any) -> int:
    """How many of ``spans`` brickscope made (counted on the exporter's thread, once a batch).

    Told by type where brickscope's spans have their own (``SlottedReadableSpan``: counted in
    C, ~30 instructions a span); else by instrumentation scope (a property call a span; the
    SDK hands the application's spans on as plain ReadableSpans, so the type says nothing)."""
    if SPAN_TYPE is not ReadableSpan:
        return countOf(map(type, spans), SPAN_TYPE)
    return sum(1 for span in spans if getattr(span, "instrumentation_scope", None) is INSTRUMENTATION_SCOPE)


class Account:
    """One session's books for one export pipeline."""

    def __init__(self, queue: Any = None, carried_in: int = 0, read_bytes: Callable[[], int] | None = None) -> None:
        self.queue = queue  # the batch processor's deque, or None (SimpleSpanProcessor)
        self._read_bytes = read_bytes  # the exporter's bytes so far, or None: not knowable
        self._bytes_at_open = read_bytes() if read_bytes is not None else 0
        self.closed_bytes = 0
        self.handed = carried_in  # spans another session's account handed over, still queued
        self.taken = self.exported = self.failed = self.in_flight = 0
        self.handed_over = 0  # left queued when a newer session took the pipeline over
        self.closed_queued = self.closed_in_flight = 0
        self.closed = False
        self.lock = threading.Lock()

    def queued(self) -> int:
        if self.closed or self.queue is None:
            return self.closed_queued
        return ours(list(self.queue))

    def close(self, *, hand_over: bool) -> int:
        """Stop counting: what is queued is handed over (to a newer session) or, with what
        is being exported, counted lost at a deadline. Returns the lost count."""
        with self.lock:
            if self.closed:
                return 0
            queued = self.queued()
            self.closed_bytes = self.bytes()
            self.closed = True
            if hand_over:
                self.handed_over = queued
                return 0
            self.closed_queued, self.closed_in_flight = queued, self.in_flight
            return queued + self.in_flight

    def bytes(self) -> int:
        """Bytes the exporter wrote or sent while this account was open (0: not knowable)."""
        if self.closed:
            return self.closed_bytes
        return self._read_bytes() - self._bytes_at_open if self._read_bytes is not None else 0

    def totals(self) -> dict[str, int]:
        """This pipeline's share of ``stats()``."""
        with self.lock:
            queued = self.queued()
            at_shutdown = self.closed_queued + self.closed_in_flight
            in_flight = 0 if self.closed else self.in_flight
            shed = self.handed - self.taken - (0 if self.closed else queued) - self.handed_over
            if self.closed:
                shed -= self.closed_queued
            return {
                "spans_produced": self.handed,
                "spans_exported": self.exported,
                "dropped_export_failed": self.failed,
                "dropped_queue_full": shed,
                "dropped_at_shutdown": at_shutdown,
                "spans_dropped": self.failed + shed + at_shutdown,
                "spans_handed_over": self.handed_over,
                "spans_in_export": in_flight + (0 if self.closed else queued),
                "export_bytes": self.bytes(),
            }


class CountingExporter(SpanExporter):
    """Wraps an exporter and keeps the current session's :class:`Account` of it."""

    counts_deliveries = True  # how the resolver tells a counted pipeline (see _sdk)

    def __init__(self, inner: SpanExporter, account: Account, read_bytes: Callable[[], int] | None) -> None:
        self.inner = inner
        self.account = account
        self.read_bytes = read_bytes  # the inner exporter's bytes so far, or None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        account = self.account  # the books this batch started in
        count = ours(spans)
        with account.lock:
            if not account.closed:
                account.taken += count
                account.in_flight += count
        result = SpanExportResult.FAILURE
        try:
            result = self.inner.export(spans)
        finally:
            with account.lock:
                if not account.closed:
                    account.in_flight -= count
                    if result == SpanExportResult.SUCCESS:
                        account.exported += count
                    else:
                        account.failed += count
        return result

    def shutdown(self, timeout_millis: float = 30000, **kwargs: Any) -> None:
        if "timeout_millis" in inspect.getfullargspec(self.inner.shutdown).args:
            self.inner.shutdown(timeout_millis=timeout_millis)
        else:
            self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def wrap_exporters(provider: TracerProvider) -> list[Account]:
    """Give each export pipeline on ``provider`` a counting exporter with a fresh account
    for the new session (an exporter wrapped for an earlier session changes books: what
    is still queued is handed over). Returns the new accounts."""
    accounts = []
    for processor in provider_processors(provider):
        if isinstance(processor, SimpleSpanProcessor):
            processor.span_exporter, account = _counting(processor.span_exporter, None)
        else:
            account = swap_batch_exporter(processor, _counting)  # the SDK has no setter
            if account is None:
                continue
        accounts.append(account)
    return accounts


def _counting(exporter: SpanExporter, queue: Any) -> tuple[CountingExporter, Account]:
    if isinstance(exporter, CountingExporter):
        previous = exporter.account
        previous.close(hand_over=True)
        exporter.account = Account(queue, carried_in=previous.handed_over, read_bytes=exporter.read_bytes)
        return exporter, exporter.account
    read_bytes = byte_reader(exporter)
    account = Account(queue, read_bytes=read_bytes)
    return CountingExporter(exporter, account, read_bytes), account


def totals(accounts: list[Account]) -> dict[str, int]:
    """The accounts' figures summed, for ``stats()``."""
    summed: dict[str, int] = {}
    for account in accounts:
        for key, value in account.totals().items():
            summed[key] = summed.get(key, 0) + value
    return summed
