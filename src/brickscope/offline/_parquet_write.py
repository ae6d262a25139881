# SPDX-License-Identifier: Apache-2.0
"""Writing spans to a Parquet file of the span format, streaming.

Example::

    from brickscope.offline import ParquetSpanWriter

    with ParquetSpanWriter("run.parquet", run="baseline") as writer:
        writer.write(spans)            # any number of calls; memory holds one row group

Spans become Arrow record batches of :data:`BATCH_ROWS`; a row group is written once
``row_group_rows`` are pending, and :meth:`ParquetSpanWriter.close` writes the rest and
the footer (with the schema version and the kernel source registries). A Parquet file is
readable only once its footer is written: the writer writes to the path it is given, and
callers that publish files (``convert``, the exporter) give it a temporary name and
rename it when :meth:`~ParquetSpanWriter.close` returns.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ._parquet_rows import SpanBatch
from ._parquet_schema import (
    KERNEL_SOURCES_KEY,
    PARQUET_COLUMNS,
    PARQUET_SCHEMA_VERSION,
    ROW_GROUP_ROWS,
    SCHEMA_VERSION_KEY,
    STRING,
    import_pyarrow,
    parquet_schema,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

#: Spans turned into one Arrow batch at a time (the span objects held at most).
BATCH_ROWS = 8192
#: Columns written with DELTA_BINARY_PACKED instead of a dictionary: times and durations,
#: which differ on nearly every row but little from the row before.
DELTA_COLUMNS = ("start_ns", "end_ns", "host_start_ns", "host_duration_ns", "gpu_duration_ns", "self_ns")
#: zstd level: 3 is zstd's default (docs/benchmarks.md gives the bytes a span it makes).
ZSTD_LEVEL = 3


class ParquetSpanWriter:
    """Streams spans into one Parquet file of the span format (:func:`parquet_schema`).

    Not thread-safe: one thread writes (the exporter serialises its calls).

    Args:
        path: the file to write (created or replaced).
        run: the ``run`` column of every row; None: each resource's ``service.instance.id``.
        row_group_rows: rows per row group (a reader holds about one group in memory).
        pace: called between small units of work (a span, a column of a batch): an
            exporter's :class:`brickscope.sdk.pacing.Pacer` tick, so that a long write never
            keeps the interpreter from the application thread for long.

    Raises:
        ImportError: pyarrow is not installed (the message says what to install).
        OSError: the file cannot be created.

    .. versionadded:: 0.3.0
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        run: str | None = None,
        row_group_rows: int = ROW_GROUP_ROWS,
        pace: Callable[[], object] | None = None,
    ) -> None:
        if row_group_rows < 1:
            raise ValueError(f"row_group_rows must be at least 1, got {row_group_rows}")
        pa = import_pyarrow()
        self.path = os.fspath(path)
        self.row_group_rows = row_group_rows
        self._pace = pace
        self._batch = SpanBatch(run)
        self._pending: list[Any] = []  # Arrow batches not written yet
        self._pending_rows = 0
        self._pa = pa
        self._writer = pa.parquet.ParquetWriter(
            self.path,
            parquet_schema(),
            compression="zstd",
            compression_level=ZSTD_LEVEL,
            use_dictionary=[c.name for c in PARQUET_COLUMNS if c.type == STRING or c.name in _DICTIONARY_INTS],
            column_encoding=dict.fromkeys(DELTA_COLUMNS, "DELTA_BINARY_PACKED"),
            write_statistics=list(STATISTICS_COLUMNS),
            # The Arrow schema (4.5 kB in the footer) is not needed to read the file back:
            # the Parquet types give the same Arrow types (int8, fixed_size_binary(16)...).
            store_schema=False,
        )
        #: Spans written so far (in row groups, or pending).
        self.spans_written = 0
        self._closed = False

    @property
    def skipped_spans(self) -> int:
        """Spans left out because they have no start or end time (or one outside int64)."""
        return self._batch.skipped_spans

    @property
    def pending_rows(self) -> int:
        """Rows held in memory, not yet in a row group."""
        return self._pending_rows + len(self._batch)

    def write(self, spans: Iterable[ReadableSpan]) -> int:
        """Add spans; a row group is written whenever ``row_group_rows`` are pending. Returns how many were kept."""
        kept = 0
        batch, pace = self._batch, self._pace
        for span in spans:
            if batch.add(span):
                kept += 1
                if len(batch) >= BATCH_ROWS:
                    self.end_batch()
            if pace is not None:
                pace()
        self.spans_written += kept
        return kept

    def end_batch(self) -> None:
        """Turn the spans written so far into Arrow columns now (the writer then holds no
        span object); a full row group is written out."""
        if len(self._batch):
            arrow = self._batch.take(self._pace)
            self._pending.append(arrow)
            self._pending_rows += arrow.num_rows
            self._write_groups(final=False)

    def flush_row_group(self) -> None:
        """Write every pending row now, as one (smaller) row group."""
        self.end_batch()
        self._write_groups(final=True)

    def close(self) -> None:
        """Write what is pending and the footer. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.flush_row_group()
            metadata = {SCHEMA_VERSION_KEY: str(PARQUET_SCHEMA_VERSION)}
            sources = _merged_sources(self._batch.kernel_sources)
            if sources:
                metadata[KERNEL_SOURCES_KEY] = sources
            self._writer.add_key_value_metadata(metadata)
        finally:
            self._writer.close()

    def abort(self) -> None:
        """Close without writing what is pending (the file is then left to the caller to remove)."""
        if not self._closed:
            self._closed = True
            self._writer.close()

    def _write_groups(self, *, final: bool) -> None:
        """Write full row groups (and, when ``final``, the rest)."""
        size = self.row_group_rows
        if not self._pending_rows or (not final and self._pending_rows < size):
            return
        table = self._pa.Table.from_batches(self._pending, schema=parquet_schema())
        self._pending, self._pending_rows = [], 0
        whole = table.num_rows if final else table.num_rows - table.num_rows % size
        if whole:
            self._writer.write_table(table.slice(0, whole), row_group_size=size)
        if whole < table.num_rows:
            rest = table.slice(whole).combine_chunks().to_batches()
            self._pending = rest
            self._pending_rows = table.num_rows - whole

    def __enter__(self) -> ParquetSpanWriter:
        return self

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


#: Columns besides the strings with few distinct values, which a dictionary shrinks. Not
#: parent_span_id: a parent has a handful of children, and plain zstd does better there.
_DICTIONARY_INTS = ("thread_id", "pid", "step", "layer", "device_ordinal", "stream", "trace_id")
#: Columns with min/max statistics in the footer (what a query filters on: row groups that
#: cannot match are skipped); the JSON columns' statistics would be long strings for nothing.
STATISTICS_COLUMNS = (
    "run", "trace_id", "span_id", "parent_span_id", "name", "kind", "category", "start_ns", "end_ns", "clock",
    "step", "layer", "service_name", "service_instance_id", "host_name", "pid", "rank", "device_ordinal", "stream",
)  # fmt: skip


def _merged_sources(registries: dict[str, None]) -> str | None:
    """The resources' kernel source registries as one JSON object (later entries win), or None."""
    merged: dict[str, Any] = {}
    for text in registries:
        try:
            entries = json.loads(text)
        except ValueError:
            continue
        if isinstance(entries, dict):
            merged.update(entries)
    return json.dumps(merged, separators=(",", ":"), sort_keys=True) if merged else None
