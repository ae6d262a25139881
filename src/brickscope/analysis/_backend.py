# SPDX-License-Identifier: Apache-2.0
"""The columnar engine's primitives, and the choice between numpy and pure Python.

Every figure of a report is defined once, in the analysis modules, in terms of
the few primitives below (grouped sums, sorting within groups, interval merging,
a rank-sum test...). Two backends implement them with the same semantics:
:mod:`._numpy_backend` (vectorised; needs the ``analysis`` extra) and
:class:`PythonBackend` (loops; always available, so ``session.report()`` works
on a core install). The test suite runs the engine against both.

Columns are opaque to the analyses: numpy arrays for one backend,
``array.array`` for the other. Dtypes are named ``"int64"``, ``"uint64"``,
``"float64"`` and ``"bool"``.

Example::

    backend = get_backend()            # numpy when installed, else pure Python
    col = backend.column([3, 1, 2], "int64")
"""

from __future__ import annotations

import array
import heapq
import os
from collections.abc import Sequence
from typing import Any

from brickscope.analysis._stats import mann_whitney

#: Environment variable forcing a backend: ``numpy`` or ``python``.
BRICKSCOPE_ANALYSIS_BACKEND = "BRICKSCOPE_ANALYSIS_BACKEND"

_TYPECODES = {"int64": "q", "uint64": "Q", "float64": "d", "bool": "b"}


def get_backend(name: str | None = None) -> Any:
    """The backend named ``name`` (``"numpy"`` or ``"python"``); default: numpy if importable.

    Raises:
        ValueError: an unknown name, or ``"numpy"`` without numpy installed.
    """
    name = name or os.environ.get(BRICKSCOPE_ANALYSIS_BACKEND, "").strip().lower() or None
    if name not in (None, "numpy", "python"):
        raise ValueError(f"brickscope: unknown analysis backend {name!r}; expected 'numpy' or 'python'")
    if name != "python":
        try:
            from brickscope.analysis._numpy_backend import NumpyBackend
        except ImportError as exc:
            if name == "numpy":
                raise ValueError(
                    f"brickscope: the numpy analysis backend needs numpy (pip install 'brickscope[analysis]'): {exc}"
                ) from None
        else:
            return NumpyBackend()
    return PythonBackend()


