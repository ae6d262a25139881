# SPDX-License-Identifier: Apache-2.0
"""``open_spans``: the one way to read a recorded trace back as OpenTelemetry spans."""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING

from ._errors import TraceFileError
from ._formats import sniff
from ._integrity import describe_impossible
from ._source import ProgressCallback, TraceSource

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan


class SpanStream(Iterator["ReadableSpan"]):
    """The spans of one trace file (or their records, from :func:`open_records`), read as
    they are iterated.

    Attributes:
        path: the file.
        format: the name of its format (``"otlp-json"``, ``"pftrace"``...).
        spans_read: spans yielded so far.
        truncation: when the file was cut short and ``allow_truncated`` was
            given, the error that would have been raised (its ``offset`` or
            ``line`` says where the valid prefix ends); None otherwise.
        dropped: impossible spans left out so far, by reason (see
            :func:`~brickscope.offline.impossible`).
        notes: what else the reader said about the file (events it does not read, slices
            it rearranged), one line each, without the file's name; complete at the end.
    """

    def __init__(self, source: TraceSource, format_name: str, spans: Iterator[ReadableSpan]) -> None:
        self._source = source
        self._spans = spans
        self.path = source.path
        self.format = format_name
        self.spans_read = 0
        self.truncation: TraceFileError | None = None
        self.dropped = source.dropped
        self.notes = source.notes

    @property
    def bytes_read(self) -> int:
        """Bytes of the file (on disk) read so far."""
        return self._source.bytes_read

    @property
    def total_bytes(self) -> int:
        """The size of the file on disk."""
        return self._source.total

    def dropped_line(self) -> str | None:
        """One line naming the file and the impossible spans left out so far (what the
        offline commands print on stderr), or None when there were none."""
        return self._source.dropped_line()

    def __iter__(self) -> SpanStream:
        return self

    def __next__(self) -> ReadableSpan:
        try:
            span = next(self._spans)
        except StopIteration:
            self.truncation = self._source.truncation
            self._source.report_progress(final=True)
            self.close()
            if not self.spans_read and self.dropped:  # nothing in the file can be true
                raise self._source.error(
                    f"every span is impossible ({describe_impossible(self.dropped)}): refused"
                ) from None
            raise
        except RecursionError:
            self.close()
            raise self._source.error("nested too deeply to read") from None
        except BaseException:
            self.close()
            raise
        self.spans_read += 1
        return span

    def close(self) -> None:
        """Stop reading and close the file (idempotent)."""
        self._source.close()

    def __enter__(self) -> SpanStream:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def open_spans(
    path: str | os.PathLike[str],
    *,
    allow_truncated: bool = False,
    progress: ProgressCallback | None = None,
) -> SpanStream:
    """Open a recorded trace and iterate its spans, streaming, in file order.

    The format is told from the file's first bytes, once: OTLP JSON (JSON Lines
    as the Collector's file exporter writes, or one JSON document; gzip
    accepted) and Chrome trace JSON (torch.profiler's included) in the core,
    and every format an installed distribution registers
    under the ``brickscope.readers`` entry-point group (the Perfetto exporter
    registers ``.pftrace``).

    Args:
        path: the trace file.
        allow_truncated: read the valid prefix of a file that was cut short (a
            process killed while writing) instead of raising; the returned
            stream's ``truncation`` then says where the prefix ends.
        progress: called as ``progress(bytes_read, total_bytes)`` (sizes on
            disk) at most once per MiB read, and once at the end.

    Returns:
        An iterator of ended SDK spans (a :class:`SpanStream`: also a context
        manager, with ``spans_read``, ``bytes_read`` and ``truncation``).

    Raises:
        TraceFileError: here, when the file is empty or in no known format;
            while iterating, when it is corrupt, or truncated and
            ``allow_truncated`` is false, or at its end when every span in it
            was impossible (a span that cannot be true is otherwise left out and
            counted in ``dropped``). ``str(error)`` is one line naming the
            file, the offset or line when known, and the problem.
        OSError: the file cannot be opened or read.
    """
    return _open(path, allow_truncated, progress, records=False)


def open_records(
    path: str | os.PathLike[str],
    *,
    allow_truncated: bool = False,
    progress: ProgressCallback | None = None,
) -> SpanStream:
    """As :func:`open_spans`, but yield each span as a :data:`SpanRecord` tuple
    ``(name, start_ns, end_ns, span_id, parent_span_id or 0, resource, attributes)``.

    The same reader, errors and truncation rules; no ``ReadableSpan`` is built (a
    reader that decodes into records skips them: the ``.pftrace`` reader does), which
    is what loading a big trace into the analysis table needs.
    """
    return _open(path, allow_truncated, progress, records=True)


def _open(
    path: str | os.PathLike[str], allow_truncated: bool, progress: ProgressCallback | None, *, records: bool
) -> SpanStream:
    source = TraceSource(os.fspath(path), allow_truncated=allow_truncated, progress=progress)
    try:
        found = sniff(source)
        items = found.read_records(source) if records else found.read(source)
    except BaseException:
        source.close()
        raise
    return SpanStream(source, found.name, iter(items))
