# SPDX-License-Identifier: Apache-2.0
"""The OpenTelemetry span exporter that writes a Parquet dataset of rolling part files.

Example::

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from brickscope.exporter.parquet import ParquetSpanExporter

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(ParquetSpanExporter(run="job42")))

A Parquet file is readable only once its footer is written, so spans go into a part file
under a hidden temporary name, and the part is published (renamed to
``part-<n>.parquet``) when it holds ``part_rows`` spans or is ``part_interval_millis`` old
(checked at each export), on :meth:`force_flush` and on :meth:`shutdown`. Readers that list ``*.parquet`` never see a part being written; a crash
loses the spans of the open part, and only those.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from brickscope.exporter.parquet import environment_variables as env
from brickscope.offline import ParquetSpanWriter
from brickscope.sdk.pacing import Pacer
from brickscope.trace import attributes as A

logger = logging.getLogger(__name__)

DEFAULT_PATH = "brickscope-parquet/rank-{rank}"
DEFAULT_PART_ROWS = 1 << 20
DEFAULT_PART_INTERVAL_MILLIS = 60_000
_PART = re.compile(r"part-(\d+)\.parquet$")


class ParquetSpanExporter(SpanExporter):
    """Writes ended spans as rows of the brickscope Parquet span format, in part files.

    ``export`` turns each batch into Arrow columns at once (the exporter keeps no span
    object) and writes a row group whenever one is full, pausing briefly every half
    millisecond of work so the application thread never waits long for the interpreter;
    it never raises: a failure is logged once and returns ``FAILURE``, and the spans it
    loses are counted in :attr:`dropped_spans`. Memory holds at most one row group.

    Args:
        path: the directory of the part files; ``{pid}`` becomes the process id and
            ``{rank}`` the resource's ``brickscope.rank`` (the process id when there is
            none), read from the first span exported. Default:
            ``$BRICKSCOPE_PARQUET_PATH``, else ``brickscope-parquet/rank-{rank}``.
        run: the ``run`` column. Default: ``$BRICKSCOPE_PARQUET_RUN``, else each
            resource's ``service.instance.id``.
        part_rows: spans per part file. Default: ``$BRICKSCOPE_PARQUET_PART_ROWS``, else 1048576.
        part_interval_millis: the longest a part stays open: an export that finds it this
            old publishes it, so a crash loses at most about this long of spans. Default:
            ``$BRICKSCOPE_PARQUET_PART_INTERVAL_MILLIS``, else 60000.
        row_group_rows: rows per row group (readers hold about one at a time).
        clock: monotonic nanoseconds, for the part's age (tests pass their own).

    Raises:
        ValueError: ``part_rows``, ``part_interval_millis`` or ``row_group_rows`` below 1, or a path whose existing
            part cannot be a directory brickscope may write in.
        ImportError: pyarrow is missing (``pip install 'brickscope[parquet]'``).

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        run: str | None = None,
        part_rows: int | None = None,
        part_interval_millis: int | None = None,
        row_group_rows: int = 128 * 1024,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if path is None:
            path = os.environ.get(env.BRICKSCOPE_PARQUET_PATH) or DEFAULT_PATH
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        if part_rows is None:
            part_rows = _int_from_env(env.BRICKSCOPE_PARQUET_PART_ROWS, DEFAULT_PART_ROWS)
        if part_interval_millis is None:
            part_interval_millis = _int_from_env(
                env.BRICKSCOPE_PARQUET_PART_INTERVAL_MILLIS, DEFAULT_PART_INTERVAL_MILLIS
            )
        if min(part_rows, part_interval_millis, row_group_rows) < 1:
            raise ValueError(
                "part_rows, part_interval_millis and row_group_rows must be at least 1,"
                f" got {part_rows}, {part_interval_millis} and {row_group_rows}"
            )
        from brickscope.offline import parquet_schema

        parquet_schema()  # pyarrow is there, or an ImportError that says what to install
        self._template = os.fspath(path).replace("{pid}", str(os.getpid()))
        _check_writable(self._template)
        self.run = run if run is not None else os.environ.get(env.BRICKSCOPE_PARQUET_RUN) or None
        self.part_rows = part_rows
        self.part_interval_millis = part_interval_millis
        self.row_group_rows = row_group_rows
        self._clock = clock
        self._opened_ns = 0
        #: The directory of the part files, once the first span told the rank.
        self.directory: str | None = None
        #: The part files published so far.
        self.parts: list[str] = []
        self._pacer = Pacer()
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._writer: ParquetSpanWriter | None = None
        self._temporary = ""
        self._closed = False
        self._failures = 0
        self._skipped = 0
        self._dropped = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Add one batch to the open part file; ``FAILURE`` (logged, never raised) if it cannot be written.

        May be called from any thread; calls are serialised.
        """
        with self._lock:
            if self._closed:
                return SpanExportResult.FAILURE
            if os.getpid() != self._pid:
                self._fail("%s belongs to process %d; create one exporter per process", self._template, self._pid)
                self._dropped += len(spans)
                return SpanExportResult.FAILURE
            if not spans:
                return SpanExportResult.SUCCESS
            self._pacer.start()
            earlier = self._writer.spans_written if self._writer is not None else 0
            try:
                writer = self._writer or self._open(spans[0])
                writer.write(spans)
                writer.end_batch()
            except Exception as error:  # a full disk, a bug: never the application's problem
                self._fail("cannot write %d spans to %s: %s", len(spans), self._temporary or self._template, error)
                self._discard(earlier + len(spans))
                return SpanExportResult.FAILURE
            age_ms = (self._clock() - self._opened_ns) / 1e6
            if writer.spans_written >= self.part_rows or age_ms >= self.part_interval_millis:
                return SpanExportResult.SUCCESS if self._publish() else SpanExportResult.FAILURE
            return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Close and publish the open part file, so every span exported so far is in a readable file."""
        with self._lock:
            return self._publish()

    def shutdown(self) -> None:
        """Publish the open part file. Idempotent; later exports return ``FAILURE``."""
        with self._lock:
            if self._closed:
                return
            self._publish()
            self._closed = True

    def __enter__(self) -> ParquetSpanExporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def skipped_spans(self) -> int:
        """Spans left out because their times cannot be written (no start or end time):
        impossible spans, which written with made-up times would read back as plausible ones."""
        return self._skipped + (self._writer.skipped_spans if self._writer is not None else 0)

    @property
    def dropped_spans(self) -> int:
        """Spans exported but lost: the open part could not be written or closed (a full disk,
        a forked child's export)."""
        return self._dropped

    @property
    def failed_exports(self) -> int:
        """How many export, flush or close calls failed so far."""
        return self._failures

    def _open(self, first: ReadableSpan) -> ParquetSpanWriter:
        """Start a part file in the directory the first span's resource names."""
        if self.directory is None:
            rank = _rank(first)
            self.directory = self._template.replace("{rank}", rank)
        os.makedirs(self.directory, exist_ok=True)
        self._temporary = os.path.join(self.directory, f".part-{os.getpid()}-{len(self.parts)}.parquet.tmp")
        self._writer = ParquetSpanWriter(
            self._temporary, run=self.run, row_group_rows=self.row_group_rows, pace=self._pacer.tick
        )
        self._opened_ns = self._clock()
        return self._writer

    def _publish(self) -> bool:
        """Close the open part and give it its name: the next free ``part-<n>.parquet``."""
        writer, self._writer = self._writer, None
        if writer is None:
            return True
        self._skipped += writer.skipped_spans
        try:
            writer.close()
            self.parts.append(_link_next_part(self._temporary))
        except Exception as error:
            self._fail("cannot close the part file %s: %s", self._temporary, error)
            self._dropped += writer.spans_written
            _remove(self._temporary)
            return False
        return True

    def _discard(self, lost: int) -> None:
        """Give up the open part after a failed write: its spans (``lost``, the batch included) are counted."""
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.abort()
            except Exception:  # already failing; the temporary file is removed below
                logger.debug("closing the failed part %s", self._temporary, exc_info=True)
        _remove(self._temporary)
        self._dropped += lost

    def _fail(self, message: str, *args: object) -> None:
        # Logged once, then counted: a full disk must not flood the log.
        self._failures += 1
        if self._failures == 1:
            logger.error(message + " (further failures are counted, not logged)", *args)


