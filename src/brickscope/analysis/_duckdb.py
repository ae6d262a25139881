# SPDX-License-Identifier: Apache-2.0
"""The DuckDB engine: Parquet span files, directories or globs into the analysis table,
through SQL (``pip install 'brickscope[duckdb]'``).

DuckDB reads the files, leaves out the impossible spans (counted by reason and file, as the
readers count them) and computes every column of the table in SQL (:mod:`._sql`): codes,
self time less the overhead spans, bytes from shape and dtype. It runs out of core (a
``memory_limit`` and a ``temp_directory`` it spills to, every core), and the code lists are
made by the in-memory engine's own builder from the first span of each key, so the table is
the one the in-memory engine builds from the same spans, row for row, and every figure of
the report is its figure.

Example::

    table = load_parquet("runs/job-17/")               # files, directories (recursive) or globs
    report = analyse(table)
"""

from __future__ import annotations

import array
import json
import os
import tempfile
import threading
import types
from collections.abc import Callable
from typing import Any

from brickscope.analysis._backend import get_backend
from brickscope.analysis._load import AnalysisError, _expand, _require_work
from brickscope.analysis._sql import (
    DUCKDB,
    SOURCE_COLUMNS,
    first_rows_query,
    impossible_reason,
    spans_query,
    untyped_query,
)
from brickscope.analysis._table import _KEYS, COLUMNS, Table, TableBuilder
from brickscope.offline import describe_impossible
from brickscope.trace import attributes as A

#: DuckDB's memory limit when none is given: a share of the machine's memory, leaving the rest to
#: the operating system's file cache that Parquet scans live on.
MEMORY_SHARE = 0.5
#: Called as ``progress(done, total)`` while a query runs: DuckDB's progress of the query, as a
#: share of the input's bytes (the unit of the other readers' progress).
ProgressCallback = Callable[[int, int], None]

_INSTALL = "pip install 'brickscope[duckdb]'"
_ORD_SHIFT = 40  # a row's order key: file index << 40 | row in file (2^40 rows a file)
_NUMPY_DTYPES = {"int64": "<i8", "uint64": "<u8", "float64": "<f8"}
_TYPECODES = {"int64": "q", "uint64": "Q", "float64": "d"}
#: The source columns a first span of a key is read with, for the builder (see _raw).
_FIRST_COLUMNS = (
    "ord", "name", "kind", "category", "brick_name", "resource", "clock", "device_ordinal", "stream",
    "kernel_grid", "kernel_block", "kernel_shared_mem_bytes",
)  # fmt: skip


def available() -> bool:
    """Whether DuckDB is importable (the ``duckdb`` extra)."""
    try:
        import duckdb  # noqa: F401
    except ImportError:
        return False
    return True


def parquet_files(*inputs: str) -> list[str]:
    """The files named by ``inputs`` (files, directories, globs), in the order the in-memory
    engine reads them (``brickscope.analysis.load``): the same order, the same rows.

    Raises:
        AnalysisError: an input is missing, or names no trace file.
    """
    return [path for item in inputs for path in _expand(os.fspath(item))]


def count_spans(files: list[str]) -> int:
    """The rows of Parquet files, from their footers (nothing else is read).

    Raises:
        AnalysisError: a file is not a Parquet file.
    """
    import duckdb

    con = duckdb.connect()
    try:
        total = 0
        for path in files:
            try:
                total += con.execute("SELECT sum(num_rows) FROM parquet_file_metadata(?)", [path]).fetchone()[0] or 0
            except duckdb.Error as exc:
                raise AnalysisError(f"{path}: not a Parquet file ({str(exc).splitlines()[0]})") from None
        return total
    finally:
        con.close()


