# SPDX-License-Identifier: Apache-2.0
"""Every section of the report computed in SQL over the spans table (``bs_t``), out of core.

The SQL sums, counts, ranks and merges; each section's figures are then built from those
sums by the in-memory engine's own functions (``stats_of``, ``memory_of``, ``points_of``...),
so every figure has one definition. Percentiles are exact: a group's count comes first, the
row index of each percentile is :func:`~brickscope.analysis._stats.nearest_rank` of it, and
the SQL returns the value at that index of the sorted group. Busy times are unions of
intervals, in SQL: in start order, each interval adds what it reaches past the running
maximum of the ends before it. What needs a few spans' tree (the critical paths of the slowest steps) or only a few
rows (steps, brickscope's own work, GC pauses) pulls just those rows into an in-memory table
and runs the in-memory code on them.

Example::

    report = SqlAnalysis(session, table).report(top=10)   # session: a _duckdb.Session
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from brickscope.analysis import _communication, _memory
from brickscope.analysis._engine import _require_match
from brickscope.analysis._graph import critical_paths
from brickscope.analysis._host import host_time
from brickscope.analysis._load import AnalysisError
from brickscope.analysis._memory import memory_of
from brickscope.analysis._model import Outlier, Report, Stall
from brickscope.analysis._operations import (
    OUTLIER_FACTOR,
    OUTLIER_MIN_COUNT,
    PERCENTILES,
    STALL_FACTOR,
    STALL_MADS,
    STALL_MIN_COUNT,
    make_instance,
    stats_of,
    with_shares,
)
from brickscope.analysis._peaks import Peak
from brickscope.analysis._placement import balance, devices_of, ranks_of, throughput
from brickscope.analysis._roofline import points_of
from brickscope.analysis._sql import Dialect
from brickscope.analysis._stalls import overlaps_of
from brickscope.analysis._stats import nearest_rank
from brickscope.analysis._table import (
    CLOCK_CUDA_CODE,
    CLOCK_GPU_CODE,
    CLOCKS,
    KIND_BRICK,
    KIND_GC,
    KIND_KERNEL,
    KIND_OTHER,
    KIND_OVERHEAD,
    KIND_STEP,
    Table,
)
from brickscope.analysis._tiles import tiles_of
from brickscope.offline import describe_steps
from brickscope.trace.attributes import TILE_LEVELS

#: The picks of a group's statistics: the percentiles, then its smallest and largest value.
_FRACTIONS = (*PERCENTILES, 0.0, 1.0)
#: The columns an Instance is made of, in make_instance's order (the span id last, signed).
_INSTANCE = "op, duration, self, start, step, layer, rank, device, stream, span_id"
_UNSIGNED = "span_id < 0, span_id"  # ORDER BY: the signed ids in unsigned order
_WORK = f"kind IN ({KIND_BRICK}, {KIND_KERNEL})"
_GPU = f"clock IN ({CLOCK_CUDA_CODE}, {CLOCK_GPU_CODE})"
#: The floats below this convert to BIGINT (2**62, a float exactly).
_BIGINT_FLOAT = float(1 << 62)


class Session(Protocol):
    """What the SQL sections need of an engine's session over the spans table ``bs_t``."""

    #: How the engine spells what SQL engines spell differently.
    dialect: Dialect

    def query(self, sql: str) -> list[tuple[Any, ...]]: ...

    def upload(self, name: str, columns: str, rows: list[tuple[Any, ...]]) -> None:
        """(Re)create the temporary table ``name`` with ``columns`` (SQL) and ``rows``."""

    def pull(self, where: str) -> Table:
        """The rows of ``bs_sel`` matching ``where``, in row order, as an in-memory table."""

    def sorted_groups(self, source: str) -> list[tuple[int, Any]]:
        """Per key of ``source`` (a query of ``key, value``), in key order: its values sorted, as
        an ``array.array`` of int64."""

    def sequential_sums(self, source: str, groups: int) -> list[float]:
        """Per group code ``0..groups-1`` of ``source`` (a query of ``g, value`` in row order):
        its float values added one by one in that order."""

    def unions(self, intervals: str) -> dict[int, tuple[int, int, int]]:
        """Per group ``g`` of ``intervals`` (a query of ``g, s, e, w``; ``w`` 1 for work, 0 for a
        window): the work intervals' count, the length of their union, and the length of the
        union of all its intervals."""


