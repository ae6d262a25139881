# SPDX-License-Identifier: Apache-2.0
"""Comparing runs: which operations got slower or faster, beyond run-to-run noise.

The run is the unit of replication. Each run gives each operation (kind and name) one
number, its **run statistic**: the median over steps of the operation's self time in the
step (its instances in that step summed), or, for an operation never inside a step, the
median self time of its instances. With three runs or more in all, the statistics' logs
are compared by a **moderated t test** (:mod:`brickscope.analysis._runtest`): the change is
the ratio of geometric means, with a ``1 - alpha`` confidence interval, and the p-values of
all operations are adjusted by **Benjamini-Hochberg** (false discovery rate ``alpha``). A
change is significant when its adjusted p-value is at most ``alpha`` and it moved by at
least ``min_change_pct``.

With one run a side, run-to-run noise cannot be measured: the instances of each run are
compared by the **Mann-Whitney U test** (still adjusted across operations), which treats the
instances of one run as independent. It sees every difference between the two runs,
including the shift that identical code shows from one run to the next, so its verdicts say
"these two runs differ", not "the code changed"; it gives no interval.

Example::

    comparison = compare([load(p) for p in base_paths], [load(p) for p in new_paths])
    [c.name for c in comparison.above(5.0)]     # significant, interval entirely above +5%
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from brickscope.analysis._runtest import benjamini_hochberg, run_test
from brickscope.analysis._stats import nearest_rank
from brickscope.analysis._table import KIND_BRICK, KIND_KERNEL, Table

#: False discovery rate across operations, and one minus the intervals' confidence level.
ALPHA = 0.05
MIN_CHANGE_PCT = 1.0
#: :attr:`Comparison.method` values.
METHOD_RUNS = "moderated t on log run statistics"
METHOD_WITHIN_RUN = "Mann-Whitney U on instances (one run a side: run-to-run noise not measured)"
#: :attr:`OperationChange.statistic` values.
STEP_MEDIAN = "step median"
INSTANCE_MEDIAN = "instance median"
#: change %, interval low and high %, run spread %, t or z, df, p, q
_Result = tuple[float, "float | None", "float | None", "float | None", float, "float | None", float, float]


@dataclass(frozen=True)
class OperationSummary:
    """One operation in one run: its self-time figures.

    .. versionadded:: 0.3.0
    """

    #: median over steps of the self time the operation had in each step (None: never in a step)
    step_median_ns: int | None
    #: the instances' self times, sorted (a column of the run's backend)
    instances: Any
    total_ns: int


@dataclass(frozen=True)
class RunSummary:
    """One run's operations, by (kind, name): what :func:`compare_runs` needs of a run.

    .. versionadded:: 0.3.0
    """

    sources: tuple[str, ...]
    operations: dict[tuple[str, str], OperationSummary]
    backend: Any


@dataclass(frozen=True)
class OperationChange:
    """One operation in both sides: its figures, the change with its interval, the verdict.

    Counts, p50 and totals are of instances: counts and p50 over all runs of a side, totals
    the mean per run. ``change_pct`` is the change of the run statistic (new/base - 1, from
    geometric means over runs); ``ci_low_pct``/``ci_high_pct`` its interval and
    ``run_spread_pct`` the run-to-run noise (standard deviation of the log run statistic, in
    percent), None with one run a side. ``test_statistic`` is t (runs) or z (Mann-Whitney),
    ``df`` its degrees of freedom (None for z), ``q_value`` the Benjamini-Hochberg adjusted p.

    .. versionadded:: 0.2.0
    .. versionchanged:: 0.3.0 run-level change, interval and spread; adjusted p-values
    """

    name: str
    kind: str
    statistic: str  # STEP_MEDIAN or INSTANCE_MEDIAN
    base_count: int
    new_count: int
    base_p50_ns: int
    new_p50_ns: int
    p50_change_pct: float
    base_total_ns: int
    new_total_ns: int
    total_change_pct: float
    base_runs_ns: tuple[int, ...]
    new_runs_ns: tuple[int, ...]
    change_pct: float
    ci_low_pct: float | None
    ci_high_pct: float | None
    run_spread_pct: float | None
    test_statistic: float
    df: float | None
    p_value: float
    q_value: float
    verdict: str  # "regression", "improvement" or "unchanged"


@dataclass(frozen=True)
class Comparison:
    """Every operation of both sides, by verdict.

    .. versionadded:: 0.2.0
    .. versionchanged:: 0.3.0 several runs a side: ``base_runs``, ``new_runs``, ``method``,
       ``run_noise_measured``, ``untested``; schema 2
    """

    base_sources: tuple[str, ...]
    new_sources: tuple[str, ...]
    base_runs: int
    new_runs: int
    method: str  # METHOD_RUNS or METHOD_WITHIN_RUN
    run_noise_measured: bool
    alpha: float
    min_change_pct: float
    changes: tuple[OperationChange, ...]  # regressions (worst first), improvements, unchanged
    added: tuple[str, ...]  # operations only in the new side ("kind name")
    removed: tuple[str, ...]  # operations only in the base side
    untested: tuple[str, ...]  # "kind name: why" (in both sides but not comparable)
    schema: int = 2

    @property
    def regressions(self) -> tuple[OperationChange, ...]:
        return tuple(c for c in self.changes if c.verdict == "regression")

    @property
    def improvements(self) -> tuple[OperationChange, ...]:
        return tuple(c for c in self.changes if c.verdict == "improvement")

    def above(self, threshold_pct: float) -> tuple[OperationChange, ...]:
        """The regressions a gate at ``threshold_pct`` fails on, worst first.

        With runs compared, a significant regression whose whole interval lies above the
        threshold; with one run a side (no interval), one whose change exceeds it.
        """
        if self.run_noise_measured:
            return tuple(c for c in self.regressions if c.ci_low_pct is not None and c.ci_low_pct > threshold_pct)
        return tuple(c for c in self.regressions if c.change_pct > threshold_pct)


def compare(
    base: Table | Sequence[Table],
    new: Table | Sequence[Table],
    *,
    alpha: float = ALPHA,
    min_change_pct: float = MIN_CHANGE_PCT,
) -> Comparison:
    """Per-operation changes from ``base`` to ``new``: a table per run, or one table a side.

    .. versionchanged:: 0.3.0 a sequence of tables a side, one per run
    """
    sides = [[base] if isinstance(base, Table) else list(base), [new] if isinstance(new, Table) else list(new)]
    return compare_runs(
        [summarise(t) for t in sides[0]], [summarise(t) for t in sides[1]], alpha=alpha, min_change_pct=min_change_pct
    )


def summarise(table: Table) -> RunSummary:
    """One run's :class:`RunSummary` from its table (brick and kernel spans).

    .. versionadded:: 0.3.0
    """
    be = table.backend
    work = table.select(be.mask_in(table["kind"], (KIND_BRICK, KIND_KERNEL)))
    keys = [(op.kind, op.name) for op in table.operations]
    ordered, offsets = be.sorted_within_groups(work["op"], len(table.operations), work["self"])
    chunks: dict[tuple[str, str], list[Any]] = {}
    for code, key in enumerate(keys):
        if offsets[code + 1] > offsets[code]:
            chunks.setdefault(key, []).append(ordered[offsets[code] : offsets[code + 1]])
    in_steps = work.select(be.mask_range(work["step"], 0, None))
    step_sums: list[tuple[int, int, int]] = []
    if in_steps.rows:  # the self time of each (operation, step): one key per pair
        step_count = be.group_max(be.full(in_steps.rows, 0, "int64"), 1, in_steps["step"])[0] + 1
        pairs, sums = be.sum_by_key(be.combine(in_steps["op"], in_steps["step"], step_count), in_steps["self"])
        step_sums = [(pair // step_count, pair % step_count, total) for pair, total in zip(pairs, sums)]
    return summary_of(table, chunks, step_sums)


def summary_of(
    table: Table, chunks: dict[tuple[str, str], list[Any]], step_sums: Sequence[tuple[int, int, int]]
) -> RunSummary:
    """A run's summary from its instances' sorted self times by (kind, name) (one sorted column
    per op code of that name, in op code order) and the self time of each (op code, step)."""
    be = table.backend
    keys = [(op.kind, op.name) for op in table.operations]
    per_step: dict[tuple[str, str], dict[int, int]] = {}
    for op, step, total in step_sums:
        steps = per_step.setdefault(keys[op], {})  # one name, two categories: summed
        steps[step] = steps.get(step, 0) + total
    operations = {}
    for key, parts in chunks.items():  # one name under two categories: both halves, re-sorted
        instances = parts[0] if len(parts) == 1 else be.sort(be.concat(parts, "int64"))
        totals = per_step.get(key)
        operations[key] = summarise_operation(instances, None if totals is None else list(totals.values()), be)
    return RunSummary(tuple(table.sources), operations, be)


def summarise_operation(instances: Any, step_totals: Sequence[int] | None, backend: Any) -> OperationSummary:
    """One operation in one run, from its instances' self times (sorted, a column of ``backend``)
    and its self time in each step it ran in (None or empty: it never ran inside a step).

    .. versionadded:: 0.3.0
    """
    step_median = _median(sorted(step_totals)) if step_totals else None
    return OperationSummary(step_median, instances, _sum(backend, instances))


def compare_runs(
    base: Sequence[RunSummary],
    new: Sequence[RunSummary],
    *,
    alpha: float = ALPHA,
    min_change_pct: float = MIN_CHANGE_PCT,
) -> Comparison:
    """Per-operation changes from the ``base`` runs to the ``new`` runs (at least one each).

    .. versionadded:: 0.3.0
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not base or not new:
        raise ValueError("compare_runs needs at least one run a side")
    runs_measured = len(base) + len(new) >= 3
    base_keys = set().union(*(run.operations for run in base))
    new_keys = set().union(*(run.operations for run in new))
    untested: list[str] = []
    statistics: dict[tuple[str, str], tuple[str, list[int], list[int]]] = {}
    for key in sorted(base_keys & new_keys):
        missing = sum(key not in run.operations for run in (*base, *new))
        if missing:
            untested.append(f"{key[0]} {key[1]}: not in {missing} of the {len(base) + len(new)} runs")
            continue
        entries = [run.operations[key] for run in (*base, *new)]
        step_medians = [entry.step_median_ns for entry in entries]
        by_step = None not in step_medians
        values = [
            median if median is not None and by_step else _median(entry.instances, base[0].backend)
            for entry, median in zip(entries, step_medians)
        ]
        if runs_measured and min(values) <= 0:
            untested.append(f"{key[0]} {key[1]}: no self time in a run")
            continue
        statistics[key] = (STEP_MEDIAN if by_step else INSTANCE_MEDIAN, values[: len(base)], values[len(base) :])
    if runs_measured:
        tests = run_test({key: (v[1], v[2]) for key, v in statistics.items()}, alpha)
        results: dict[Any, _Result] = {
            key: (t.change_pct, t.ci_low_pct, t.ci_high_pct, t.run_spread_pct, t.t, t.df, t.p_value, t.q_value)
            for key, t in tests.items()
        }
    else:
        results = _within_run(base[0], new[0], statistics)
    changes = []
    for key, (statistic, base_values, new_values) in statistics.items():
        change, test, q = results[key][0], results[key][4], results[key][7]
        verdict = "unchanged"
        if q <= alpha and abs(change) >= min_change_pct and (test > 0) == (change > 0):
            verdict = "regression" if change > 0 else "improvement"
        changes.append(_change(key, statistic, base, new, base_values, new_values, results[key], verdict))
    order = {"regression": 0, "improvement": 1, "unchanged": 2}
    changes.sort(key=lambda c: (order[c.verdict], -abs(c.change_pct), c.kind, c.name))
    return Comparison(
        tuple(s for run in base for s in run.sources),
        tuple(s for run in new for s in run.sources),
        len(base),
        len(new),
        METHOD_RUNS if runs_measured else METHOD_WITHIN_RUN,
        runs_measured,
        alpha,
        min_change_pct,
        tuple(changes),
        added=tuple(_label(k) for k in sorted(new_keys - base_keys)),
        removed=tuple(_label(k) for k in sorted(base_keys - new_keys)),
        untested=tuple(untested),
    )


