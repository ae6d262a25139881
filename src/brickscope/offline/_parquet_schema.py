# SPDX-License-Identifier: Apache-2.0
"""The Parquet span format, version 1: its columns, their Arrow types, and which span
field or attribute each one holds.

Example::

    from brickscope.offline import PARQUET_COLUMNS, parquet_schema

    schema = parquet_schema()                     # a pyarrow.Schema (needs brickscope[parquet])
    typed = {c.name: c.key for c in PARQUET_COLUMNS if c.key}

One row per span. Everything the analysis reads has a typed column; every other span
attribute is kept, as JSON, in ``attributes``, so a file reads back into the same spans
(docs/semantic-conventions.md, "Parquet span format"). Nothing here imports pyarrow
until :func:`parquet_schema` is called: the core works without it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

from brickscope.trace import attributes as A

#: The version this code writes and the newest it reads: the file metadata key
#: :data:`SCHEMA_VERSION_KEY` holds it as text. A reader refuses a newer file.
PARQUET_SCHEMA_VERSION = 1
#: File key-value metadata: the schema version (``"1"``).
SCHEMA_VERSION_KEY = "brickscope.schema_version"
#: File key-value metadata: JSON ``{"<hash>": [kind, name, path]}``, every resource's kernel
#: source registry (``brickscope.kernel.sources``) merged; absent when no resource had one.
KERNEL_SOURCES_KEY = "brickscope.kernel_sources"
#: Rows per row group the writers use by default: a reader holds about one group at a time.
ROW_GROUP_ROWS = 128 * 1024
#: What to install for Parquet support (the one line printed when pyarrow is missing).
INSTALL_HINT = "pip install 'brickscope[parquet]'"

# Column types, as names (pyarrow is imported only by parquet_schema()).
STRING = "string"  # dictionary-encoded in the file
INT64 = "int64"
INT8 = "int8"
FLOAT64 = "float64"
INT64_LIST = "list<int64>"
ID128 = "fixed_size_binary(16)"
#: A 64-bit hash attribute written as 16 hex digits (kernel source hash, output checksum),
#: stored as the int64 of the same 64 bits.
HASH64 = "int64 (hash)"


class Column(NamedTuple):
    """One column of the format."""

    name: str
    type: str
    nullable: bool
    #: The span attribute the column holds (read back under this key), or "" for a span
    #: field, a resource field or a derived value.
    key: str = ""


def _column(name: str, type_: str, key: str = "", *, nullable: bool = True) -> Column:
    return Column(name, type_, nullable, key)


#: Attribute keys whose short scope keyword (``bs.brick("gemm", bytes=n)``) the same column
#: holds when the full key is absent; read back, the value is under the full key.
SHORT_KEYWORDS: dict[str, str] = {full: short for short, full in A.SCOPE_KEYWORDS.items()}

#: Every column, in file order. Strings are dictionary-encoded; integers that are 64-bit
#: ids or hashes hold the two's-complement int64 of the unsigned value (Spark has no
#: unsigned 64-bit type).
PARQUET_COLUMNS: tuple[Column, ...] = (
    # the run this span belongs to: convert's --run, the exporter's run name (default: the
    # source file's stem, or the resource's service.instance.id)
    _column("run", STRING),
    _column("trace_id", ID128, nullable=False),
    _column("span_id", INT64, nullable=False),
    _column("parent_span_id", INT64, nullable=False),  # 0: a root
    _column("name", STRING, nullable=False),
    # brickscope.scope.kind when it is one of step, layer, brick, kernel, overhead, gc; else "other"
    _column("kind", STRING, A.SCOPE_KIND, nullable=False),
    _column("category", STRING, A.BRICK_CATEGORY),
    # ns since the Unix epoch; the GPU interval for GPU-timed spans
    _column("start_ns", INT64, nullable=False),
    _column("end_ns", INT64, nullable=False),
    # brickscope.clock ("host", "cuda", "gpu"); null when the span did not say (read as host)
    _column("clock", STRING, A.CLOCK),
    _column("self_ns", INT64, A.BRICK_SELF_DURATION_NS),
    _column("step", INT64, A.STEP_NUMBER),
    _column("layer", INT64, A.LAYER_INDEX),
    _column("thread_id", INT64, A.THREAD_ID),
    # the resource's process identity: the analysis labels a process without a launcher rank
    # by these (service, instance id, host, pid), a ranked one by ``rank``
    _column("service_name", STRING),
    _column("service_instance_id", STRING),
    _column("host_name", STRING),
    _column("pid", INT64),
    _column("rank", STRING),  # the resource's brickscope.rank as text; null when absent
    _column("device_ordinal", INT64, A.GPU_DEVICE_ID),
    _column("device_model", STRING),  # the resource's brickscope.gpu.device.names[device_ordinal]
    _column("stream", INT64, A.GPU_STREAM_ID),
    _column("elements", INT64, A.BRICK_ELEMENTS),
    _column("bytes", INT64, A.WORK_BYTES),
    _column("output_shape", INT64_LIST, A.WORK_OUTPUT_SHAPE),
    _column("dtype", STRING, A.WORK_DTYPE),
    _column("flops", FLOAT64, A.WORK_FLOPS),
    _column("tokens", INT64, A.STEP_TOKENS),
    _column("kernel_grid", INT64_LIST, A.KERNEL_GRID),
    _column("kernel_block", INT64_LIST, A.KERNEL_BLOCK),
    _column("kernel_shared_mem_bytes", INT64, A.KERNEL_SHARED_MEM_BYTES),
    _column("kernel_source_hash", HASH64, A.KERNEL_SOURCE_HASH),
    _column("output_checksum", HASH64, A.OUTPUT_CHECKSUM),
    *(
        _column(f"tile_{level}_{what}", INT64, key.format(level))
        for level in A.TILE_LEVELS
        for what, key in (("count", A.TILE_COUNT), ("ns", A.TILE_DURATION_NS), ("elements", A.TILE_ELEMENTS))
    ),
    # the attributes every brickscope span carries, typed so they cost a few bytes a span
    _column("host_start_ns", INT64, A.HOST_START_NS),
    _column("host_duration_ns", INT64, A.HOST_DURATION_NS),
    _column("gpu_duration_ns", INT64, A.GPU_DURATION_NS),
    _column("brick_name", STRING, A.BRICK_NAME),
    _column("kernel_name", STRING, A.KERNEL_NAME),
    _column("thread_name", STRING, A.THREAD_NAME),
    # OpenTelemetry's span kind (SpanKind: 0 internal, 1 server, 2 client, 3 producer,
    # 4 consumer) and status (StatusCode: 0 unset, 1 ok, 2 error, with its description)
    _column("span_kind", INT8, nullable=False),
    _column("status_code", INT8, nullable=False),
    _column("status_message", STRING),
    _column("scope_name", STRING),  # the instrumentation scope
    _column("scope_version", STRING),
    # JSON: [{"name", "time_ns", "attributes"}] / [{"trace_id" (32 hex digits), "span_id"
    # (16 hex digits), "attributes"}]; null when none
    _column("events", STRING),
    _column("links", STRING),
    # JSON object of every other span attribute (and of a typed one whose value is not of its
    # column's type: a string step, a float elements count); null when none
    _column("attributes", STRING),
    # JSON object of the resource's attributes (one distinct value per process)
    _column("resource", STRING),
)

#: Column name -> column.
COLUMNS_BY_NAME: dict[str, Column] = {column.name: column for column in PARQUET_COLUMNS}
#: The columns that hold a span attribute, in file order.
ATTRIBUTE_COLUMNS: tuple[Column, ...] = tuple(column for column in PARQUET_COLUMNS if column.key)
#: The brickscope.scope.kind values the ``kind`` column holds as they are.
KINDS = (
    A.SCOPE_KIND_STEP,
    A.SCOPE_KIND_LAYER,
    A.SCOPE_KIND_BRICK,
    A.SCOPE_KIND_KERNEL,
    A.SCOPE_KIND_OVERHEAD,
    A.SCOPE_KIND_GC,
)
KIND_OTHER = "other"
#: The brickscope.clock values the ``clock`` column holds.
CLOCKS = (A.CLOCK_HOST, A.CLOCK_CUDA, A.CLOCK_GPU)


def to_signed(value: int) -> int:
    """The int64 with the same 64 bits as the unsigned ``value`` (ids and hashes)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def to_unsigned(value: int) -> int:
    """The unsigned 64-bit value of an int64 written by :func:`to_signed`."""
    return value + (1 << 64) if value < 0 else value


@lru_cache(maxsize=1)
def parquet_schema() -> Any:
    """The format's ``pyarrow.Schema``, with the schema version in its metadata.

    Raises:
        ImportError: pyarrow is not installed (the message says what to install).
    """
    pa = import_pyarrow()
    types = {
        STRING: pa.string(),
        INT64: pa.int64(),
        HASH64: pa.int64(),
        INT8: pa.int8(),
        FLOAT64: pa.float64(),
        INT64_LIST: pa.list_(pa.int64()),
        ID128: pa.binary(16),
    }
    fields = [pa.field(c.name, types[c.type], nullable=c.nullable) for c in PARQUET_COLUMNS]
    return pa.schema(fields, metadata={SCHEMA_VERSION_KEY: str(PARQUET_SCHEMA_VERSION)})


def import_pyarrow() -> Any:
    """``pyarrow``, or an ImportError whose message is the one line to print."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ImportError(f"reading or writing Parquet needs pyarrow: {INSTALL_HINT}") from None
    return pyarrow
