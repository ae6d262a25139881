# SPDX-License-Identifier: Apache-2.0
"""The one read-batch-export loop of the offline tools, their progress line and their collector pause.

Example::

    with open_spans(path, progress=Progress(path)) as spans:
        count = replay(spans, exporter)

Every offline command (``convert``, ``flamegraph``, the analysis commands) sends
a recorded trace through the same exporters a live run uses, batch by batch, so
memory stays bounded by the exporter, never by the trace.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter

#: Inputs smaller than this show no progress.
PROGRESS_MIN_BYTES = 8 << 20
#: Spans per export call: the SDK's batches are smaller; bigger ones cost memory for nothing.
BATCH_SPANS = 4096


def replay(
    spans: Iterable[ReadableSpan],
    exporter: SpanExporter,
    *,
    batch_spans: int = BATCH_SPANS,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """Export every span of ``spans`` through ``exporter`` in batches; returns how many.

    Raises:
        OSError: the exporter reported a failed batch (its own log says why).
    """
    from opentelemetry.sdk.trace.export import SpanExportResult

    count = 0
    batch: list[ReadableSpan] = []
    for span in spans:
        batch.append(span)
        if len(batch) >= batch_spans:
            count += _export(exporter, batch, SpanExportResult.SUCCESS)
            batch = []
            if on_batch is not None:
                on_batch(count)
    count += _export(exporter, batch, SpanExportResult.SUCCESS)
    return count


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a trace is read and written, and restore
    it after (errors included).

    Readers and exporters make millions of short-lived acyclic objects (spans, their
    attribute dicts, the writers' slices), which reference counting frees at once. A batch
    lives long enough for its objects to reach the oldest generation, so the collections
    their allocation triggers walk every live object again and again and find nothing to
    collect: a quarter to a third of an offline command's CPU (docs/benchmarks.md). For an
    offline command's own process; a live program keeps its collector.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _export(exporter: SpanExporter, batch: list[ReadableSpan], success: object) -> int:
    if batch and exporter.export(batch) is not success:
        raise OSError(f"{type(exporter).__name__} could not export a batch of {len(batch)} spans (see the log above)")
    return len(batch)


class Progress:
    """``progress(bytes_read, total_bytes)`` shown on stderr: for big inputs, at most twice a second.

    Args:
        label: what is read (the file name).
        quiet: show nothing.
        min_bytes: inputs smaller than this show nothing (default PROGRESS_MIN_BYTES).
        stream: where to write (stderr).
        clock: seconds, monotonic (tests pass their own).
    """

    def __init__(
        self,
        label: str | os.PathLike[str],
        *,
        quiet: bool = False,
        min_bytes: int | None = None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = os.fspath(label)
        self.extra = ""  # appended to the line, e.g. ", 12,345 spans"
        self._quiet = quiet
        self._min_bytes = min_bytes
        self._stream = stream if stream is not None else sys.stderr
        self._clock = clock
        self._last: float | None = None
        self._open_line = False

    def __call__(self, done: int, total: int) -> None:
        if self._quiet or total < (PROGRESS_MIN_BYTES if self._min_bytes is None else self._min_bytes):
            return
        now = self._clock()
        if done < total and self._last is not None and now - self._last < 0.5:
            return
        self._last = now
        tty = self._stream.isatty()
        percent = 100.0 * done / total if total else 100.0
        line = f"{self.label}: {percent:5.1f}% of {total / 1e6:,.1f} MB{self.extra}"
        if tty and done < total:
            self._stream.write("\r" + line)
            self._open_line = True
        else:
            self._stream.write(("\r" if self._open_line else "") + line + "\n")
            self._open_line = False
        self._stream.flush()

    def finish(self) -> None:
        """End an unfinished progress line (before an error message, say)."""
        if self._open_line:
            self._stream.write("\n")
            self._stream.flush()
            self._open_line = False
