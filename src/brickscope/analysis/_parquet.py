# SPDX-License-Identifier: Apache-2.0
"""Parquet span files straight into table rows: Arrow columns to the table's columns with numpy.

Example::

    builder = TableBuilder(backend)
    added = add_parquet(builder, "run.parquet")   # (rows, impossible by reason), or None:
    if added is None:                               # the file needs the record path
        ...

The record path (``open_records`` then :meth:`TableBuilder.add_records`) makes a Python
dict per span; here each row group's columns become the table's columns with array
operations. Python runs once per distinct operation and process, and a dict lookup per
GPU-timed row (its stream) and per kernel row (its launch configuration), through the
builder's own code tables and in row order, so the codes and figures are the ones the
record path makes. Impossible rows are found with the same rule,
vectorised, and counted by reason in its order of precedence.

A file whose ``attributes`` JSON holds a key the table or the impossible-span rule reads
(a value no typed column could hold: a step given as text, a float duration) goes the
record path, which reads such values as it always has.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from brickscope.analysis._table import (
    _KEYS,
    _KIND_CODES,
    CLOCK_CUDA_CODE,
    CLOCK_GPU_CODE,
    KIND_BRICK,
    KIND_KERNEL,
    KIND_OTHER,
    TableBuilder,
    _output_bytes,
)
from brickscope.offline._integrity import (
    END_BEFORE_START,
    GPU_DURATION_TOLERANCE_NS,
    INCONSISTENT_DURATION,
    NEGATIVE_AMOUNT,
    NEGATIVE_DURATION,
    NO_END_TIME,
    NO_START_TIME,
    NONNEGATIVE_KEYS,
    WALL_CLOCK_MIN_NS,
)
from brickscope.offline._parquet_read import PARQUET_MAGIC, open_parquet
from brickscope.offline._parquet_rows import RowReader
from brickscope.offline._source import TraceSource
from brickscope.offline._steps import StepRange
from brickscope.trace import attributes as A

#: Attribute keys whose presence in the ``attributes`` JSON sends a file down the record path.
_READ_KEYS = frozenset(_KEYS) | frozenset(NONNEGATIVE_KEYS) | {
    A.BRICK_SELF_DURATION_NS, A.GPU_DURATION_NS, A.HOST_DURATION_NS,
}  # fmt: skip
_TILE_NS = tuple(f"tile_{level}_ns" for level in A.TILE_LEVELS)
_AMOUNTS = ("bytes", "flops", "tokens", "elements", *(f"tile_{level}_elements" for level in A.TILE_LEVELS))
_TILES = tuple(f"tile_{level}_{what}" for level in A.TILE_LEVELS for what in ("count", "ns", "elements"))
_CLOCK_CODES = {A.CLOCK_CUDA: CLOCK_CUDA_CODE, A.CLOCK_GPU: CLOCK_GPU_CODE}


def is_parquet(path: str) -> bool:
    """Whether the file starts with Parquet's magic."""
    with open(path, "rb") as file:
        return file.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC


def add_parquet(
    builder: TableBuilder,
    path: str,
    progress: Callable[[int, int], None] | None = None,
    steps: StepRange | None = None,
) -> tuple[int, dict[str, int]] | None:
    """Add every possible row of a Parquet span file to ``builder``.

    ``steps`` (``low <= step < high``, an end None: open) keeps only the rows of those steps
    and the rows without a step number: a row group whose ``step`` statistics lie outside
    the range, with no null, is not even read. What needs nothing but those steps (their
    graphs) comes out the same; what counts every span (the report) must not pass it.

    Returns ``(rows added, impossible rows by reason)``, or None (nothing added) when the
    file needs the record path: numpy is missing, or its ``attributes`` JSON holds a key the
    table or the impossible-span rule reads.

    Raises:
        TraceFileError: the file is not a span file this brickscope reads (one line).
    """
    try:
        import numpy as np
    except ImportError:
        return None
    source = TraceSource(path, progress=progress)
    try:
        parquet = open_parquet(source)
        if _needs_records(parquet):
            return None
        reader = RowReader()
        added, dropped = 0, {}
        done = len(PARQUET_MAGIC)
        for group in range(parquet.metadata.num_row_groups):
            if steps is not None and not _may_hold(parquet.metadata.row_group(group), steps):
                continue
            table = parquet.read_row_group(group, columns=_COLUMNS)
            if steps is not None:
                table = table.filter(_in_steps(table.column("step"), steps))
            for batch in table.to_batches():
                added += _add_batch(np, builder, reader, batch, dropped)
            row_group = parquet.metadata.row_group(group)
            done += sum(row_group.column(i).total_compressed_size for i in range(row_group.num_columns))
            source.stream.seek(min(done, source.total))
            source.report_progress()
        source.report_progress(final=True)
        return added, dropped
    finally:
        source.close()


