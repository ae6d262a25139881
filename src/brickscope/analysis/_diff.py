# SPDX-License-Identifier: Apache-2.0
"""Comparing two runs: which operations got slower or faster, beyond noise.

For each operation (kind and name) in both runs, the per-instance self times of
the two runs are compared with the **Mann-Whitney U test** (normal approximation
with tie and continuity corrections, two-sided). A change is *significant* when
p < ``alpha`` (default 0.01) **and** the median (p50) moved by at least
``min_change_pct`` (default 1%) in the direction the test points to: the test
says the two distributions differ, the median says by how much. Rank-based, it
is not fooled by a few huge outliers, and it needs no assumption of normality.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from brickscope.analysis._stats import nearest_rank
from brickscope.analysis._table import KIND_BRICK, KIND_KERNEL, Table

ALPHA = 0.01
MIN_CHANGE_PCT = 1.0


@dataclass(frozen=True)
class OperationChange:
    """One operation in both runs: medians and totals of self time, the test, the verdict.

    .. versionadded:: 0.2.0
    """

    name: str
    kind: str
    base_count: int
    new_count: int
    base_p50_ns: int
    new_p50_ns: int
    p50_change_pct: float
    base_total_ns: int
    new_total_ns: int
    total_change_pct: float
    z: float
    p_value: float
    verdict: str  # "regression", "improvement" or "unchanged"


@dataclass(frozen=True)
class Comparison:
    """Every operation of both runs, by verdict."""

    base_sources: tuple[str, ...]
    new_sources: tuple[str, ...]
    alpha: float
    min_change_pct: float
    changes: tuple[OperationChange, ...]  # regressions (worst first), improvements, unchanged
    added: tuple[str, ...]  # operations only in the new run ("kind name")
    removed: tuple[str, ...]  # operations only in the base run
    schema: int = 1

    @property
    def regressions(self) -> tuple[OperationChange, ...]:
        return tuple(c for c in self.changes if c.verdict == "regression")

    @property
    def improvements(self) -> tuple[OperationChange, ...]:
        return tuple(c for c in self.changes if c.verdict == "improvement")


def compare(
    base: Table, new: Table, *, alpha: float = ALPHA, min_change_pct: float = MIN_CHANGE_PCT
) -> Comparison:
    """Per-operation changes from ``base`` to ``new`` (two tables of one backend)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    be = base.backend
    base_ops, new_ops = _instances(base), _instances(new)
    changes = []
    for key in sorted(base_ops.keys() & new_ops.keys()):
        before, after = base_ops[key], new_ops[key]
        n_before, n_after = be.size(before), be.size(after)
        p50_before = be.item(before, nearest_rank(n_before, 0.5))
        p50_after = be.item(after, nearest_rank(n_after, 0.5))
        total_before, total_after = _sum(be, before), _sum(be, after)
        z, p_value = be.rank_sum_test(after, before)
        p50_change = _pct(p50_before, p50_after)
        verdict = "unchanged"
        if p_value < alpha and abs(p50_change) >= min_change_pct and (z > 0) == (p50_change > 0):
            verdict = "regression" if p50_change > 0 else "improvement"
        changes.append(
            OperationChange(
                key[1],
                key[0],
                n_before,
                n_after,
                p50_before,
                p50_after,
                p50_change,
                total_before,
                total_after,
                _pct(total_before, total_after),
                z,
                p_value,
                verdict,
            )
        )
    order = {"regression": 0, "improvement": 1, "unchanged": 2}
    changes.sort(key=lambda c: (order[c.verdict], -abs(c.p50_change_pct), c.kind, c.name))
    return Comparison(
        tuple(base.sources),
        tuple(new.sources),
        alpha,
        min_change_pct,
        tuple(changes),
        added=tuple(f"{k} {n}" for k, n in sorted(new_ops.keys() - base_ops.keys())),
        removed=tuple(f"{k} {n}" for k, n in sorted(base_ops.keys() - new_ops.keys())),
    )


def _instances(table: Table) -> dict[tuple[str, str], Any]:
    """(kind, name) -> the self times of its instances, sorted."""
    be = table.backend
    work = table.select(be.mask_in(table["kind"], (KIND_BRICK, KIND_KERNEL)))
    groups = len(table.operations)
    ordered, offsets = be.sorted_within_groups(work["op"], groups, work["self"])
    parts: dict[tuple[str, str], list[Any]] = {}
    for code, op in enumerate(table.operations):
        if offsets[code + 1] > offsets[code]:
            parts.setdefault((op.kind, op.name), []).append(ordered[offsets[code] : offsets[code + 1]])
    out = {}
    for key, chunks in parts.items():  # one name under two categories: both halves, re-sorted
        out[key] = chunks[0] if len(chunks) == 1 else be.sort(be.concat(chunks, "int64"))
    return out


def _sum(be: Any, values: Any) -> int:
    return be.group_sum(be.full(be.size(values), 0, "int64"), 1, values)[0] if be.size(values) else 0


def _pct(before: float, after: float) -> float:
    if before == 0:
        return 0.0 if after == 0 else float("inf")
    return (after - before) / before * 100
