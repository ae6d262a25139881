# SPDX-License-Identifier: Apache-2.0
"""The analysis table's columns as SQL over the Parquet span format, for the SQL engines.

One place defines, in SQL, what :class:`~brickscope.analysis._table.TableBuilder` makes of a
span: which spans the readers leave out as impossible (``brickscope.offline.impossible``),
and each column of :data:`~brickscope.analysis._table.COLUMNS` (codes, ``self`` with the
overhead spans taken off their parent, ``duration``). The text is as portable as SQL gets;
what one engine spells differently is a method of :class:`Dialect` (DuckDB's here, Spark's
beside it), and nothing else in these queries may be engine-specific.

The code lists (operations, ranks, devices, streams, launches) are not computed in SQL:
the first span of each distinct key goes through the in-memory engine's own builder, in
the order the in-memory engine reads them, so codes, labels and the communication rule are
that builder's by construction; the SQL only joins the codes back onto every span.

Example::

    sql = spans_query(DUCKDB)        # a SELECT over the views ``bs_valid``, ``bs_op_codes``...
"""

from __future__ import annotations

from dataclasses import dataclass

from brickscope.analysis._table import (
    _KEYS,
    CLOCK_CUDA_CODE,
    CLOCK_GPU_CODE,
    CLOCK_HOST_CODE,
    COLUMNS,
    DTYPE_BYTES,
    KIND_BRICK,
    KIND_KERNEL,
    KIND_OVERHEAD,
)
from brickscope.offline._integrity import (
    END_BEFORE_START,
    GPU_DURATION_TOLERANCE_NS,
    INCONSISTENT_DURATION,
    NEGATIVE_AMOUNT,
    NEGATIVE_DURATION,
    NO_END_TIME,
    NO_START_TIME,
    WALL_CLOCK_MIN_NS,
)
from brickscope.trace import attributes as A

#: The columns of the Parquet span format the SQL engines read (the format's contract;
#: docs/semantic-conventions.md). A file lacking one is refused, naming it.
SOURCE_COLUMNS = (
    "span_id", "parent_span_id", "name", "kind", "category", "start_ns", "end_ns", "clock", "self_ns",
    "step", "layer", "thread_id", "resource", "device_ordinal", "stream", "elements", "bytes",
    "output_shape", "dtype", "flops", "tokens", "kernel_grid", "kernel_block", "kernel_shared_mem_bytes",
    "kernel_source_hash", "output_checksum", "host_duration_ns", "gpu_duration_ns", "brick_name", "attributes",
    *(f"tile_{level}_{what}" for level in A.TILE_LEVELS for what in ("count", "ns", "elements")),
)  # fmt: skip
#: The attributes the table or the impossible-span rule reads. The format keeps each in a typed
#: column; one in the ``attributes`` JSON is a value its column could not hold (a text step
#: number, a float byte count), which the SQL engines do not read: :func:`untyped_query` finds them.
ANALYSIS_KEYS = tuple(dict.fromkeys((*_KEYS, A.GPU_DURATION_NS, A.HOST_DURATION_NS)))


@dataclass(frozen=True)
class Dialect:
    """What one SQL engine spells its own way. Everything else in these queries is shared.

    Attributes:
        name: the engine (``duckdb``, ``spark``).
        null_safe_equal: a format string ``{a}``/``{b}`` of equality where NULL equals NULL.
        json_has: a format string ``{column}``/``{key}``: whether a JSON object column has the member ``key``.
        list_product: a format string ``{column}`` of the product of a list of integers
            (1 for an empty list).
        value_at_min: a format string ``{value}``/``{order}`` of the aggregate: ``value`` on
            the row of the least ``order``, NULL when it is NULL there.
    """

    name: str
    null_safe_equal: str
    json_has: str
    list_product: str
    value_at_min: str

    def equal(self, a: str, b: str) -> str:
        return self.null_safe_equal.format(a=a, b=b)

    def has(self, column: str, key: str) -> str:
        return self.json_has.format(column=column, key=key)

    def product(self, column: str) -> str:
        return self.list_product.format(column=column)

    def at_min(self, value: str, order: str) -> str:
        return self.value_at_min.format(value=value, order=order)