def load_parquet(
    *inputs: str,
    backend: str | None = None,
    memory_limit: str | None = None,
    temp_directory: str | None = None,
    threads: int | None = None,
    progress: ProgressCallback | None = None,
) -> Table:
    """The analysis table of Parquet span files, computed by DuckDB.

    Args:
        inputs: files, directories (every ``*.parquet`` below) or globs.
        backend: the table's backend, ``"numpy"`` or ``"python"`` (default numpy when installed).
        memory_limit: DuckDB's ``memory_limit`` (``"4GB"``; default :data:`MEMORY_SHARE` of the
            machine's memory).
        temp_directory: where DuckDB spills what does not fit (default a fresh directory under
            the system's temporary directory, removed after).
        threads: DuckDB's threads (default: every core).
        progress: called with DuckDB's progress while each query runs.

    Raises:
        AnalysisError: DuckDB is not installed; an input is missing, not a Parquet span file,
            of a newer schema version, lacks a column, or holds no valid span.
    """
    try:
        import duckdb
    except ImportError:
        raise AnalysisError(f"the DuckDB engine needs duckdb: {_INSTALL}") from None
    files = parquet_files(*inputs)
    with tempfile.TemporaryDirectory(prefix="brickscope-duckdb-", dir=temp_directory) as spill:
        con = duckdb.connect(config={
            "memory_limit": memory_limit or _default_memory_limit(),
            "temp_directory": spill,
            "threads": threads or os.cpu_count() or 1,
        })  # fmt: skip
        try:
            # progress is polled (query_progress), never printed by DuckDB itself
            con.execute(f"SET enable_progress_bar = {progress is not None}; SET enable_progress_bar_print = false")
            return _Load(con, files, get_backend(backend), progress).table()
        except duckdb.Error as exc:
            raise AnalysisError(f"{', '.join(files) if len(files) < 3 else f'{len(files)} files'}: {exc}") from None
        finally:
            con.close()