def step_numbers(paths: list[str], steps: StepRange) -> tuple[int | None, int | None, bool]:
    """The smallest and largest step number of Parquet span files (from their footers), and
    whether any row has a step number in ``steps`` (reading only the ``step`` column of the
    row groups whose statistics allow one). ``(None, None, False)``: no row has a step number.

    Raises:
        TraceFileError: a file is not a span file this brickscope reads (one line).
    """
    import pyarrow.compute as pc

    low = high = None
    found = False
    for path in paths:
        source = TraceSource(path)
        try:
            parquet = open_parquet(source)
            for group in range(parquet.metadata.num_row_groups):
                stats = _step_statistics(parquet.metadata.row_group(group))
                if stats is None or not stats.has_min_max:  # no statistics, or only nulls: read it
                    bounds = pc.min_max(parquet.read_row_group(group, columns=["step"]).column("step"))
                    if not bounds["min"].is_valid:  # only nulls
                        continue
                    smallest, largest = bounds["min"].as_py(), bounds["max"].as_py()
                else:
                    smallest, largest = stats.min, stats.max
                low = smallest if low is None else min(low, smallest)
                high = largest if high is None else max(high, largest)
                if not found and _may_hold_step(smallest, largest, steps):
                    column = parquet.read_row_group(group, columns=["step"]).column("step")
                    found = bool(column.filter(_in_steps(column, steps)).drop_null().length())
        finally:
            source.close()
    return low, high, found


def _step_statistics(row_group: Any) -> Any:
    """The ``step`` column's statistics in a row group's metadata (None: not written)."""
    for index in range(row_group.num_columns):
        column = row_group.column(index)
        if column.path_in_schema == "step":
            return column.statistics
    return None


def _may_hold_step(smallest: int, largest: int, steps: StepRange) -> bool:
    low, high = steps
    return (high is None or smallest < high) and (low is None or largest >= low)


def _may_hold(row_group: Any, steps: StepRange) -> bool:
    """Whether a row group may hold a row of ``steps`` or one without a step (its statistics)."""
    stats = _step_statistics(row_group)
    if stats is None or not stats.has_min_max or stats.null_count != 0:
        return True
    return _may_hold_step(stats.min, stats.max, steps)


def _in_steps(column: Any, steps: StepRange) -> Any:
    """The mask of a ``step`` column's rows kept by ``steps``: in the range, or null."""
    import pyarrow.compute as pc

    low, high = steps
    wanted = pc.is_valid(column)
    if low is not None:
        wanted = pc.and_kleene(wanted, pc.greater_equal(column, low))
    if high is not None:
        wanted = pc.and_kleene(wanted, pc.less(column, high))
    return pc.or_kleene(pc.is_null(column), wanted)


def _needs_records(parquet: Any) -> bool:
    """Whether any row's ``attributes`` JSON holds a key this path would not read."""
    for group in range(parquet.metadata.num_row_groups):
        column = parquet.read_row_group(group, columns=["attributes"]).column("attributes")
        if column.null_count == len(column):
            continue
        for text in column.drop_null().to_pylist():
            if not _READ_KEYS.isdisjoint(json.loads(text)):
                return True
    return False


_COLUMNS = [
    "name", "kind", "category", "start_ns", "end_ns", "clock", "self_ns", "step", "layer", "thread_id",
    "span_id", "parent_span_id", "resource", "device_ordinal", "stream", "elements", "bytes", "output_shape",
    "dtype", "flops", "tokens", "kernel_grid", "kernel_block", "kernel_shared_mem_bytes", "kernel_source_hash",
    "output_checksum", "brick_name", "gpu_duration_ns", "host_duration_ns", *_TILES,
]  # fmt: skip


def _ints(np: Any, batch: Any, name: str, fill: int) -> Any:
    """An int64 column as numpy, nulls as ``fill``. Filled in Arrow first: a column with
    nulls turned into numpy as it is becomes float64, which rounds ids, hashes and
    nanosecond times past 2**53."""
    column = batch.column(name)
    if column.null_count:  # a writable copy, as the column without nulls below is not always
        return np.array(column.fill_null(fill).to_numpy(zero_copy_only=False), dtype=np.int64)
    return column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _present(np: Any, batch: Any, name: str) -> Any:
    return batch.column(name).is_valid().to_numpy(zero_copy_only=False)