def _within_run(base: RunSummary, new: RunSummary, statistics: dict[Any, Any]) -> dict[Any, _Result]:
    """One run a side: Mann-Whitney U on the instances, adjusted across operations; no interval."""
    be = base.backend
    tests = {key: be.rank_sum_test(new.operations[key].instances, base.operations[key].instances) for key in statistics}
    q_values = benjamini_hochberg([p for _, p in tests.values()])
    return {
        key: (_pct(v[1][0], v[2][0]), None, None, None, z, None, p, q)
        for (key, v), (z, p), q in zip(statistics.items(), tests.values(), q_values)
    }


def _change(
    key: tuple[str, str],
    statistic: str,
    base: Sequence[RunSummary],
    new: Sequence[RunSummary],
    base_values: list[int],
    new_values: list[int],
    result: _Result,
    verdict: str,
) -> OperationChange:
    change, low, high, spread, test, df, p, q = result
    be = base[0].backend
    sides = []
    for runs in (base, new):
        entries = [run.operations[key] for run in runs]
        pooled = entries[0].instances
        if len(entries) > 1:
            pooled = be.sort(be.concat([e.instances for e in entries], "int64"))
        sides.append((be.size(pooled), _median(pooled, be), round(sum(e.total_ns for e in entries) / len(entries))))
    (n_base, p50_base, total_base), (n_new, p50_new, total_new) = sides
    return OperationChange(
        key[1],
        key[0],
        statistic,
        n_base,
        n_new,
        p50_base,
        p50_new,
        _pct(p50_base, p50_new),
        total_base,
        total_new,
        _pct(total_base, total_new),
        tuple(base_values),
        tuple(new_values),
        change,
        low,
        high,
        spread,
        test,
        df,
        p,
        q,
        verdict,
    )


def _median(values: Any, be: Any = None) -> int:
    """The nearest-rank median of sorted values (a list, or a backend column with ``be``)."""
    if be is None:
        return int(values[nearest_rank(len(values), 0.5)])
    return int(be.item(values, nearest_rank(be.size(values), 0.5)))


def _label(key: tuple[str, str]) -> str:
    return f"{key[0]} {key[1]}"


def _sum(be: Any, values: Any) -> int:
    return int(be.group_sum(be.full(be.size(values), 0, "int64"), 1, values)[0]) if be.size(values) else 0


def _pct(before: float, after: float) -> float:
    if before == 0:
        return 0.0 if after == 0 else math.inf
    return (after - before) / before * 100