class SqlAnalysis:
    """The report of the spans table, section by section (see the module docstring).

    Args:
        session: the engine's session over ``bs_t``.
        table: the code lists of ``bs_t``'s rows (an in-memory table with no columns read),
            its row count, dropped spans, sources and notes.
    """

    def __init__(self, session: Session, table: Table) -> None:
        self.s, self.t = session, table

    def report(
        self,
        *,
        top: int = 10,
        steps: tuple[int | None, int | None] | None = None,
        ranks: list[str] | None = None,
        devices: list[int] | None = None,
        peaks: dict[str, Peak] | None = None,
        comm_min_ratio: float = _communication.MIN_RATIO,
        memory_min_share: float = _memory.HOTSPOT_SHARE,
    ) -> Report:
        """As :func:`~brickscope.analysis.analyse` (same arguments, same errors)."""
        for name, value in (("comm_min_ratio", comm_min_ratio), ("memory_min_share", memory_min_share)):
            if not 0 <= value <= 1:  # NaN fails too
                raise ValueError(f"{name} {value}: expected a number between 0 and 1")
        t = self.t
        filters = self._select(steps, ranks, devices)
        rows = self._one("SELECT count(*) FROM bs_sel")
        clocks = dict(self.s.query(f"SELECT clock, count(*) FROM bs_sel WHERE kind = {KIND_BRICK} GROUP BY clock"))
        picks = self._op_picks()
        found = self._stalls_found(picks)
        operations = self._operations(picks)
        device_lanes, busy = self._devices()
        rank_lanes = self._ranks()
        few = self.s.pull(f"kind IN ({KIND_STEP}, {KIND_OVERHEAD}, {KIND_GC})")
        return Report(
            sources=tuple(t.sources),
            spans=rows,
            dropped=t.dropped + sum(t.impossible.values()),
            dropped_by_reason={**({"bound": t.dropped} if t.dropped else {}), **t.impossible},
            clocks=tuple(name for code, name in enumerate(CLOCKS) if clocks.get(code)),
            filters=filters,
            operations=operations,
            others=self._others(),
            categories=self._categories(),
            slowest=self._slowest(top),
            outliers=self._outliers(picks, top),
            devices=device_lanes,
            ranks=rank_lanes,
            load_balance={"devices": balance(device_lanes), "ranks": balance(rank_lanes)},
            communication=_communication.communication_of(t, operations, self._exposure(busy), comm_min_ratio),
            memory=self._memory(memory_min_share),
            roofline=self._roofline(peaks),
            throughput=throughput(few),
            notes=tuple(t.notes),
            tiles=self._tiles(),
            critical_paths=self._critical_paths(top),
            host=host_time(few, self._extents()),
            stalls=self._stalls(found, top),
        )

    def summary(
        self,
        *,
        steps: tuple[int | None, int | None] | None = None,
        ranks: list[str] | None = None,
        devices: list[int] | None = None,
    ) -> Any:
        """The run's :class:`~brickscope.analysis._diff.RunSummary` (what ``diff`` compares): the
        self time of each (operation, step) summed in SQL, and the instances' self times, sorted in
        SQL, held as one int64 column (8 bytes an instance, not a table row)."""
        from brickscope.analysis._diff import summary_of

        self._select(steps, ranks, devices)
        be = self.t.backend
        keys = [(op.kind, op.name) for op in self.t.operations]
        chunks: dict[tuple[str, str], list[Any]] = {}
        for op, values in self.s.sorted_groups(
            f"SELECT op AS key, self AS value FROM bs_sel WHERE {_WORK}"
        ):  # fmt: skip
            chunks.setdefault(keys[op], []).append(be.from_array(values, "int64", copy=False))
        step_sums = self.s.query(
            f"SELECT op, step, sum(self) FROM bs_sel WHERE {_WORK} AND step >= 0 GROUP BY op, step ORDER BY op, step"
        )
        return summary_of(self.t, chunks, [(op, step, int(total)) for op, step, total in step_sums])

    # --- filters --------------------------------------------------------------------------

    def _select(
        self, steps: tuple[int | None, int | None] | None, ranks: list[str] | None, devices: list[int] | None
    ) -> dict[str, str]:
        """The view ``bs_sel`` of the rows the filters keep (as :func:`~brickscope.analysis.select`)."""
        t = self.t
        filters: dict[str, str] = {}
        where = []
        if steps is not None:
            low, high = steps
            where.append(f"step >= {max(low or 0, 0)}" + (f" AND step < {int(high)}" if high is not None else ""))
            filters["step"] = describe_steps(steps)
        if ranks:
            unknown = [r for r in ranks if r not in t.ranks]
            if unknown:
                raise AnalysisError(f"no rank {', '.join(unknown)} in the trace (ranks: {', '.join(t.ranks)})")
            where.append(f"rank IN ({', '.join(str(t.ranks.index(r)) for r in ranks)})")
            filters["rank"] = ",".join(ranks)
        if devices:
            codes = [code for code, device in enumerate(t.devices) if device.ordinal in devices]
            if not codes:
                present = sorted({d.ordinal for d in t.devices})
                raise AnalysisError(
                    f"no GPU device {', '.join(map(str, devices))} in the trace"
                    f" (devices: {', '.join(map(str, present)) or 'none; it was timed on the host clock'})"
                )
            where.append(f"device IN ({', '.join(map(str, codes))})")
            filters["device"] = ",".join(map(str, devices))
        self.s.query(f"CREATE OR REPLACE TEMP VIEW bs_sel AS SELECT * FROM bs_t WHERE {' AND '.join(where) or 'true'}")
        if where:
            _require_match(self._one(f"SELECT count(*) FROM bs_sel WHERE {_WORK}"), filters)
        return filters

    # --- per operation --------------------------------------------------------------------

    def _picks(self, source: str, fractions: tuple[float, ...]) -> tuple[dict[int, int], dict[int, list[int]]]:
        """Per key of ``source`` (a query of ``key, value``): its count, and the value at the
        nearest rank of each fraction among its sorted values."""
        counts = dict(self.s.query(f"SELECT key, count(*) FROM ({source}) GROUP BY key"))
        self.s.upload(
            "bs_pick",
            "key BIGINT, i BIGINT, r BIGINT",
            [(key, i, nearest_rank(n, f)) for key, n in counts.items() for i, f in enumerate(fractions)],
        )
        values = {key: [0] * len(fractions) for key in counts}
        for key, i, value in self.s.query(f"""
            SELECT p.key, p.i, w.value
            FROM (SELECT key, value, row_number() OVER (PARTITION BY key ORDER BY value) - 1 AS r FROM ({source})) w
            JOIN bs_pick p ON p.key = w.key AND p.r = w.r"""):
            values[key][i] = value
        return counts, values

    def _op_picks(self) -> tuple[dict[int, int], dict[int, list[int]]]:
        return self._picks(f"SELECT op AS key, self AS value FROM bs_sel WHERE {_WORK}", _FRACTIONS)

    def _stalls_found(self, picks: tuple[dict[int, int], dict[int, list[int]]]) -> dict[int, tuple[int, float]]:
        """The stall rule: per op code, (median, threshold) where the operation has enough
        instances; the view ``bs_stalls`` of the stalled rows (with their median and threshold)."""
        counts, values = picks
        medians = {op: values[op][0] for op in counts}
        self.s.upload("bs_median", "op BIGINT, median BIGINT", list(medians.items()))
        _, mads = self._picks(
            f"SELECT w.op AS key, abs(w.self - m.median) AS value FROM bs_sel w JOIN bs_median m ON m.op = w.op"
            f" WHERE w.kind IN ({KIND_BRICK}, {KIND_KERNEL})",
            (0.5,),
        )
        rule = {
            op: (median, max(STALL_FACTOR * median, median + STALL_MADS * mads[op][0]))
            for op, median in medians.items()
            if counts[op] >= STALL_MIN_COUNT
        }
        self.s.upload("bs_stall_rule", "op BIGINT, median BIGINT, threshold DOUBLE", [(k, *v) for k, v in rule.items()])
        self.s.query(
            "CREATE OR REPLACE TEMP VIEW bs_stalls AS SELECT w.*, r.median, r.threshold FROM bs_sel w"
            f" JOIN bs_stall_rule r ON r.op = w.op WHERE w.kind IN ({KIND_BRICK}, {KIND_KERNEL}) AND CAST(w.self AS DOUBLE) > r.threshold"
        )
        return rule

    def _operations(self, picks: tuple[dict[int, int], dict[int, list[int]]]) -> tuple[Any, ...]:
        counts, values = picks
        sums = self._sums(f"SELECT op AS key, * FROM bs_sel WHERE {_WORK}")
        stalled = self._stall_sums("op", "true")
        stats = []
        for op, operation in enumerate(self.t.operations):
            if op in counts and operation.kind in ("brick", "kernel"):
                stall_count, stall_ns = stalled.get(op, (0, 0))
                total, self_ns, elements, nbytes = sums[op]
                stats.append(
                    stats_of(
                        operation.name,
                        operation.kind,
                        operation.category,
                        counts[op],
                        total,
                        self_ns,
                        elements,
                        nbytes,
                        tuple(values[op]),
                        stall_count,
                        stall_ns,
                    )  # fmt: skip
                )
        out = []
        for kind in ("brick", "kernel"):
            out.extend(with_shares([s for s in stats if s.kind == kind]))
        return tuple(out)

    def _categories(self) -> tuple[Any, ...]:
        counts, values = self._picks(
            f"SELECT category AS key, self AS value FROM bs_sel WHERE kind = {KIND_BRICK}", _FRACTIONS
        )
        sums = self._sums(f"SELECT category AS key, * FROM bs_sel WHERE kind = {KIND_BRICK}")
        stalled = self._stall_sums("category", f"kind = {KIND_BRICK}")
        stats = []
        for code, name in enumerate(self.t.categories):
            if code in counts:
                stall_count, stall_ns = stalled.get(code, (0, 0))
                total, self_ns, elements, nbytes = sums[code]
                stats.append(
                    stats_of(
                        name,
                        "category",
                        name,
                        counts[code],
                        total,
                        self_ns,
                        elements,
                        nbytes,
                        tuple(values[code]),
                        stall_count,
                        stall_ns,
                    )  # fmt: skip
                )
        return tuple(with_shares(stats))

    def _others(self) -> tuple[Any, ...]:
        """Spans of no brickscope kind by name, as :func:`~brickscope.analysis._operations.other_operations`:
        a span's self time is its duration less the union of its children's intervals, each
        clipped to the span (one clipped to nothing is empty at its start)."""
        self.s.query(f"""
            CREATE OR REPLACE TEMP VIEW bs_other_self AS
            WITH iv AS (
                SELECT p.ord AS g, greatest(c.start, p.start) AS s,
                    greatest(least(c."end", p."end"), greatest(c.start, p.start)) AS e
                FROM bs_sel c JOIN bs_sel p ON p.span_id = c.parent_id
                WHERE c.parent_id <> 0 AND p.kind = {KIND_OTHER}),
            o AS (SELECT g, s, e, max(e) OVER (PARTITION BY g ORDER BY s, e
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before FROM iv),
            covered AS (SELECT g, sum(greatest(0, e - greatest(s, coalesce(before, s)))) AS ns FROM o GROUP BY g)
            SELECT w.op AS key, w.duration, w.duration - coalesce(x.ns, 0) AS self, w.elements, w.bytes
            FROM bs_sel w LEFT JOIN covered x ON x.g = w.ord WHERE w.kind = {KIND_OTHER}""")
        counts, values = self._picks("SELECT key, self AS value FROM bs_other_self", _FRACTIONS)
        sums = self._sums("SELECT * FROM bs_other_self")
        stats = []
        for op, operation in enumerate(self.t.operations):
            if op in counts and operation.kind == "other":
                total, self_ns, elements, nbytes = sums[op]
                stats.append(
                    stats_of(
                        operation.name, operation.kind, operation.category, counts[op], total, self_ns, elements,
                        nbytes, tuple(values[op]), 0, 0,
                    )  # fmt: skip
                )
        return tuple(with_shares(stats))

    def _sums(self, source: str) -> dict[int, tuple[int, int, int, int]]:
        rows = self.s.query(
            f"SELECT key, sum(duration), sum(self), sum(elements), sum(bytes) FROM ({source}) GROUP BY key"
        )
        return {key: tuple(int(v) for v in sums) for key, *sums in rows}  # type: ignore[misc]

    def _stall_sums(self, column: str, where: str) -> dict[int, tuple[int, int]]:
        rows = self.s.query(f"SELECT {column}, count(*), sum(self) FROM bs_stalls WHERE {where} GROUP BY {column}")
        return {code: (count, int(total)) for code, count, total in rows}

    def _slowest(self, top: int) -> tuple[Any, ...]:
        rows = self.s.query(
            f"SELECT {_INSTANCE} FROM bs_sel WHERE kind = {KIND_BRICK}"
            f" ORDER BY self DESC, start, {_UNSIGNED}, ord LIMIT {int(top)}"
        )
        return tuple(self._instance(row) for row in rows)

    def _outliers(self, picks: tuple[dict[int, int], dict[int, list[int]]], top: int) -> tuple[Outlier, ...]:
        counts, values = picks
        rule = [(op, values[op][0], OUTLIER_FACTOR * values[op][0]) for op in counts if counts[op] >= OUTLIER_MIN_COUNT]
        self.s.upload("bs_outlier_rule", "op BIGINT, median BIGINT, threshold DOUBLE", rule)
        columns = ", ".join(f"w.{c}" for c in _INSTANCE.split(", "))
        rows = self.s.query(f"""
            SELECT {columns}, r.median FROM bs_sel w JOIN bs_outlier_rule r ON r.op = w.op
            WHERE w.kind IN ({KIND_BRICK}, {KIND_KERNEL}) AND CAST(w.self AS DOUBLE) > r.threshold
            ORDER BY CASE WHEN r.median = 0 THEN CAST('inf' AS DOUBLE) ELSE CAST(w.self AS DOUBLE) / r.median END DESC,
                w.self DESC, w.start, w.span_id < 0, w.span_id, w.ord
            LIMIT {int(top)}""")
        return tuple(
            Outlier(self._instance(row[:-1]), row[-1], row[2] / row[-1] if row[-1] else math.inf) for row in rows
        )

    def _instance(self, row: tuple[Any, ...]) -> Any:
        *values, span_id = row
        return make_instance(self.t, *values, span_id & ((1 << 64) - 1))

    # --- devices, ranks, communication ----------------------------------------------------

    def _unions(self, intervals: str) -> dict[int, tuple[int, int, int]]:
        """Per group ``g`` of ``intervals`` (a query of ``g, s, e, w``; ``w`` 1 for work, 0 for a
        window): the work intervals' count, the length of their union, and the length of the
        union of all its intervals (the session's :meth:`Session.unions`)."""
        return self.s.unions(intervals)

    def _lane_stats(self, lane: str, work: str, windows: str) -> tuple[list[int], list[int], list[int]]:
        """Count, busy and idle-in-steps per code of ``lane`` (``n`` codes): ``work`` the lane's
        intervals (``g, s, e``), ``windows`` its ranks' step spans (``g, s, e``)."""
        n = {"device": len(self.t.devices), "stream": len(self.t.streams), "rank": len(self.t.ranks)}[lane]
        unions = self._unions(f"SELECT g, s, e, 1 AS w FROM ({work}) UNION ALL SELECT g, s, e, 0 AS w FROM ({windows})")
        count, busy, idle = [0] * n, [0] * n, [0] * n
        for g, (c, work_ns, both_ns) in unions.items():
            count[g], busy[g], idle[g] = c, work_ns, max(0, both_ns - work_ns)
        return count, busy, idle

    def _devices(self) -> tuple[tuple[Any, ...], list[int]]:
        gpu = f"SELECT * FROM bs_sel WHERE {_WORK} AND device >= 0"
        steps = f"SELECT * FROM bs_sel WHERE kind = {KIND_STEP}"
        pairs = f"SELECT DISTINCT device, rank FROM ({gpu})"
        lanes = self._lane_stats(
            "device",
            f'SELECT device AS g, start AS s, "end" AS e FROM ({gpu})',
            f'SELECT p.device AS g, st.start AS s, st."end" AS e FROM ({pairs}) p JOIN ({steps}) st ON st.rank = p.rank',
        )
        self.s.upload(
            "bs_stream_device", "stream BIGINT, device BIGINT", list(enumerate(s.device for s in self.t.streams))
        )
        streams = self._lane_stats(
            "stream",
            f'SELECT stream AS g, start AS s, "end" AS e FROM ({gpu})',
            f'SELECT sd.stream AS g, st.start AS s, st."end" AS e FROM bs_stream_device sd'
            f" JOIN ({pairs}) p ON p.device = sd.device JOIN ({steps}) st ON st.rank = p.rank",
        )
        return devices_of(self.t, lanes, streams), lanes[1]

    def _ranks(self) -> tuple[Any, ...]:
        uses = f"SELECT rank, max(CASE WHEN {_GPU} THEN 1 ELSE 0 END) AS cuda FROM bs_sel WHERE {_WORK} GROUP BY rank"
        lanes = (
            f'SELECT w.rank AS g, w.start AS s, w."end" AS e FROM bs_sel w JOIN ({uses}) u ON u.rank = w.rank'
            f" WHERE w.kind IN ({KIND_BRICK}, {KIND_KERNEL})"
            f" AND (CASE WHEN w.clock IN ({CLOCK_CUDA_CODE}, {CLOCK_GPU_CODE}) THEN 1 ELSE 0 END) = u.cuda"
        )
        windows = f'SELECT rank AS g, start AS s, "end" AS e FROM bs_sel WHERE kind = {KIND_STEP}'
        return ranks_of(self.t, *self._lane_stats("rank", lanes, windows))

    def _exposure(self, busy: list[int]) -> tuple[Any, ...]:
        """Per device, communication against the rest of its GPU work (both together: its busy time)."""
        # group 2 * device + 1: the device's communication; 2 * device: the rest
        unions = self._unions(
            'SELECT 2 * device + CASE WHEN comm THEN 1 ELSE 0 END AS g, start AS s, "end" AS e, 1 AS w'
            f" FROM bs_sel WHERE {_WORK} AND device >= 0"
        )
        n = len(self.t.devices)
        union = [unions.get(g, (0, 0, 0))[1] for g in range(2 * n)]
        return _communication.exposure_of(self.t, union[1::2], union[0::2], busy)

    # --- memory, roofline, tiles ----------------------------------------------------------

    def _memory(self, min_share: float) -> Any:
        carrying = f"{_WORK} AND bytes >= 1"
        n = len(self.t.operations)
        count, total, largest = [0] * n, [0] * n, [0] * n
        for op, c, b, m in self.s.query(
            f"SELECT op, count(*), sum(bytes), max(bytes) FROM bs_sel WHERE {carrying} GROUP BY op"
        ):
            count[op], total[op], largest[op] = c, int(b), m
        peak = self.s.query(
            f"SELECT {_INSTANCE}, bytes FROM bs_sel WHERE {carrying} ORDER BY bytes DESC, start, {_UNSIGNED}, ord LIMIT 1"
        )
        if peak:
            return memory_of(self.t, count, total, largest, self._instance(peak[0][:-1]), peak[0][-1], min_share)
        return memory_of(self.t, count, total, largest, None, 0, min_share)

    def _roofline(self, peaks: dict[str, Peak] | None) -> tuple[Any, ...]:
        """Per (op code, device code): bytes and self time summed in SQL, and flops as the
        in-memory engine sums them, floats added in row order. Where that order cannot change
        the sum, SQL sums them exactly: whole flops, each a multiple of ``2**k`` (the lowest bit
        of any of them), whose total (flops are never negative: a negative amount is an
        impossible span) is at most ``2**(53 + k)``, so every partial sum is a float. The other
        groups' flops are fetched in row order, as numpy arrays a batch at a time."""
        carrying = f"{_WORK} AND NOT (bytes < 1 AND flops < 1e-300)"
        small = f"CAST(CASE WHEN flops < {_BIGINT_FLOAT!r} THEN flops ELSE 0 END AS BIGINT)"
        groups, inexact = {}, []
        for op, device, nbytes, time_ns, whole, largest, low, total in self.s.query(f"""
            SELECT op, device, sum(bytes), sum(self), bool_and(flops = floor(flops)), max(flops), bit_or({small}),
                sum(CAST({small} AS DECIMAL(38, 0)))
            FROM bs_sel WHERE {carrying} GROUP BY op, device"""):
            exact = whole and largest < _BIGINT_FLOAT and int(total) <= (1 << 53) * (low & -low or 1)
            groups[(op, device)] = [float(int(total)) if exact else 0.0, int(nbytes), int(time_ns)]
            if not exact:
                inexact.append((op, device))
        if inexact:
            lanes = len(self.t.devices) + 1  # device -1: off the GPU
            self.s.upload("bs_inexact", "op BIGINT, device BIGINT", inexact)
            sums = self.s.sequential_sums(
                f"SELECT w.op * {lanes} + w.device + 1 AS g, w.flops AS value FROM bs_sel w"
                f" JOIN bs_inexact x ON x.op = w.op AND x.device = w.device WHERE {carrying} ORDER BY w.ord",
                len(self.t.operations) * lanes,
            )
            for op, device in inexact:
                groups[(op, device)][0] = sums[op * lanes + device + 1]
        return points_of(self.t, {key: tuple(value) for key, value in groups.items()}, peaks)  # type: ignore[misc]

    def _tiles(self) -> tuple[Any, ...]:
        """Per level some span has tiles of, the sums per op code (one scan for every level)."""
        n = len(self.t.operations)
        columns = [f"tile_{level}_{what}" for level in TILE_LEVELS for what in ("count", "ns", "elements")]
        seen = ", ".join(f"sum(CASE WHEN tile_{level}_count <> 0 THEN 1 ELSE 0 END)" for level in TILE_LEVELS)
        rows = self.s.query(f"SELECT op, {', '.join(f'sum({c})' for c in columns)}, {seen} FROM bs_sel GROUP BY op")
        sums = {}
        for index, level in enumerate(TILE_LEVELS):
            if not any(row[1 + len(columns) + index] for row in rows):
                continue
            lists: tuple[list[int], list[int], list[int]] = ([0] * n, [0] * n, [0] * n)
            for row in rows:
                for what, column in enumerate(lists):
                    column[row[0]] = int(row[1 + 3 * index + what])
            sums[level] = lists
        return tiles_of(self.t, sums)

    # --- steps, host, stalls --------------------------------------------------------------

    def _extents(self) -> dict[int, tuple[int, int]]:
        return {
            r: (low, high)
            for r, low, high in self.s.query('SELECT rank, min(start), max("end") FROM bs_sel GROUP BY rank')
        }

    def _critical_paths(self, top: int) -> tuple[Any, ...]:
        """The slowest ``top`` steps not nested in another step, with every span under them, pulled
        into memory; a trace without steps is pulled whole (its graph is one per rank).

        Both walks of the tree go a level a query: the level's few span ids are uploaded and
        joined against the spans, so each query scans the table once and holds only the level
        (a recursive query would hash the whole table at every level, past the memory limit on
        large traces). A cycle of parent ids ends the walk: a span already reached is not
        visited again."""
        if not self._one(f"SELECT count(*) FROM bs_sel WHERE kind = {KIND_STEP}"):
            return critical_paths(self.s.pull("true"), slowest=top)
        nested = self._nested_steps()
        self.s.upload("bs_nested", "ord BIGINT", [(o,) for o in sorted(nested)])
        level = self.s.query(f"""
            SELECT s.ord, s.span_id FROM bs_sel s WHERE s.kind = {KIND_STEP}
                AND NOT EXISTS (SELECT 1 FROM bs_nested n WHERE n.ord = s.ord)
            ORDER BY s.start - s."end", s.ord LIMIT {int(top)}""")
        under = {o for o, _ in level}
        while level:
            self.s.upload("bs_level", "span_id BIGINT", sorted({(span_id,) for _, span_id in level}))
            level = [
                (o, span_id)
                for o, span_id in self.s.query(
                    "SELECT c.ord, c.span_id FROM bs_sel c JOIN bs_level l ON c.parent_id = l.span_id"
                    " WHERE c.parent_id <> 0"
                )
                if o not in under
            ]
            under.update(o for o, _ in level)
        self.s.upload("bs_under", "ord BIGINT", [(o,) for o in sorted(under)])
        return critical_paths(self.s.pull("ord IN (SELECT ord FROM bs_under)"), slowest=top)

    def _nested_steps(self) -> set[int]:
        """The order keys of the steps with a step among their ancestors, a level of ancestors a query."""
        level = self.s.query(f"SELECT ord, parent_id FROM bs_sel WHERE kind = {KIND_STEP} AND parent_id <> 0")
        seen, nested = set(level), set()
        while level:
            self.s.upload("bs_level", "ord BIGINT, ancestor BIGINT", sorted(set(level)))
            parents = self.s.query(
                "SELECT l.ord, p.kind, p.parent_id FROM bs_level l JOIN bs_sel p ON p.span_id = l.ancestor"
            )
            nested.update(o for o, kind, _ in parents if kind == KIND_STEP)
            level = [
                (o, parent)
                for o, kind, parent in parents
                if kind != KIND_STEP and parent != 0 and (o, parent) not in seen
            ]
            seen.update(level)
        return nested

    def _stalls(self, rule: dict[int, tuple[int, float]], top: int) -> tuple[Stall, ...]:
        """The ``top`` stalls that cost most over their median, a stall inside a stalled span left
        to it, each with what overlapped it on its rank (``_stalls.stalls``)."""
        columns = ", ".join(f"s.{c}" for c in _INSTANCE.split(", "))
        # NOT EXISTS, not NOT IN: span ids are never NULL, and NOT IN's rule for NULLs makes
        # Spark compare every stall with every other (a nested loop) where EXISTS is a hash join
        listed = self.s.query(f"""
            SELECT {columns}, s.thread, s."end", s.median, s.threshold FROM bs_stalls s
            WHERE s.parent_id = 0 OR NOT EXISTS (SELECT 1 FROM bs_stalls p WHERE p.span_id = s.parent_id)
            ORDER BY s.self - s.median DESC, s.start, s.ord LIMIT {int(top)}""")
        self.s.upload(
            "bs_listed", 'k BIGINT, rank BIGINT, start BIGINT, "end" BIGINT',
            [(k, row[6], row[3], row[11]) for k, row in enumerate(listed)],
        )  # fmt: skip
        near: dict[int, list[tuple[int, ...]]] = {k: [] for k in range(len(listed))}
        for k, *values in self.s.query("""
            SELECT l.k, t.op, t.kind, t.clock, t.thread, t.start, t."end" FROM bs_sel t
            JOIN bs_listed l ON t.rank = l.rank AND t.start < l."end" AND t."end" >= l.start + 1
            ORDER BY l.k, t.ord"""):
            near[k].append(tuple(values))
        out = []
        for k, row in enumerate(listed):
            self_ns, start, thread, end, median, threshold = row[2], row[3], row[10], row[11], row[12], row[13]
            out.append(
                Stall(
                    instance=self._instance(row[:10]),
                    median_ns=median,
                    threshold_ns=int(threshold),
                    ratio=self_ns / median if median else math.inf,
                    excess_ns=self_ns - median,
                    overlaps=overlaps_of(self.t, thread, start, end, near[k]),
                )
            )
        return tuple(out)

    def _one(self, sql: str) -> Any:
        return self.s.query(sql)[0][0]