def _impossible(np: Any, batch: Any, start: Any, end: Any, dropped: dict[str, int]) -> Any:
    """The rows the impossible-span rule keeps (a mask); the others counted by their first reason."""
    negative_duration = np.zeros(len(start), dtype=bool)
    for name in ("self_ns", "gpu_duration_ns", "host_duration_ns", *_TILE_NS):
        negative_duration |= _ints(np, batch, name, 0) < 0
    negative_amount = np.zeros(len(start), dtype=bool)
    for name in _AMOUNTS:
        column = batch.column(name)
        if column.null_count < len(column):
            values = column.to_numpy(zero_copy_only=False)
            negative_amount |= np.nan_to_num(values.astype(np.float64), nan=0.0) < 0
    duration = end - start
    inconsistent = (_present(np, batch, "self_ns") & (_ints(np, batch, "self_ns", 0) > duration)) | (
        _present(np, batch, "gpu_duration_ns")
        & (np.abs(_ints(np, batch, "gpu_duration_ns", 0) - duration) > GPU_DURATION_TOLERANCE_NS)
    )
    reasons = (
        (NO_END_TIME, (start != 0) & (end == 0)),
        (NO_START_TIME, (start == 0) & (end >= WALL_CLOCK_MIN_NS)),
        (END_BEFORE_START, end < start),
        (NEGATIVE_DURATION, negative_duration),
        (NEGATIVE_AMOUNT, negative_amount),
        (INCONSISTENT_DURATION, inconsistent),
    )
    keep = np.ones(len(start), dtype=bool)
    for reason, mask in reasons:
        hit = keep & mask
        count = int(hit.sum())
        if count:
            dropped[reason] = dropped.get(reason, 0) + count
            keep &= ~hit
    return keep


