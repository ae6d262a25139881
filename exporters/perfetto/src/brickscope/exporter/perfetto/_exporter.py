# SPDX-License-Identifier: Apache-2.0
"""The OpenTelemetry span exporter that streams a Perfetto ``.pftrace``.

Example::

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from brickscope.exporter.perfetto import PerfettoSpanExporter

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(PerfettoSpanExporter("trace.pftrace")))

Or, with no code: ``OTEL_TRACES_EXPORTER=perfetto`` and optionally
``BRICKSCOPE_PERFETTO_PATH=rank{pid}.pftrace``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Sequence
from typing import IO

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from brickscope.offline import OutputError, check_output
from brickscope.sdk.pacing import Pacer

from ._writer import TraceWriter

logger = logging.getLogger(__name__)

#: Environment variable: where ``PerfettoSpanExporter()`` (and so
#: ``OTEL_TRACES_EXPORTER=perfetto``) writes when no path is passed. ``{pid}`` is
#: replaced by the process id, so ranks sharing one environment write one file
#: each. Default: ``brickscope-{pid}.pftrace`` in the working directory.
BRICKSCOPE_PERFETTO_PATH = "BRICKSCOPE_PERFETTO_PATH"
DEFAULT_PATH = "brickscope-{pid}.pftrace"


class PerfettoSpanExporter(SpanExporter):
    """Writes ended spans to a Perfetto protobuf trace, appending one batch per export.

    Every :meth:`export` appends complete packets with unbuffered writes, so the file is a valid trace after each call: a crash
    loses at most the batch in flight. Memory stays bounded however long the run.

    Args:
        path: the ``.pftrace`` to write; ``{pid}`` is replaced by the process id.
            Default: ``$BRICKSCOPE_PERFETTO_PATH``, else ``brickscope-{pid}.pftrace``.
        overwrite: replace an existing file. Without it an existing file is an
            error, except for the default name, which then gets a numbered suffix.
        max_tracked_slices: slices remembered to keep per-track nesting correct
            across batches (about 150 bytes each); older ones are forgotten and a
            late span that reaches back past them goes on an overflow track.

    Raises:
        ValueError: the file exists (and ``overwrite`` is false) or cannot be
            created; the message says which path and why.

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        overwrite: bool = False,
        max_tracked_slices: int = 200_000,
    ) -> None:
        if max_tracked_slices < 1:
            raise ValueError(f"max_tracked_slices must be at least 1, got {max_tracked_slices}")
        # Encoding pauses every PACE_BUDGET_NS: the application thread never waits
        # longer than that for the interpreter while a batch is encoded (see brickscope.sdk.pacing).
        self._pacer = Pacer()
        self._writer = TraceWriter(max_tracked_slices=max_tracked_slices, pace=self._pacer.tick)
        self._lock = threading.Lock()
        self._failures = 0
        self._pid = os.getpid()
        self._file: IO[bytes] | None = None
        self.path, self._file = _open(path, overwrite)
        header = self._writer.header()
        try:
            _write_all(self._file, header)
        except OSError as error:
            with contextlib.suppress(OSError):
                self._file.close()
            raise ValueError(f"cannot write the Perfetto trace {self.path!r}: {error}") from error
        self._size = len(header)
        self._writer.commit()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Append one batch; ``FAILURE`` (logged, never raised) if it cannot be written.

        May be called from any thread; calls are serialised. Encoding pauses briefly
        every half millisecond, so a thread waiting for the interpreter (the
        application's) gets it without waiting for the whole batch; the file is
        written with one unbuffered write, which releases the interpreter.
        """
        with self._lock:
            if self._file is None:
                return SpanExportResult.FAILURE
            if os.getpid() != self._pid:
                # A forked child shares the file offset and the sequence: writing
                # would interleave with the parent and corrupt the trace.
                self._fail("%s belongs to process %d; create one exporter per process", self.path, self._pid)
                return SpanExportResult.FAILURE
            skipped = self._writer.skipped_spans
            self._pacer.start()
            try:
                data = self._writer.encode(spans)
                if self._writer.skipped_spans > skipped and not skipped:
                    logger.warning(
                        "%s: skipping spans without a start or end time, ending before they start, or with a time"
                        " outside 0..2**64-1 ns (counted in skipped_spans, not logged again)",
                        self.path,
                    )
            except Exception:  # a bug here must not reach the application
                self._writer.rollback()
                self._fail("cannot encode %d spans for %s", len(spans), self.path, exc_info=True)
                return SpanExportResult.FAILURE
            try:
                _write_all(self._file, data)
            except OSError as error:
                self._truncate()
                self._writer.rollback()
                self._fail("cannot write %d spans to %s: %s", len(spans), self.path, error)
                return SpanExportResult.FAILURE
            self._size += len(data)
            self._writer.commit()
            return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Every export is already written through; this also asks the OS to sync the file to disk."""
        with self._lock:
            if self._file is None:
                return False
            try:
                os.fsync(self._file.fileno())
            except OSError as error:
                self._fail("cannot sync %s: %s", self.path, error)
                return False
            return True

    def shutdown(self) -> None:
        """Close the file. Idempotent; later exports return ``FAILURE``."""
        with self._lock:
            if self._file is None:
                return
            file, self._file = self._file, None
            try:
                file.close()
            except OSError as error:
                self._fail("cannot close %s: %s", self.path, error)

    def __enter__(self) -> PerfettoSpanExporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _truncate(self) -> None:
        """Cut a partly written batch off, so the file stays a valid trace."""
        assert self._file is not None
        try:
            self._file.seek(self._size)
            self._file.truncate()
        except (OSError, ValueError) as error:
            logger.error("cannot cut the partial batch off %s: %s", self.path, error)

    def _fail(self, message: str, *args: object, exc_info: bool = False) -> None:
        # Logged once, then counted: a full disk must not flood the log.
        self._failures += 1
        if self._failures == 1:
            logger.error(message + " (further failures are counted, not logged)", *args, exc_info=exc_info)

    @property
    def bytes_written(self) -> int:
        """Bytes of the trace file written so far (header and every batch kept): what
        brickscope's self-telemetry reports as ``brickscope.export.bytes``."""
        return self._size

    @property
    def skipped_spans(self) -> int:
        """Spans left out of the trace so far because their times cannot be written: no start
        or end time, an end before the start, or a time outside 0..2**64-1 ns. Such a span is
        impossible; written as a zero-length slice it would read back as a plausible one."""
        return self._writer.skipped_spans

    @property
    def failed_exports(self) -> int:
        """How many export, flush or close calls failed so far."""
        return self._failures


def _write_all(file: IO[bytes], data: bytes) -> None:
    """Write every byte (an unbuffered write may be partial) or raise OSError."""
    view = memoryview(data)
    while view:
        written = file.write(view)
        if not written:
            raise OSError(f"write returned {written!r}")
        view = view[written:]


def _open(path: str | os.PathLike[str] | None, overwrite: bool) -> tuple[str, IO[bytes]]:
    """Open the trace file for writing, refusing to clobber an existing one unless asked."""
    default = path is None and not os.environ.get(BRICKSCOPE_PERFETTO_PATH)
    if path is None:
        path = os.environ.get(BRICKSCOPE_PERFETTO_PATH) or DEFAULT_PATH
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    name = os.fspath(path).replace("{pid}", str(os.getpid()))
    candidate = name
    for attempt in range(1, 1000):
        try:
            # Only a regular file is ever replaced: never a link's target or a device.
            check_output(candidate, overwrite=True)
        except OutputError as error:
            raise ValueError(f"cannot create the Perfetto trace: {error}") from None
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL) | getattr(os, "O_NOFOLLOW", 0)
        try:
            # Unbuffered: a failed write must leave nothing behind to be retried later.
            return candidate, os.fdopen(os.open(candidate, flags, 0o666), "wb", buffering=0)
        except FileExistsError:
            if not default:
                raise ValueError(
                    f"{candidate!r} already exists; pass overwrite=True or choose another path"
                ) from None
            stem, ext = os.path.splitext(name)
            candidate = f"{stem}-{attempt}{ext}"
        except OSError as error:
            raise ValueError(f"cannot create the Perfetto trace {candidate!r}: {error}") from error
    raise ValueError(f"{name!r} and its numbered variants all exist; pass a path")