class _Load:
    """One load: the views over the files, the code lists, the table."""

    #: How the queries are spelled (the Spark engine runs this load with its own).
    dialect = DUCKDB

    def __init__(self, con: Any, files: list[str], be: Any, progress: ProgressCallback | None) -> None:
        self.con, self.files, self.be, self.progress = con, files, be, progress

    def table(self) -> Table:
        for path in self.files:
            self._check(path)
        self._views()
        untyped, key = self._query(untyped_query(self.dialect))[0]
        if untyped:
            raise AnalysisError(
                f"{self._what()}: {untyped:,} spans hold {key} (or another attribute the analysis reads) with a value"
                " of another type than its column's (kept in the attributes column); --engine memory reads them"
            )
        impossible, notes, valid = self._impossible()
        builder = TableBuilder(self.be)
        self._codes(builder)
        columns = self._columns()
        rows = self.be.size(columns["start"]) if columns else 0
        comm = columns.pop("comm")
        columns["comm"] = self.be.lookup([op.communication for op in builder._operations], columns["op"], "bool")
        del comm
        table = Table(
            self.be,
            columns,
            list(builder._operations),
            list(builder._categories),
            list(builder._ranks),
            list(builder._devices),
            list(builder._streams),
            rows=rows,
            impossible=impossible,
            sources=list(self.files),
            notes=notes,
            launches=list(builder._launches),
            kernel_sources=dict(builder._kernel_sources),
        )
        _require_work(table, self._what())
        return table

    def _what(self) -> str:
        return self.files[0] if len(self.files) == 1 else f"{len(self.files)} files"

    def _check(self, path: str) -> None:
        _check_file(path)

    def _views(self) -> None:
        con = self.con
        con.execute("CREATE TEMP TABLE bs_files (path VARCHAR, idx BIGINT)")
        con.executemany("INSERT INTO bs_files VALUES (?, ?)", [(path, i) for i, path in enumerate(self.files)])
        listed = ", ".join("'" + path.replace("'", "''") + "'" for path in self.files)
        columns = ", ".join(f"s.{name}" for name in SOURCE_COLUMNS)
        con.execute(f"""
            CREATE TEMP VIEW bs_source AS
            SELECT {columns}, f.idx AS file, (f.idx << {_ORD_SHIFT}) + s.file_row_number AS ord
            FROM read_parquet([{listed}], filename = true, file_row_number = true) s
            JOIN bs_files f ON f.path = s.filename""")
        con.execute(f"CREATE TEMP VIEW bs_reasoned AS SELECT *, {impossible_reason()} AS reason FROM bs_source")
        con.execute("CREATE TEMP VIEW bs_valid AS SELECT * FROM bs_reasoned WHERE reason IS NULL")

    def _impossible(self) -> tuple[dict[str, int], list[str], list[int]]:
        """Impossible spans by reason, the readers' line per file that had some, valid spans per file."""
        counts = self._query(
            "SELECT file, reason, count(*) FROM bs_reasoned GROUP BY file, reason ORDER BY file, reason"
        )
        valid = [0] * len(self.files)
        dropped: list[dict[str, int]] = [{} for _ in self.files]
        for file, reason, count in counts:
            if reason is None:
                valid[file] = count
            else:
                dropped[file][reason] = count
        notes, total = [], {}
        for path, kept, reasons in zip(self.files, valid, dropped):
            if reasons and not kept:
                raise AnalysisError(f"{path}: every span is impossible ({describe_impossible(reasons)}): refused")
            if not kept:
                raise AnalysisError(f"{path}: no spans in this file")
            if reasons:
                count = sum(reasons.values())
                notes.append(
                    f"{path}: {count:,} impossible {'span' if count == 1 else 'spans'} left out"
                    f" ({describe_impossible(reasons)})"
                )
                for reason, n in reasons.items():
                    total[reason] = total.get(reason, 0) + n
        return total, notes, valid

    def _codes(self, builder: TableBuilder) -> None:
        """The code lists, from the first span of each key through ``builder`` in row order, and
        the tables that map every span's key to its codes (``bs_*_codes``)."""
        firsts = self._query(
            f"SELECT {', '.join(_FIRST_COLUMNS)} FROM bs_valid WHERE ord IN ({first_rows_query()}) ORDER BY ord"
        )
        resources: dict[Any, Any] = {}
        ops, ranks, lanes, launches = {}, {}, {}, {}
        for first in firsts:
            _, name, kind, category, brick, resource, clock, ordinal, stream, grid, block, smem = first
            holder = resources.get(resource)
            if holder is None:
                holder = resources[resource] = types.SimpleNamespace(attributes=_attributes(resource))
            row = builder._row(_raw(name, kind, category, brick, holder, clock, ordinal, stream, grid, block, smem))
            ops[(kind, name, category, brick)] = (row[0], row[1], row[2], builder._operations[row[0]].communication)
            ranks[resource] = row[11]
            if row[7] >= 0:
                lanes[(resource, ordinal, stream)] = (row[7], row[8])
            if row[19] >= 0:
                launches[(_key(grid), _key(block), smem)] = row[19]
        self._code_table(
            "bs_op_codes",
            (("kind_name", "VARCHAR"), ("name", "VARCHAR"), ("category_name", "VARCHAR"), ("brick_name", "VARCHAR"),
             ("op", "BIGINT"), ("kind_code", "BIGINT"), ("category_code", "BIGINT"), ("comm", "BOOLEAN")),
            [(*k, *v) for k, v in ops.items()],
        )  # fmt: skip
        self._code_table("bs_rank_codes", (("resource", "VARCHAR"), ("rank_code", "BIGINT")), list(ranks.items()))
        self._code_table(
            "bs_lane_codes",
            (("resource", "VARCHAR"), ("device_ordinal", "BIGINT"), ("stream", "BIGINT"), ("device", "BIGINT"),
             ("stream_code", "BIGINT")),
            [(*k, *v) for k, v in lanes.items()],
        )  # fmt: skip
        self._code_table(
            "bs_launch_codes",
            (("grid", "BIGINT[]"), ("block", "BIGINT[]"), ("smem", "BIGINT"), ("launch", "BIGINT")),
            [(_list(g), _list(b), s, code) for (g, b, s), code in launches.items()],
        )

    def _code_table(self, name: str, columns: tuple[tuple[str, str], ...], rows: list[tuple[Any, ...]]) -> None:
        """A table of codes the queries join on: ``columns`` as (name, type), types spelled
        VARCHAR, BIGINT, BOOLEAN or BIGINT[] (the Spark engine spells them its way)."""
        self.con.execute(f"CREATE TEMP TABLE {name} ({', '.join(f'{c} {t}' for c, t in columns)})")
        if rows:
            self.con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(columns))})", rows)

    def _columns(self) -> dict[str, Any]:
        """Every column of the table, in the in-memory engine's row order."""
        names = (*COLUMNS, "duration", "comm")
        result = self._run(
            f"SELECT {', '.join(chr(34) + n + chr(34) for n in names)} FROM ({spans_query(self.dialect)}) ORDER BY ord"
        )
        fetched = result.fetchnumpy()
        be = self.be
        columns = {}
        for name in names:
            dtype = "bool" if name == "comm" else COLUMNS.get(name, "int64")
            values = fetched[name]
            if dtype == "bool":
                columns[name] = values
                continue
            buffer = array.array(_TYPECODES[dtype])
            buffer.frombytes(values.astype(_NUMPY_DTYPES[dtype.replace("uint64", "int64")]).tobytes())
            columns[name] = be.from_array(buffer, dtype, copy=False)
        return columns

    def _query(self, sql: str) -> list[tuple[Any, ...]]:
        return self._run(sql).fetchall()

    def _run(self, sql: str) -> Any:
        """Run ``sql``, reporting DuckDB's progress while it runs when asked."""
        if self.progress is None:
            return self.con.execute(sql)
        done = threading.Event()
        total = sum(os.path.getsize(path) for path in self.files)

        def poll() -> None:
            while not done.wait(0.25):
                percent = self.con.query_progress()  # -1: no query running
                if 0 <= percent < 100:
                    self.progress(int(total * percent / 100), total)

        watcher = threading.Thread(target=poll, name="brickscope-duckdb-progress", daemon=True)
        watcher.start()
        try:
            return self.con.execute(sql)
        finally:
            done.set()
            watcher.join()


