# SPDX-License-Identifier: Apache-2.0
"""One opened trace file as a format reader sees it: a bounded byte stream, progress, truncation.

Example::

    def read(source: TraceSource) -> Iterator[ReadableSpan]:
        for chunk in iter(lambda: source.stream.read(1 << 20), b""):
            ...
            source.report_progress()

A gzip file is decompressed on the fly, and refused when it expands beyond
:data:`MAX_GZIP_RATIO` times its size (at least :data:`MIN_GZIP_LIMIT_BYTES`): a
gzip bomb ends in a one-line error instead of minutes of CPU.
"""

from __future__ import annotations

import io
import os
import zlib
from collections.abc import Callable
from typing import IO

from ._errors import TraceFileError, one_line
from ._integrity import describe_impossible

#: Called as ``progress(bytes_read, total_bytes)`` (sizes on disk) while a file is read.
ProgressCallback = Callable[[int, int], None]

#: A gzip input may expand to this many times its size on disk...
MAX_GZIP_RATIO = 200
#: ...or to this many bytes, whichever is more.
MIN_GZIP_LIMIT_BYTES = 256 << 20

GZIP_MAGIC = b"\x1f\x8b"
_GZIP_WBITS = 31  # zlib: a gzip header and trailer
_PROGRESS_STEP_BYTES = 1 << 20
_BUFFER_BYTES = 1 << 16


class TraceSource:
    """A trace file opened for one format reader.

    Attributes:
        path: the file, as given.
        stream: its bytes, decompressed when the file is gzip, size-bounded.
        total: the size of the file on disk.
        compressed: whether ``stream`` is decompressed gzip.
        allow_truncated: whether a file cut short is read up to the cut.
        truncation: the cut, once a reader (or the decompressor) found one.
        dropped: impossible spans the reader left out, by reason (``brickscope.offline.IMPOSSIBLE_REASONS``).
        notes: what else the reader wants said about the file (what it left out or
            rearranged), one line each, without the file's name.
    """

    def __init__(
        self,
        path: str,
        *,
        allow_truncated: bool = False,
        progress: ProgressCallback | None = None,
    ) -> None:
        self.path = path
        self.allow_truncated = allow_truncated
        self.truncation: TraceFileError | None = None
        self.dropped: dict[str, int] = {}
        self.notes: list[str] = []
        self._progress = progress
        self._reported = -1
        self._file = open(path, "rb")  # closed by close()
        try:
            self.total = os.fstat(self._file.fileno()).st_size  # 0 for a pipe
            # peek, not read and seek back: a pipe (``<(zcat run.jsonl.gz)``) cannot seek.
            self.compressed = self._file.peek(2)[:2] == GZIP_MAGIC
            if self.compressed:
                limit = max(MIN_GZIP_LIMIT_BYTES, MAX_GZIP_RATIO * self.total)
                raw = _Gunzip(self, self._file, limit)
                self.stream: IO[bytes] = io.BufferedReader(raw, _BUFFER_BYTES)
            else:
                self.stream = self._file
        except BaseException:
            self._file.close()
            raise

    def error(self, what: str, *, offset: int | None = None, line: int | None = None) -> TraceFileError:
        """A :class:`TraceFileError` about this file."""
        return TraceFileError(self.path, what, offset=offset, line=line)

    def truncated(self, error: TraceFileError) -> None:
        """The file is cut short at ``error``: raises it, with a word on ``--allow-truncated``
        (every command's option for ``allow_truncated``), unless truncated files are allowed.

        When they are, the first cut is kept in :attr:`truncation` and the reader
        is expected to stop after what it read before the cut.
        """
        if not self.allow_truncated:
            raise TraceFileError(
                error.path, f"{error.what} (--allow-truncated reads what was written before the cut)",
                offset=error.offset, line=error.line,
            )
        if self.truncation is None:
            self.truncation = error

    def drop(self, reason: str) -> None:
        """Count a span the reader leaves out as impossible (see ``brickscope.offline.impossible``)."""
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def note(self, text: str) -> None:
        """Say something about how the file was read (see :attr:`notes`)."""
        self.notes.append(one_line(text))

    def dropped_line(self) -> str | None:
        """One line naming the file and the impossible spans left out so far, or None."""
        count = sum(self.dropped.values())
        if not count:
            return None
        spans = "span" if count == 1 else "spans"
        return one_line(f"{self.path}: {count:,} impossible {spans} left out ({describe_impossible(self.dropped)})")

    @property
    def bytes_read(self) -> int:
        """How far into the file (on disk) reading has gone."""
        try:
            return self._file.tell()
        except ValueError:  # closed
            return self.total

    def report_progress(self, *, final: bool = False) -> None:
        """Tell the progress callback how far reading went (at most once per MiB, and at the end)."""
        if self._progress is None:
            return
        done = self.total if final else min(self.bytes_read, self.total)
        if final or done - self._reported >= _PROGRESS_STEP_BYTES:
            self._reported = done
            self._progress(done, self.total)

    def close(self) -> None:
        self.stream.close()
        self._file.close()


class _Gunzip(io.RawIOBase):
    """Decompressed gzip bytes (every member), at most ``limit`` of them; errors name the file.

    zlib rather than GzipFile: GzipFile drops what it decompressed when the input
    ends early, and a truncated file must still give its valid prefix.
    """

    def __init__(self, source: TraceSource, compressed: IO[bytes], limit: int) -> None:
        self._source = source
        self._in = compressed
        self._limit = limit
        self._count = 0
        self._zlib = zlib.decompressobj(_GZIP_WBITS)
        self._fed = False  # the current member has started
        self._pending = b""  # compressed input not yet fed
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        want = min(len(buffer), self._limit + 1 - self._count)
        while not self._done:
            if not self._pending:
                self._pending = self._in.read(_BUFFER_BYTES)
                if not self._pending:
                    self._end_of_input()
                    break
            self._fed = True
            try:
                data = self._zlib.decompress(self._pending, want)
            except zlib.error as exc:
                raise self._source.error(f"corrupt gzip data: {exc}", offset=self._count) from None
            self._pending = self._zlib.unconsumed_tail
            if self._zlib.eof:  # end of a member: another may follow (zero padding ignored)
                self._pending = self._zlib.unused_data.lstrip(b"\0")
                self._zlib = zlib.decompressobj(_GZIP_WBITS)
                self._fed = False
            if data:
                return self._deliver(buffer, data)
        return 0

    def _end_of_input(self) -> None:
        self._done = True
        if self._fed:
            self._source.truncated(
                self._source.error("truncated: the gzip stream ends before its end marker", offset=self._count)
            )

    def _deliver(self, buffer, data: bytes) -> int:  # type: ignore[no-untyped-def]
        self._count += len(data)
        if self._count > self._limit:
            raise self._source.error(
                f"decompresses to more than {self._limit >> 20} MiB ({MAX_GZIP_RATIO} times its size):"
                " refused as a likely gzip bomb; decompress it yourself (gunzip) if it is genuine"
            )
        buffer[: len(data)] = data
        return len(data)