def _add_batch(np: Any, builder: TableBuilder, reader: RowReader, batch: Any, dropped: dict[str, int]) -> int:
    keep = _impossible(np, batch, _ints(np, batch, "start_ns", 0), _ints(np, batch, "end_ns", 0), dropped)
    if not keep.all():
        batch = batch.filter(keep)
    n = batch.num_rows
    if not n:
        return 0
    start, end = _ints(np, batch, "start_ns", 0), _ints(np, batch, "end_ns", 0)
    kind_names, kind_index = _encoded(np, batch.column("kind"))
    kind = np.asarray([_KIND_CODES.get(k, KIND_OTHER) for k in kind_names], dtype=np.int64)[kind_index]
    with builder._lock:
        builder._flush()  # rows added span by span before this file keep their order
        # an operation is (kind, name, category, enclosing brick): codes per distinct tuple
        parts = [_encoded(np, batch.column(c)) for c in ("name", "category", "brick_name")]
        # one int64 key per row from the four dictionary indices (mixed radix), so that
        # np.unique sorts one column (rows of four sort several times slower)
        indices = [kind_index, *(index for _values, index in parts)]
        radix = [len(kind_names), *(len(values) for values, _index in parts)]
        if math.prod(radix) < 1 << 62:
            mixed = np.zeros(len(kind_index), dtype=np.int64)
            for index, size in zip(indices, radix):
                mixed = mixed * size + index
            distinct, first, inverse = np.unique(mixed, return_index=True, return_inverse=True)
        else:
            rows = np.stack(indices, axis=1)
            distinct, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        op_of, category_of = [0] * len(distinct), [0] * len(distinct)
        for at in np.argsort(first, kind="stable").tolist():  # new codes in order of first row, as span by span
            k, name, cat, brick = (int(indices[i][first[at]]) for i in range(4))
            kind_code = _KIND_CODES.get(kind_names[k], KIND_OTHER)
            op_key = _op_key(kind_code, parts[0][0][name], parts[1][0][cat], parts[2][0][brick])
            op_of[at] = _op_code(builder, op_key)
            category_of[at] = _category_code(builder, op_key[2])
        inverse = inverse.reshape(-1)
        op = np.asarray(op_of, dtype=np.int64)[inverse]
        category = np.asarray(category_of, dtype=np.int64)[inverse]
        encoded = batch.column("resource").fill_null("").dictionary_encode()
        entries = [builder._resource_entry(reader.resource(text)) for text in encoded.dictionary.to_pylist()]
        row_entry = encoded.indices.to_numpy(zero_copy_only=False)
        rank = np.asarray([entry[1] for entry in entries], dtype=np.int64)[row_entry]
        clock_names, clock_index = _encoded(np, batch.column("clock"))
        clocks = np.asarray([_CLOCK_CODES.get(c, 0) for c in clock_names], dtype=np.int64)[clock_index]
        ordinals = batch.column("device_ordinal").to_pylist()
        handles = batch.column("stream").to_pylist()
        device = np.full(n, -1, dtype=np.int64)
        stream = np.full(n, -1, dtype=np.int64)
        timed = np.flatnonzero((clocks != 0) & _present(np, batch, "device_ordinal"))
        for row in timed.tolist():
            entry = entries[row_entry[row]]
            lane = (entry[1], entry[2], ordinals[row], handles[row] or 0)
            codes = builder._lanes.get(lane)
            if codes is None:
                codes = builder._lane_codes(entry, lane)
            device[row], stream[row] = codes
        launch = np.full(n, -1, dtype=np.int64)
        kernels = np.flatnonzero(kind == KIND_KERNEL)
        if len(kernels):
            grids = batch.column("kernel_grid").to_pylist()
            blocks = batch.column("kernel_block").to_pylist()
            smems = batch.column("kernel_shared_mem_bytes").to_pylist()
            seen: dict[tuple[Any, ...], int] = {}
            for row in kernels.tolist():
                grid, block = grids[row], blocks[row]
                launch_key = (grid and tuple(grid), block and tuple(block), smems[row])
                code = seen.get(launch_key)
                if code is None:
                    code = seen[launch_key] = builder._launch_code(grid, block, smems[row])
                launch[row] = code
        nbytes = _ints(np, batch, "bytes", 0)
        shaped = np.flatnonzero(
            ~_present(np, batch, "bytes") & _present(np, batch, "output_shape") & _present(np, batch, "dtype")
        )
        if len(shaped):
            shapes, dtypes = batch.column("output_shape").to_pylist(), batch.column("dtype").to_pylist()
            for row in shaped.tolist():
                nbytes[row] = _output_bytes(shapes[row], dtypes[row])
        duration = end - start
        own = (kind == KIND_BRICK) & _present(np, batch, "self_ns")  # a brick's recorded self time
        self_ns = np.where(own, _ints(np, batch, "self_ns", 0), duration)
        flops = np.where(
            _present(np, batch, "flops"), batch.column("flops").to_numpy(zero_copy_only=False).astype(np.float64), 0.0
        )
        columns = (
            op, kind, category, start, end, self_ns, clocks, device, stream,
            _ints(np, batch, "step", -1), _ints(np, batch, "layer", -1), rank, _ints(np, batch, "thread_id", 0),
            _ints(np, batch, "span_id", 0).view(np.uint64), _ints(np, batch, "parent_span_id", 0).view(np.uint64),
            _ints(np, batch, "elements", 0), nbytes, flops, _ints(np, batch, "tokens", 0),
            launch,
            _ints(np, batch, "kernel_source_hash", 0).view(np.uint64),
            _ints(np, batch, "output_checksum", 0).view(np.uint64),
            *(_ints(np, batch, name, 0) for name in _TILES),
        )  # fmt: skip
        builder._store_buffers(tuple(memoryview(np.ascontiguousarray(c)).cast("B") for c in columns))
        builder.rows += n
    return n


def _encoded(np: Any, column: Any) -> tuple[list[Any], Any]:
    """A column's distinct values (None for null) and each row's index into them."""
    encoded = column.dictionary_encode(null_encoding="encode")
    return encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)


def _op_key(kind: int, name: str, category: str | None, brick: str | None) -> tuple[int, str, str, str | None]:
    """The builder's operation key (TableBuilder._row): a brick's category defaults to "other",
    a kernel keeps its brick's name, any other span has neither."""
    if kind == KIND_BRICK:
        return (kind, name, category or "other", None)
    if kind == KIND_KERNEL:
        return (kind, name, category or "", brick)
    return (kind, name, "", None)


def _op_code(builder: TableBuilder, key: tuple[int, str, str, str | None]) -> int:
    code = builder._op_codes.get(key)
    return code if code is not None else builder._new_op(key)


def _category_code(builder: TableBuilder, name: str) -> int:
    if not name:
        return -1
    code = builder._category_codes.get(name)
    if code is None:
        code = builder._category_codes[name] = len(builder._categories)
        builder._categories.append(name)
    return code
