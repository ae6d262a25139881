# SPDX-License-Identifier: Apache-2.0
"""Reading Parquet files of the span format: a :class:`TraceFormat`, and the checks that
refuse a file of another schema or a newer version in one line.

Example::

    from brickscope.offline import open_spans, parquet_files

    for path in parquet_files("traces/"):          # a file, a directory (recursively) or a glob
        with open_spans(path) as spans:            # the format is told by the magic "PAR1"
            ...

A file is read a row group at a time (about :data:`ROW_GROUP_ROWS` rows), so memory
holds one group whatever the file's size.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ._formats import SpanRecord, TraceFormat
from ._integrity import impossible
from ._parquet_rows import RowReader, make_span
from ._parquet_schema import (
    KERNEL_SOURCES_KEY,
    PARQUET_COLUMNS,
    PARQUET_SCHEMA_VERSION,
    SCHEMA_VERSION_KEY,
    import_pyarrow,
    parquet_schema,
)
from ._source import TraceSource

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

#: The first bytes (and the last) of every Parquet file.
PARQUET_MAGIC = b"PAR1"
PARQUET_SUFFIX = ".parquet"


class ParquetFormatError(ValueError):
    """A Parquet file that is not a span file this brickscope reads; ``str()`` is the problem."""


def check_parquet_schema(schema: Any, metadata: dict[bytes, bytes] | None = None) -> None:
    """Raise :class:`ParquetFormatError` unless an Arrow schema is one of the span format
    this code reads: version at most :data:`PARQUET_SCHEMA_VERSION`, every column present
    with its type (columns beyond them are allowed and ignored).

    Args:
        schema: the file's Arrow schema.
        metadata: the file's key-value metadata (``ParquetFile.metadata.metadata``);
            default: the schema's own.
    """
    metadata = (schema.metadata if metadata is None else metadata) or {}
    version = metadata.get(SCHEMA_VERSION_KEY.encode())
    if version is None:
        raise ParquetFormatError(
            f"not a brickscope span file: no {SCHEMA_VERSION_KEY} in its metadata (a Parquet file of another schema)"
        )
    try:
        number = int(version)
    except ValueError:
        raise ParquetFormatError(
            f"{SCHEMA_VERSION_KEY} is {version.decode(errors='replace')!r}, not a number"
        ) from None
    if number > PARQUET_SCHEMA_VERSION:
        raise ParquetFormatError(
            f"schema version {number} is newer than this brickscope reads ({PARQUET_SCHEMA_VERSION}): upgrade brickscope"
        )
    expected = parquet_schema()
    missing = [c.name for c in PARQUET_COLUMNS if c.name not in schema.names]
    if missing:
        raise ParquetFormatError(f"missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    for column in PARQUET_COLUMNS:
        found, want = schema.field(column.name).type, expected.field(column.name).type
        if found != want and not (want == _string(found) or _is_dictionary_of(found, want)):
            raise ParquetFormatError(f"column {column.name} is {found}, expected {want}")


def _string(found: Any) -> Any:
    """A large_string column reads as string: the same values."""
    pa = import_pyarrow()
    return pa.string() if found == pa.large_string() else found


def _is_dictionary_of(found: Any, want: Any) -> bool:
    pa = import_pyarrow()
    return pa.types.is_dictionary(found) and found.value_type == want


def open_parquet(source: TraceSource) -> Any:
    """The ``pyarrow.parquet.ParquetFile`` of ``source``, checked; errors name the file."""
    try:
        pa = import_pyarrow()
    except ImportError as error:
        raise source.error(f"a Parquet file; {error}") from None
    try:
        parquet = pa.parquet.ParquetFile(source.path)
    except (pa.ArrowInvalid, OSError) as error:
        raise source.error(f"not a complete Parquet file (a writer killed before its footer?): {error}") from None
    try:
        check_parquet_schema(parquet.schema_arrow, parquet.metadata.metadata)
    except ParquetFormatError as error:
        raise source.error(str(error)) from None
    return parquet


def kernel_sources_metadata(parquet: Any) -> str | None:
    """The file's kernel source registries (JSON), from its metadata; None when absent."""
    value = (parquet.metadata.metadata or {}).get(KERNEL_SOURCES_KEY.encode())
    return value.decode() if value is not None else None


class _Parquet(TraceFormat):
    name = "parquet"

    def matches(self, head: bytes) -> bool:
        return head.startswith(PARQUET_MAGIC)

    def read(self, source: TraceSource) -> Iterator[ReadableSpan]:
        return map(make_span, _rows(source))

    def read_records(self, source: TraceSource) -> Iterator[SpanRecord]:
        return ((row[3], row[4], row[5], row[1], row[2], row[6], row[7]) for row in _rows(source))


def _rows(source: TraceSource) -> Iterator[tuple[Any, ...]]:
    """Every possible row of the file (see RowReader.rows), a row group at a time; the
    impossible ones are counted in ``source.dropped``."""
    parquet = open_parquet(source)
    pa = import_pyarrow()
    reader = RowReader()
    names = [c.name for c in PARQUET_COLUMNS]
    metadata = parquet.metadata
    done = len(PARQUET_MAGIC)
    for group in range(metadata.num_row_groups):
        try:
            table = parquet.read_row_group(group, columns=names)
        except (pa.ArrowException, OSError) as error:
            raise source.error(f"row group {group}: corrupt: {error}") from None
        for batch in table.to_batches():
            for row in reader.rows(batch):
                reason = impossible(row[4], row[5], row[7])
                if reason is not None:
                    source.drop(reason)
                    continue
                yield row
        # Progress by row group: the source's own file is not read by pyarrow, so its
        # position is set to how far the row groups read reach.
        row_group = metadata.row_group(group)
        done += sum(row_group.column(i).total_compressed_size for i in range(row_group.num_columns))
        source.stream.seek(min(done, source.total))
        source.report_progress()


PARQUET = _Parquet()


def parquet_files(path: str | os.PathLike[str]) -> list[str]:
    """The Parquet files a path names: the file itself, every ``*.parquet`` under a
    directory (recursively, sorted), or the files a glob pattern matches (sorted).

    Raises:
        FileNotFoundError: nothing exists there, or the directory or pattern holds no Parquet file.
    """
    name = os.fspath(path)
    if os.path.isdir(name):
        found = sorted(
            os.path.join(root, file)
            for root, _dirs, files in os.walk(name)
            for file in files
            if file.endswith(PARQUET_SUFFIX) and not file.startswith(".")
        )
        if not found:
            raise FileNotFoundError(f"{name}: directory holds no {PARQUET_SUFFIX} file")
        return found
    if os.path.exists(name):
        return [name]
    if glob.has_magic(name):
        found = sorted(p for p in glob.glob(name, recursive=True) if os.path.isfile(p))
        if not found:
            raise FileNotFoundError(f"{name}: no file matches this pattern")
        return found
    raise FileNotFoundError(f"{name}: no such file or directory")