DUCKDB = Dialect(
    name="duckdb",
    null_safe_equal="{a} IS NOT DISTINCT FROM {b}",
    json_has="json_exists({column}, '$.\"{key}\"')",
    list_product="list_reduce(list_prepend(CAST(1 AS BIGINT), {column}), lambda x, y: x * y)",
    # arg_min skips the rows where the value is NULL; arg_min_null keeps them
    value_at_min="arg_min_null({value}, {order})",
)

#: Spark SQL (4.0 or later: VARIANT for the JSON members). The queries' double-quoted
#: identifiers need ``spark.sql.ansi.doubleQuotedIdentifiers``, which the Spark engine sets.
SPARK = Dialect(
    name="spark",
    null_safe_equal="{a} <=> {b}",
    json_has="variant_get(try_parse_json({column}), '$[\"{key}\"]') IS NOT NULL",
    list_product="aggregate({column}, CAST(1 AS BIGINT), (acc, x) -> acc * x)",
    value_at_min="min_by({value}, {order})",
)

_TILE_NS = tuple(f"tile_{level}_ns" for level in A.TILE_LEVELS)
_TILE_ELEMENTS = tuple(f"tile_{level}_elements" for level in A.TILE_LEVELS)


def impossible_reason() -> str:
    """A SQL expression over a source row: the reason it is impossible (the names of
    ``brickscope.offline.IMPOSSIBLE_REASONS``, in their precedence), or NULL."""
    gpu_ns, host_ns = "gpu_duration_ns", "host_duration_ns"
    negative_ns = " OR ".join(f"{c} < 0" for c in ("self_ns", gpu_ns, host_ns, *_TILE_NS))
    negative_amount = " OR ".join(f"{c} < 0" for c in ("bytes", "flops", "tokens", "elements", *_TILE_ELEMENTS))
    tolerance = GPU_DURATION_TOLERANCE_NS
    return f"""CASE
        WHEN start_ns <> 0 AND end_ns = 0 THEN '{NO_END_TIME}'
        WHEN start_ns = 0 AND end_ns >= {WALL_CLOCK_MIN_NS} THEN '{NO_START_TIME}'
        WHEN end_ns < start_ns THEN '{END_BEFORE_START}'
        WHEN {negative_ns} THEN '{NEGATIVE_DURATION}'
        WHEN {negative_amount} THEN '{NEGATIVE_AMOUNT}'
        WHEN self_ns > end_ns - start_ns
            OR {gpu_ns} - (end_ns - start_ns) NOT BETWEEN -{tolerance} AND {tolerance}
            THEN '{INCONSISTENT_DURATION}'
        END"""


def untyped_query(d: Dialect) -> str:
    """The number of source rows (view ``bs_source``) with an :data:`ANALYSIS_KEYS` attribute in
    the ``attributes`` JSON, and the first such key of the first of them."""
    found = " OR ".join(d.has("attributes", key) for key in ANALYSIS_KEYS)
    first = " ".join(f"WHEN {d.has('attributes', key)} THEN '{key}'" for key in ANALYSIS_KEYS)
    return f"""
        SELECT count(*), min(CASE {first} END) FROM bs_source
        WHERE attributes IS NOT NULL AND ({found})"""


#: The source columns the first span of a key is read with, for the code lists' builder.
FIRST_COLUMNS = (
    "name", "kind", "category", "brick_name", "resource", "clock", "device_ordinal", "stream",
    "kernel_grid", "kernel_block", "kernel_shared_mem_bytes",
)  # fmt: skip
#: The groups of :func:`census_query`: per file and reason, then the keys the code lists are
#: made of (operation, resource, GPU lane, kernel launch).
CENSUS_REASONS, CENSUS_OPERATIONS, CENSUS_RESOURCES, CENSUS_LANES, CENSUS_LAUNCHES = range(5)


