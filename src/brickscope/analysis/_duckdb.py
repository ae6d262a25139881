# SPDX-License-Identifier: Apache-2.0
"""The DuckDB engine: Parquet span files, directories or globs into the analysis table,
through SQL (``pip install 'brickscope[duckdb]'``).

DuckDB reads the files, leaves out the impossible spans (counted by reason and file, as the
readers count them) and computes every column of the table in SQL (:mod:`._sql`): codes,
self time less the overhead spans, bytes from shape and dtype. It runs out of core (a
``memory_limit`` and a ``temp_directory`` it spills to, every core; the spans table is kept
in a database file there, compressed column by column, so scans read a few bytes a span
where an in-memory table would spill eight a column), and the code lists are
made by the in-memory engine's own builder from the first span of each key, so the table is
the one the in-memory engine builds from the same spans, row for row, and every figure of
the report is its figure.

Example::

    table = load_parquet("runs/job-17/")               # files, directories (recursive) or globs
    report = analyse(table)
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import tempfile
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

from brickscope.analysis._backend import get_backend
from brickscope.analysis._load import AnalysisError, _expand
from brickscope.analysis._model import Report
from brickscope.analysis._sql import (
    CENSUS_REASONS,
    DUCKDB,
    SOURCE_COLUMNS,
    census_query,
    coded_query,
    impossible_reason,
    overhead_query,
    untyped_query,
)
from brickscope.analysis._table import _KEYS, COLUMNS, Table, TableBuilder
from brickscope.offline import describe_impossible
from brickscope.trace import attributes as A

#: DuckDB's memory limit (``"2GB"``, ``"500MB"``) when the caller gives none; unset: a share
#: (:data:`MEMORY_SHARE`) of the machine's memory, at most :data:`MEMORY_CAP`.
BRICKSCOPE_DUCKDB_MEMORY_LIMIT = "BRICKSCOPE_DUCKDB_MEMORY_LIMIT"
#: Where DuckDB spills what does not fit in its memory limit (a fresh directory is made in it and
#: removed after); unset: the system's temporary directory.
BRICKSCOPE_DUCKDB_TEMP_DIRECTORY = "BRICKSCOPE_DUCKDB_TEMP_DIRECTORY"
#: The default memory limit's share of the machine's memory, and its cap: the rest is the
#: operating system's file cache that Parquet scans live on, and the report's own few rows.
MEMORY_SHARE = 0.5
MEMORY_CAP = 3 << 30
#: Called as ``progress(done, total)`` while a query runs: DuckDB's progress of the query, as a
#: share of the input's bytes (the unit of the other readers' progress).
ProgressCallback = Callable[[int, int], None]

_INSTALL = "pip install 'brickscope[duckdb]'"
_UPLOAD_ROWS = 1000  # rows an INSERT statement of upload() carries
_BATCH_ROWS = 1 << 20  # rows a batch of _batches() carries (8 MB a numeric column)
_ORD_SHIFT = 40  # a row's order key: file index << 40 | row in file (2^40 rows a file)
#: The columns of the spans table ``bs_t`` besides ``ord``: the analysis table's.
_NAMES = (*COLUMNS, "duration", "comm")
_TYPECODES = {"int64": "q", "uint64": "Q", "float64": "d"}


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
    """The analysis table of Parquet span files, computed by DuckDB and held in memory (what
    ``diff`` and ``tree`` read; ``report`` uses :func:`report_parquet`, out of core).

    Args:
        inputs: files, directories (every ``*.parquet`` below) or globs.
        backend: the table's backend, ``"numpy"`` or ``"python"`` (default numpy when installed).
        memory_limit: DuckDB's ``memory_limit`` (``"2GB"``; default
            :data:`BRICKSCOPE_DUCKDB_MEMORY_LIMIT`, else half the machine's memory, at most 3 GB).
        temp_directory: where DuckDB spills what does not fit, in a fresh directory removed after
            (default :data:`BRICKSCOPE_DUCKDB_TEMP_DIRECTORY`, else the system's temporary directory).
        threads: DuckDB's threads (default: every core).
        progress: called with DuckDB's progress while each query runs.

    Raises:
        AnalysisError: DuckDB is not installed; an input is missing, not a Parquet span file,
            of a newer schema version, lacks a column, or holds no valid span.
    """
    with _session(inputs, backend, memory_limit, temp_directory, threads, progress) as session:
        return session.pull("true", source="bs_t", whole=True)


def summarise_parquet(
    *inputs: str,
    backend: str | None = None,
    memory_limit: str | None = None,
    temp_directory: str | None = None,
    threads: int | None = None,
    progress: ProgressCallback | None = None,
    **filters: Any,
) -> tuple[Any, list[str]]:
    """One run's :class:`~brickscope.analysis._diff.RunSummary` (what ``diff`` compares) of Parquet
    span files, computed by DuckDB: the same summary as ``summarise(load(...))``; and the notes
    on its input (impossible spans left out, per file).

    Args:
        inputs, backend, memory_limit, temp_directory, threads, progress: as :func:`load_parquet`.
        filters: ``steps``, ``ranks``, ``devices``, as :func:`~brickscope.analysis.select`'s.

    Raises:
        AnalysisError: as :func:`load_parquet`, and as :func:`~brickscope.analysis.select`.
    """
    from brickscope.analysis._sqlreport import SqlAnalysis

    with _session(inputs, backend, memory_limit, temp_directory, threads, progress) as session:
        return SqlAnalysis(session, session.table).summary(**filters), list(session.table.notes)


def report_parquet(
    *inputs: str,
    backend: str | None = None,
    memory_limit: str | None = None,
    temp_directory: str | None = None,
    threads: int | None = None,
    progress: ProgressCallback | None = None,
    **options: Any,
) -> Report:
    """The report of Parquet span files, every section computed in DuckDB out of core
    (:mod:`._sqlreport`): the figures of :func:`~brickscope.analysis.analyse` on the same spans.

    Args:
        inputs, backend, memory_limit, temp_directory, threads, progress: as :func:`load_parquet`.
        options: :func:`~brickscope.analysis.analyse`'s (``top``, ``steps``, ``ranks``...).

    Raises:
        AnalysisError: as :func:`load_parquet`, and as :func:`~brickscope.analysis.analyse`.
    """
    from brickscope.analysis._sqlreport import SqlAnalysis

    with _session(inputs, backend, memory_limit, temp_directory, threads, progress) as session:
        return SqlAnalysis(session, session.table).report(**options)


@contextlib.contextmanager
def _session(
    inputs: tuple[str, ...],
    backend: str | None,
    memory_limit: str | None,
    temp_directory: str | None,
    threads: int | None,
    progress: ProgressCallback | None,
) -> Iterator[_Session]:
    """A DuckDB connection with the spans table ``bs_t`` of ``inputs`` built, closed after."""
    try:
        import duckdb
    except ImportError:
        raise AnalysisError(f"the DuckDB engine needs duckdb: {_INSTALL}") from None
    files = parquet_files(*inputs)
    for path in files:
        _check_file(path)
    memory_limit = memory_limit or os.environ.get(BRICKSCOPE_DUCKDB_MEMORY_LIMIT) or _default_memory_limit()
    temp_directory = temp_directory or os.environ.get(BRICKSCOPE_DUCKDB_TEMP_DIRECTORY) or None
    if temp_directory is not None and not os.path.isdir(temp_directory):
        raise AnalysisError(f"{temp_directory}: not a directory (the DuckDB engine's temporary directory)")
    with tempfile.TemporaryDirectory(prefix="brickscope-duckdb-", dir=temp_directory) as spill:
        try:
            # a database file, not memory: its tables are compressed (codes and small counts to
            # a few bits a row), an in-memory table spills every column uncompressed
            con = duckdb.connect(
                os.path.join(spill, "spans.duckdb"),
                config={
                    "memory_limit": memory_limit,
                    "temp_directory": spill,
                    "threads": threads or os.cpu_count() or 1,
                    # every query that needs an order says it (ORDER BY ord): tables and scans
                    # need not keep the files' order, which holds rows back in memory
                    "preserve_insertion_order": False,
                }
            )
        except duckdb.Error as exc:
            raise AnalysisError(f"DuckDB memory limit {memory_limit!r}: {str(exc).splitlines()[0]}") from None
        try:
            # progress is polled (query_progress), never printed by DuckDB itself
            con.execute(f"SET enable_progress_bar = {progress is not None}; SET enable_progress_bar_print = false")
            yield _Session(con, files, get_backend(backend), progress)
        except duckdb.Error as exc:
            what = files[0] if len(files) == 1 else f"{len(files)} files"
            raise AnalysisError(f"{what}: {str(exc).splitlines()[0]}") from None
        finally:
            con.close()


class _Session:
    """One DuckDB session over some files: the views over them, the code lists, the spans
    table ``bs_t`` (every column of the analysis table, one row a valid span), and what the
    SQL sections ask of it (:class:`~brickscope.analysis._sqlreport.Session`).

    Attributes:
        table: the code lists, row count, impossible spans, sources and notes (no columns).
    """

    #: How the queries are spelled (the Spark engine runs this session with its own).
    dialect = DUCKDB

    def __init__(self, con: Any, files: list[str], be: Any, progress: ProgressCallback | None) -> None:
        self.con, self.files, self.be, self.progress = con, files, be, progress
        self._views()
        untyped, key = self.query(untyped_query(self.dialect))[0]
        if untyped:
            raise AnalysisError(
                f"{self._what()}: {untyped:,} spans hold {key} (or another attribute the analysis reads) with a value"
                " of another type than its column's (kept in the attributes column); --engine memory reads them"
            )
        census = self.query(census_query(self.dialect))
        impossible, notes = self._impossible([row[1:4] for row in census if row[0] == CENSUS_REASONS])
        builder = TableBuilder(self.be)
        # a span first of several keys is one row; the builder takes them in row order
        firsts = {row[4]: row[5:] for row in census if row[0] != CENSUS_REASONS}
        self._codes(builder, [firsts[ord_] for ord_ in sorted(firsts)])
        self._spans_table()
        self.table = Table(
            self.be,
            {},
            list(builder._operations),
            list(builder._categories),
            list(builder._ranks),
            list(builder._devices),
            list(builder._streams),
            rows=self.query("SELECT count(*) FROM bs_t")[0][0],
            impossible=impossible,
            sources=list(self.files),
            notes=notes,
            launches=list(builder._launches),
            kernel_sources=dict(builder._kernel_sources),
        )
        shared = self.query("SELECT count(*) FROM (SELECT span_id FROM bs_t GROUP BY span_id HAVING count(*) > 1)")
        if shared[0][0]:  # the in-memory engine links a child to the last of them; SQL would join every one
            raise AnalysisError(
                f"{self._what()}: {shared[0][0]:,} span ids are held by more than one span (a file given twice?);"
                " --engine memory reads them"
            )
        if not self.table.rows:
            raise AnalysisError(f"{self._what()}: no spans in these files")

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        """The rows of ``sql`` (DuckDB's progress reported while it runs)."""
        return self._run(sql).fetchall()

    def upload(self, name: str, columns: str, rows: list[tuple[Any, ...]]) -> None:
        """(Re)create the temporary table ``name`` (``columns``: SQL) holding ``rows``."""
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE {name} ({columns})")
        # one statement of every row: executemany runs a statement a row (~0.5 ms each)
        for low in range(0, len(rows), _UPLOAD_ROWS):
            chunk = rows[low : low + _UPLOAD_ROWS]
            row = f"({', '.join('?' * len(chunk[0]))})"
            values = [value for r in chunk for value in r]
            self.con.execute(f"INSERT INTO {name} VALUES {', '.join([row] * len(chunk))}", values)

    def sorted_groups(self, source: str) -> list[tuple[int, Any]]:
        """Per key of ``source`` (a query of ``key, value``), in key order: its values sorted, as
        an ``array.array`` of int64 (sorted by DuckDB, out of core)."""
        fetched = self._fetch(f"SELECT key, value FROM ({source}) ORDER BY key, value")
        keys, values = fetched["key"], fetched["value"].astype("<i8")
        out = []
        if len(keys):
            import numpy as np

            bounds = [0, *(np.flatnonzero(keys[1:] != keys[:-1]) + 1).tolist(), len(keys)]
            for low, high in zip(bounds, bounds[1:]):
                chunk = array.array("q")
                chunk.frombytes(values[low:high].tobytes())
                out.append((int(keys[low]), chunk))
        return out

    def sequential_sums(self, source: str, groups: int) -> list[float]:
        """Per group code ``0..groups-1`` of ``source`` (a query of ``g, value`` in row order): its
        float values added one by one in that order, as the in-memory engine's ``group_sum``
        adds them; fetched as numpy arrays a batch at a time, never as Python rows."""
        import numpy as np

        sums: Any = np.zeros(groups)
        every = np.arange(groups)
        for batch in self._batches(source):
            # each group's running sum goes first: bincount adds the batch's values after it, in order
            sums = np.bincount(
                np.concatenate([every, batch["g"]]), weights=np.concatenate([sums, batch["value"]]), minlength=groups
            )
        return sums.tolist()  # type: ignore[no-any-return]

    def unions(self, intervals: str) -> dict[int, tuple[int, int, int]]:
        """Per group ``g`` of ``intervals`` (a query of ``g, s, e, w``; ``w`` 1 for work, 0 for a
        window): the work intervals' count, the length of their union, and the length of the
        union of all its intervals. DuckDB sorts the intervals (out of core); numpy walks them a
        batch at a time: in start order, each interval adds what it reaches past the running
        maximum of the ends before it (of the work intervals before it, for the work's union).
        The SQL engines' window form of the same (:func:`._sql.unions_query`) costs DuckDB
        twice the sort in its windowed running maximum."""
        import numpy as np

        low = np.iinfo(np.int64).min
        out: dict[int, list[int]] = {}  # g: [count, work, total, reach, work reach]
        for batch in self._batches(f"SELECT g, s, e, w FROM ({intervals}) ORDER BY g, s, e"):
            g, s, e, w = batch["g"], batch["s"], batch["e"], batch["w"]
            bounds = [0, *(np.flatnonzero(g[1:] != g[:-1]) + 1).tolist(), len(g)]
            for first, last in zip(bounds, bounds[1:]):
                state = out.setdefault(int(g[first]), [0, 0, 0, low, low])
                gs, ge, work = s[first:last], e[first:last], w[first:last] == 1
                work_ends = np.where(work, ge, low)
                reach = np.maximum.accumulate(np.concatenate([[state[3]], ge]))
                work_reach = np.maximum.accumulate(np.concatenate([[state[4]], work_ends]))
                state[0] += int(work.sum())
                state[1] += int(np.maximum(0, ge - np.maximum(gs, work_reach[:-1]))[work].sum())
                state[2] += int(np.maximum(0, ge - np.maximum(gs, reach[:-1])).sum())
                state[3], state[4] = int(reach[-1]), int(work_reach[-1])
        return {g: (count, work, total) for g, (count, work, total, _, _) in out.items()}

    def pull(self, where: str, *, source: str = "bs_sel", whole: bool = False) -> Table:
        """The rows of ``source`` matching ``where``, in row order, as an in-memory table with the
        session's code lists (``whole``: the table of every row, with its sources and notes)."""
        fetched = self._fetch(
            f"SELECT {', '.join(chr(34) + n + chr(34) for n in _NAMES)} FROM {source} WHERE {where} ORDER BY ord"
        )
        be = self.be
        columns = {}
        for name in _NAMES:
            dtype = "bool" if name == "comm" else COLUMNS.get(name, "int64")
            values = fetched[name]
            if dtype == "bool":
                columns[name] = be.column([bool(v) for v in values.tolist()], "bool")
                continue
            buffer = array.array(_TYPECODES[dtype])
            buffer.frombytes(values.astype("<i8" if dtype != "float64" else "<f8").tobytes())
            columns[name] = be.from_array(buffer, dtype, copy=False)
        t = self.table
        return Table(
            be, columns, t.operations, t.categories, t.ranks, t.devices, t.streams,
            rows=len(fetched["op"]), dropped=t.dropped, impossible=t.impossible if whole else {},
            sources=t.sources if whole else [], notes=t.notes if whole else [], launches=t.launches,
            kernel_sources=t.kernel_sources,
        )  # fmt: skip

    def _spans_table(self) -> None:
        """The spans table ``bs_t``, in the session's database file: every span's row written
        in one scan of the files, then the self time of the few spans with overhead spans
        under them updated in place (one query that read the coded rows twice, to join the
        overhead spans to their parents, made DuckDB write every coded row to its spill files
        uncompressed before the table)."""
        names = ", ".join(f'"{name}"' for name in _NAMES)
        self._run(f"CREATE TABLE bs_t AS SELECT ord, {names} FROM ({coded_query(self.dialect)})")
        self._run(f"""
            UPDATE bs_t SET self = CAST(greatest(0, bs_t.self - x.ns) AS BIGINT)
            FROM ({overhead_query("bs_t")}) x WHERE x.ord = bs_t.ord""")

    def _fetch(self, sql: str) -> dict[str, Any]:
        """The rows of ``sql`` as one numpy array per column."""
        return self._run(sql).fetchnumpy()  # type: ignore[no-any-return]

    def _batches(self, sql: str) -> Iterator[dict[str, Any]]:
        """The rows of ``sql`` in batches of :data:`_BATCH_ROWS`, each one numpy array per column
        (a relation's reader: read as the batches are taken, so no progress is polled)."""
        for batch in self.con.sql(sql).to_arrow_reader(_BATCH_ROWS):
            yield {name: column.to_numpy() for name, column in zip(batch.schema.names, batch.columns)}

    def _what(self) -> str:
        return self.files[0] if len(self.files) == 1 else f"{len(self.files)} files"

    def _views(self) -> None:
        con = self.con
        self.upload("bs_files", "path VARCHAR, idx BIGINT", [(path, i) for i, path in enumerate(self.files)])
        listed = ", ".join("'" + path.replace("'", "''") + "'" for path in self.files)
        columns = ", ".join(f"s.{name}" for name in SOURCE_COLUMNS)
        con.execute(f"""
            CREATE TEMP VIEW bs_source AS
            SELECT {columns}, f.idx AS file, (f.idx << {_ORD_SHIFT}) + s.file_row_number AS ord
            FROM read_parquet([{listed}], filename = true, file_row_number = true) s
            JOIN bs_files f ON f.path = s.filename""")
        con.execute(f"CREATE TEMP VIEW bs_reasoned AS SELECT *, {impossible_reason()} AS reason FROM bs_source")
        con.execute("CREATE TEMP VIEW bs_valid AS SELECT * FROM bs_reasoned WHERE reason IS NULL")

    def _impossible(self, counts: list[tuple[int, str | None, int]]) -> tuple[dict[str, int], list[str]]:
        """Impossible spans by reason, and the readers' line for each file that had some, from
        the rows of each file and reason (``None``: the valid ones)."""
        counts = sorted(counts, key=lambda row: (row[0], row[1] or ""))
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
        return total, notes

    def _codes(self, builder: TableBuilder, firsts: list[tuple[Any, ...]]) -> None:
        """The code lists, from the first span of each key (its ``FIRST_COLUMNS``, in row order)
        through ``builder``, and the tables that map every span's key to its codes (``bs_*_codes``)."""
        resources: dict[Any, Any] = {}
        ops, ranks, lanes, launches = {}, {}, {}, {}
        for first in firsts:
            name, kind, category, brick, resource, clock, ordinal, stream, grid, block, smem = first
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
        self.upload(
            "bs_op_codes",
            "kind_name VARCHAR, name VARCHAR, category_name VARCHAR, brick_name VARCHAR, op BIGINT, kind_code BIGINT,"
            " category_code BIGINT, comm BOOLEAN",
            [(*k, *v) for k, v in ops.items()],
        )
        self.upload("bs_rank_codes", "resource VARCHAR, rank_code BIGINT", list(ranks.items()))
        self.upload(
            "bs_lane_codes",
            "resource VARCHAR, device_ordinal BIGINT, stream BIGINT, device BIGINT, stream_code BIGINT",
            [(*k, *v) for k, v in lanes.items()],
        )
        self.upload(
            "bs_launch_codes",
            "grid BIGINT[], block BIGINT[], smem BIGINT, launch BIGINT",
            [(_list(g), _list(b), s, code) for (g, b, s), code in launches.items()],
        )

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
        total = 2 * MEMORY_CAP
    return f"{max(1, min(int(total * MEMORY_SHARE), MEMORY_CAP) >> 20)}MB"