def _check_file(path: str) -> None:
    """Refuse, in one line naming the file, a file that is not a Parquet span file of a schema
    version this engine reads, as the in-memory engine's reader refuses it."""
    from brickscope.offline import ParquetFormatError, check_parquet_schema
    from brickscope.offline._parquet_schema import import_pyarrow

    try:
        pa = import_pyarrow()
    except ImportError as exc:
        raise AnalysisError(f"{path}: a Parquet file; {exc}") from None
    try:
        parquet = pa.parquet.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise AnalysisError(
            f"{path}: not a complete Parquet file (a writer killed before its footer?): {exc}"
        ) from None
    try:
        check_parquet_schema(parquet.schema_arrow, parquet.metadata.metadata)
    except ParquetFormatError as exc:
        raise AnalysisError(f"{path}: {exc}") from None


def _raw(name, kind, category, brick, resource, clock, ordinal, stream, grid, block, smem):  # type: ignore[no-untyped-def]
    """A span's raw values as :meth:`TableBuilder._row` takes them, with what the code lists
    are made of (the rest absent: only the row's codes are used)."""
    attributes = {
        A.SCOPE_KIND: kind, A.BRICK_CATEGORY: category, A.BRICK_NAME: brick, A.CLOCK: clock,
        A.GPU_DEVICE_ID: ordinal, A.GPU_STREAM_ID: stream, A.KERNEL_GRID: grid, A.KERNEL_BLOCK: block,
        A.KERNEL_SHARED_MEM_BYTES: smem,
    }  # fmt: skip
    return (name, 0, 0, 0, 0, resource, *map(attributes.get, _KEYS))


def _attributes(resource: str | None) -> dict[str, Any]:
    if resource is None:
        return {}
    try:
        value = json.loads(resource)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _key(dims: Any) -> tuple[int, ...] | None:
    return None if dims is None else tuple(dims)


def _list(dims: tuple[int, ...] | None) -> list[int] | None:
    return None if dims is None else list(dims)


def _default_memory_limit() -> str:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "4GB"
    return f"{max(1, int(total * MEMORY_SHARE) >> 20)}MB"