def census_query(d: Dialect) -> str:
    """One pass over the view ``bs_reasoned``: the rows per file and reason (``reason`` NULL:
    the valid ones), and the first valid span of each distinct key the code lists are made of,
    with its :data:`FIRST_COLUMNS`: ``census, file, reason, count, ord, *FIRST_COLUMNS``,
    ``census`` one of the ``CENSUS_*`` groups. One scan of the files for all five groupings
    (GROUPING SETS), where a query each would read them five times."""
    lane = f"clock IN ('{A.CLOCK_CUDA}', '{A.CLOCK_GPU}') AND device_ordinal IS NOT NULL"
    census = (
        f"CASE WHEN grouping(file) = 0 THEN {CENSUS_REASONS} WHEN grouping(name) = 0 THEN {CENSUS_OPERATIONS}"
        f" WHEN grouping(stream) = 0 THEN {CENSUS_LANES} WHEN grouping(resource) = 0 THEN {CENSUS_RESOURCES}"
        f" ELSE {CENSUS_LAUNCHES} END"
    )
    firsts = ", ".join(f"{d.at_min(c, 'ord')} AS {c}" for c in FIRST_COLUMNS)
    return f"""
        SELECT census, file, reason, n, ord, {", ".join(FIRST_COLUMNS)} FROM (
            SELECT {census} AS census, file, reason, count(*) AS n, min(ord) AS ord, {firsts},
                valid, lane, launch
            FROM (
                SELECT *, reason IS NULL AS valid, reason IS NULL AND {lane} AS lane,
                    reason IS NULL AND kind = '{A.SCOPE_KIND_KERNEL}' AS launch
                FROM bs_reasoned) r
            GROUP BY GROUPING SETS ((file, reason), (valid, kind, name, category, brick_name), (valid, resource),
                (lane, resource, device_ordinal, stream), (launch, kernel_grid, kernel_block, kernel_shared_mem_bytes))
        ) g
        WHERE census = {CENSUS_REASONS} OR (census IN ({CENSUS_OPERATIONS}, {CENSUS_RESOURCES}) AND valid)
            OR (census = {CENSUS_LANES} AND lane) OR (census = {CENSUS_LAUNCHES} AND launch)"""


def _dtype_bytes() -> str:
    """The bytes of an element of the row's dtype name (``DTYPE_BYTES``), NULL when unknown."""
    name = (
        "CASE WHEN lower(dtype) LIKE 'torch.%' THEN substr(lower(dtype), 7)"
        " WHEN lower(dtype) LIKE 'np.%' THEN substr(lower(dtype), 4) ELSE lower(dtype) END"
    )
    cases = " ".join(f"WHEN '{key}' THEN {size}" for key, size in DTYPE_BYTES.items())
    return f"CASE {name} {cases} END"


def coded_query(d: Dialect) -> str:
    """Every valid span as the analysis table's row before the overhead spans come off their
    parents' self time (:func:`overhead_query`): the columns of :data:`COLUMNS` plus
    ``duration``, ``comm`` and ``ord`` (the in-memory engine's row order), over the views
    ``bs_valid`` (the source rows that are not impossible, with ``ord`` and ``brick_name``)
    and the code tables ``bs_op_codes``, ``bs_rank_codes``, ``bs_lane_codes`` and
    ``bs_launch_codes``."""
    tiles = ", ".join(
        f"coalesce(s.tile_{level}_{what}, 0) AS tile_{level}_{what}"
        for level in A.TILE_LEVELS
        for what in ("count", "ns", "elements")
    )
    gpu_clock = f"s.clock IN ('{A.CLOCK_CUDA}', '{A.CLOCK_GPU}') AND s.device_ordinal IS NOT NULL"
    output_bytes = (
        f"CASE WHEN s.output_shape IS NULL OR s.dtype IS NULL THEN 0"
        f" ELSE coalesce({d.product('s.output_shape')} * ({_dtype_bytes().replace('dtype', 's.dtype')}), 0) END"
    )
    return f"""
        SELECT
            s.ord,
            o.op, o.kind_code AS kind, o.category_code AS category,
            s.start_ns AS start, s.end_ns AS "end",
            CASE WHEN o.kind_code = {KIND_BRICK} AND s.self_ns IS NOT NULL THEN s.self_ns
                ELSE s.end_ns - s.start_ns END AS self,
            CASE s.clock WHEN '{A.CLOCK_CUDA}' THEN {CLOCK_CUDA_CODE} WHEN '{A.CLOCK_GPU}' THEN {CLOCK_GPU_CODE}
                ELSE {CLOCK_HOST_CODE} END AS clock,
            CASE WHEN {gpu_clock} THEN l.device ELSE -1 END AS device,
            CASE WHEN {gpu_clock} THEN l.stream_code ELSE -1 END AS stream,
            coalesce(s.step, -1) AS step, coalesce(s.layer, -1) AS layer, r.rank_code AS rank,
            coalesce(s.thread_id, 0) AS thread, s.span_id, s.parent_span_id AS parent_id,
            coalesce(s.elements, 0) AS elements,
            coalesce(s.bytes, {output_bytes}) AS bytes,
            coalesce(CAST(s.flops AS DOUBLE), 0.0) AS flops, coalesce(s.tokens, 0) AS tokens,
            CASE WHEN o.kind_code = {KIND_KERNEL} THEN coalesce(k.launch, -1) ELSE -1 END AS launch,
            coalesce(s.kernel_source_hash, 0) AS source, coalesce(s.output_checksum, 0) AS checksum,
            {tiles},
            s.end_ns - s.start_ns AS duration, o.comm
        FROM bs_valid s
        JOIN bs_op_codes o ON {d.equal("o.kind_name", "s.kind")} AND o.name = s.name
            AND {d.equal("o.category_name", "s.category")} AND {d.equal("o.brick_name", "s.brick_name")}
        JOIN bs_rank_codes r ON {d.equal("r.resource", "s.resource")}
        LEFT JOIN bs_lane_codes l ON {d.equal("l.resource", "s.resource")}
            AND l.device_ordinal = s.device_ordinal AND {d.equal("l.stream", "s.stream")}
        LEFT JOIN bs_launch_codes k ON {d.equal("k.grid", "s.kernel_grid")}
            AND {d.equal("k.block", "s.kernel_block")} AND {d.equal("k.smem", "s.kernel_shared_mem_bytes")}"""