class PythonBackend:
    """The primitives in plain Python over ``array.array`` columns: no dependencies.

    Correct at any size, but per-row Python loops: about 1 µs per row and operation,
    fine for a live session's few hundred thousand spans, slow for 10M.
    """

    name = "python"

    # --- building columns -----------------------------------------------------------

    def column(self, values: Sequence[Any], dtype: str) -> Any:
        return array.array(_TYPECODES[dtype], values)

    def from_array(self, values: array.array, dtype: str, *, copy: bool) -> Any:
        """A column from an ``array.array`` of the dtype's typecode (shared unless ``copy``)."""
        return array.array(values.typecode, values) if copy else values

    def full(self, size: int, value: Any, dtype: str) -> Any:
        return array.array(_TYPECODES[dtype], [value]) * size

    def concat(self, chunks: list[Any], dtype: str) -> Any:
        out = array.array(_TYPECODES[dtype])
        for chunk in chunks:
            out.extend(chunk)
        return out

    def size(self, col: Any) -> int:
        return len(col)

    def item(self, col: Any, index: int) -> Any:
        return col[index]

    def to_list(self, col: Any) -> list[Any]:
        return col.tolist()

    # --- elementwise ----------------------------------------------------------------

    def subtract(self, a: Any, b: Any) -> Any:
        return array.array(a.typecode, [x - y for x, y in zip(a, b)])

    def absolute(self, col: Any) -> Any:
        return array.array(col.typecode, [abs(x) for x in col])

    def combine(self, a: Any, b: Any, b_count: int) -> Any:
        """One code per row for the pair (a, b): ``a * b_count + b``."""
        return array.array("q", [x * b_count + y for x, y in zip(a, b)])

    def lookup(self, table: Sequence[Any], codes: Any, dtype: str) -> Any:
        return array.array(_TYPECODES[dtype], [table[c] for c in codes])

    def mask_in(self, col: Any, allowed: Sequence[Any]) -> Any:
        wanted = set(allowed)
        return array.array("b", [v in wanted for v in col])

    def mask_range(self, col: Any, low: int | None, high: int | None) -> Any:
        low = -(1 << 63) if low is None else low
        high = 1 << 63 if high is None else high
        return array.array("b", [low <= v < high for v in col])

    def mask_equal(self, a: Any, b: Any) -> Any:
        return array.array("b", [x == y for x, y in zip(a, b)])

    def mask_and(self, a: Any, b: Any) -> Any:
        return array.array("b", [bool(x and y) for x, y in zip(a, b)])

    def mask_not(self, a: Any) -> Any:
        return array.array("b", [not x for x in a])

    def count_true(self, mask: Any) -> int:
        return sum(1 for x in mask if x)

    def compress(self, col: Any, mask: Any) -> Any:
        return array.array(col.typecode, [v for v, keep in zip(col, mask) if keep])

    def take(self, col: Any, indices: Sequence[int]) -> list[Any]:
        return [col[i] for i in indices]

    # --- grouping -------------------------------------------------------------------

    def group_count(self, codes: Any, groups: int) -> list[int]:
        counts = [0] * groups
        for code in codes:
            counts[code] += 1
        return counts

    def group_sum(self, codes: Any, groups: int, values: Any) -> list[Any]:
        sums: list[Any] = [0] * groups
        for code, value in zip(codes, values):
            sums[code] += value
        return sums

    def sum_by_key(self, keys: Any, values: Any) -> tuple[list[int], list[Any]]:
        """(distinct keys ascending, the sum of the values of each): grouped sums for keys too
        sparse to be group codes (a (operation, step) pair, say)."""
        sums: dict[int, Any] = {}
        for key, value in zip(keys, values):
            sums[key] = sums.get(key, 0) + value
        ordered = sorted(sums)
        return ordered, [sums[key] for key in ordered]

    def group_max(self, codes: Any, groups: int, values: Any) -> list[Any]:
        """Per-group maximum; None for an empty group."""
        out: list[Any] = [None] * groups
        for code, value in zip(codes, values):
            current = out[code]
            if current is None or value > current:
                out[code] = value
        return out

    def group_argmax(self, codes: Any, groups: int, values: Any) -> list[int]:
        """Per group, the row of the largest value (the first such row); -1 for an empty group."""
        best: list[int] = [-1] * groups
        for row, (code, value) in enumerate(zip(codes, values)):
            current = best[code]
            if current < 0 or value > values[current]:
                best[code] = row
        return best

    def sorted_within_groups(self, codes: Any, groups: int, values: Any) -> tuple[Any, list[int]]:
        """(values sorted by group then value, offsets): group g is ``sorted[offsets[g]:offsets[g+1]]``."""
        buckets: list[list[Any]] = [[] for _ in range(groups)]
        for code, value in zip(codes, values):
            buckets[code].append(value)
        flat = array.array(values.typecode)
        offsets = [0]
        for bucket in buckets:
            bucket.sort()
            flat.extend(bucket)
            offsets.append(len(flat))
        return flat, offsets

    # --- selecting rows -------------------------------------------------------------

    def sort(self, col: Any) -> Any:
        """The column's values in ascending order."""
        return array.array(col.typecode, sorted(col))

    def top_k(self, values: Any, k: int, ties: tuple[Any, ...] = ()) -> list[int]:
        """Rows of the k largest values, largest first; ties by the ``ties`` columns
        (ascending, in order), then by row."""
        keys = ((-v, *(column[row] for column in ties), row) for row, v in enumerate(values))
        return [key[-1] for key in heapq.nsmallest(k, keys)]

    def rows_above(self, codes: Any, values: Any, thresholds: Sequence[float]) -> list[int]:
        """Rows whose value exceeds its group's threshold (math.inf: never)."""
        return [row for row, (code, value) in enumerate(zip(codes, values)) if value > thresholds[code]]

    # --- intervals ------------------------------------------------------------------

    def merge_intervals(self, groups: Any, starts: Any, ends: Any) -> tuple[Any, Any, Any]:
        """Union of the intervals of each group: disjoint (group, start, end), sorted.
        Touching intervals merge; an interval with end < start counts as empty at start."""
        out_g, out_s, out_e = array.array("q"), array.array("q"), array.array("q")
        current_g = current_s = current_e = None
        for g, s, e in sorted(zip(groups, starts, ends)):
            e = max(s, e)
            if g == current_g and s <= current_e:
                if e > current_e:
                    current_e = e
                continue
            if current_g is not None:
                out_g.append(current_g)
                out_s.append(current_s)
                out_e.append(current_e)
            current_g, current_s, current_e = g, s, e
        if current_g is not None:
            out_g.append(current_g)
            out_s.append(current_s)
            out_e.append(current_e)
        return out_g, out_s, out_e

    # --- keys -----------------------------------------------------------------------

    def index_of(self, keys: Any, queries: Any) -> Any:
        """Row of each query in ``keys`` (the last row with that key), -1 when absent or 0."""
        where = {key: row for row, key in enumerate(keys) if key}
        return array.array("q", [where.get(q, -1) if q else -1 for q in queries])

    # --- statistics -----------------------------------------------------------------

    def rank_sum_test(self, a: Any, b: Any) -> tuple[float, float]:
        """Mann-Whitney U of a against b: (z, two-sided p); z > 0 when a tends larger."""
        n1, n2 = len(a), len(b)
        if not n1 or not n2:
            return 0.0, 1.0
        pooled = sorted([(v, 0) for v in a] + [(v, 1) for v in b])
        rank_sum = 0.0
        tie_term = 0.0
        i = 0
        while i < len(pooled):
            j = i
            while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
                j += 1
            average = (i + j) / 2 + 1
            ties = j - i + 1
            tie_term += ties**3 - ties
            rank_sum += average * sum(1 for k in range(i, j + 1) if pooled[k][1] == 0)
            i = j + 1
        return mann_whitney(n1, n2, rank_sum, tie_term)