def _rank(span: ReadableSpan) -> str:
    """The process's rank as the path's ``{rank}``: the resource's brickscope.rank, else the pid."""
    attributes: Any = getattr(span.resource, "attributes", None) or {}
    rank = attributes.get(A.RANK)
    text = str(rank) if rank is not None and str(rank) != "" else str(os.getpid())
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def _link_next_part(temporary: str) -> str:
    """Publish ``temporary`` as the first free ``part-<n>.parquet`` of its directory (a hard
    link fails on an existing name, so processes sharing a directory never overwrite each other)."""
    directory = os.path.dirname(temporary)
    taken = [int(m.group(1)) for name in os.listdir(directory) if (m := _PART.match(name))]
    number = max(taken, default=-1) + 1
    while True:
        final = os.path.join(directory, f"part-{number:05d}.parquet")
        try:
            os.link(temporary, final)
        except FileExistsError:
            number += 1
            continue
        os.unlink(temporary)
        return final


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _check_writable(template: str) -> None:
    """Refuse at once a path whose existing part is a file, or a directory brickscope may not write in."""
    existing = template.split("{rank}", 1)[0] or "."
    while not os.path.exists(existing):
        parent = os.path.dirname(existing.rstrip(os.sep))
        if parent == existing or not parent:
            existing = "."
            break
        existing = parent
    if not os.path.isdir(existing):
        raise ValueError(f"cannot write Parquet parts under {template!r}: {existing!r} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write Parquet parts under {template!r}: {existing!r} is not writable")


def _int_from_env(name: str, default: int) -> int:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a whole number") from None