def overhead_query(coded: str) -> str:
    """What comes off each span's self time for the overhead spans under it: ``ord, ns`` over
    ``coded`` (a table or view of :func:`coded_query`'s rows). brickscope's own work is not its
    parent's (TableBuilder's ``_exclude_overhead``): each overhead span's interval clipped to a
    host-clock, non-brick parent's."""
    return f"""
        SELECT p.ord, sum(least(o."end", p."end") - greatest(o.start, p.start)) AS ns
        FROM {coded} o JOIN {coded} p ON p.span_id = o.parent_id
        WHERE o.kind = {KIND_OVERHEAD} AND p.kind <> {KIND_BRICK} AND p.clock = {CLOCK_HOST_CODE}
            AND least(o."end", p."end") - greatest(o.start, p.start) > 0
        GROUP BY p.ord"""


def spans_query(d: Dialect) -> str:
    """Every valid span as the analysis table's row: :func:`coded_query`'s, with the overhead
    spans' time taken off their parents' self time (never below 0), in one query."""
    columns = ", ".join(
        "CAST(greatest(0, c.self - coalesce(x.ns, 0)) AS BIGINT) AS self" if name == "self" else f'c."{name}"'
        for name in COLUMNS
    )
    return f"""
        WITH bs_coded AS ({coded_query(d)}), bs_deduct AS ({overhead_query("bs_coded")})
        SELECT c.ord, {columns}, c.duration, c.comm
        FROM bs_coded c LEFT JOIN bs_deduct x ON x.ord = c.ord"""


def unions_query(intervals: str) -> str:
    """Per group ``g`` of ``intervals`` (a query of ``g, s, e, w``; ``w`` 1 for work, 0 for a
    window): ``g``, the work intervals' count, the length of their union, and the length of the
    union of all its intervals; one sort of the group's intervals for both unions."""
    # in start order, each interval adds what it reaches past the running maximum of the ends
    # before it (of the work intervals before it, for the work's union); ends never precede starts
    before = "OVER (PARTITION BY g ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
    return f"""
        WITH iv AS ({intervals}),
        o AS (SELECT g, s, e, w, max(e) {before} AS reach, max(CASE WHEN w = 1 THEN e END) {before} AS work_reach
            FROM iv)
        SELECT g, sum(w),
            sum(CASE WHEN w = 1 THEN greatest(0, e - greatest(s, coalesce(work_reach, s))) ELSE 0 END),
            sum(greatest(0, e - greatest(s, coalesce(reach, s))))
        FROM o GROUP BY g"""
