# SPDX-License-Identifier: Apache-2.0
"""The two backends' primitives against definitions written out in plain Python, on random data."""

from __future__ import annotations

import math

from hypothesis import given, settings, strategies as st

from brickscope.analysis import get_backend
from brickscope.analysis._stats import nearest_rank

BACKENDS = [get_backend("numpy"), get_backend("python")]
rows = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 10_000), st.integers(0, 3_000)), max_size=60)


def _columns(be, data):
    groups = be.column([g for g, _, _ in data], "int64")
    starts = be.column([s for _, s, _ in data], "int64")
    ends = be.column([s + d for _, s, d in data], "int64")
    return groups, starts, ends


@settings(max_examples=150, deadline=None)
@given(rows)
def test_percentiles_are_exact_nearest_rank(data):
    """Sorted per group on both backends; the nearest-rank p50/p90/p99 is the smallest value
    with at least p of the values at or below it (the definition, checked by counting)."""
    for be in BACKENDS:
        groups, _, values = _columns(be, [(g, 0, d) for g, _, d in data])
        ordered, offsets = be.sorted_within_groups(groups, 5, values)
        for g in range(5):
            expected = sorted(d for gg, _, d in data if gg == g)
            got = be.to_list(ordered)[offsets[g] : offsets[g + 1]]
            assert got == expected
            for p in (0.5, 0.9, 0.99):
                if expected:
                    smallest = min(v for v in expected if sum(x <= v for x in expected) >= p * len(expected))
                    assert got[nearest_rank(len(got), p)] == smallest


@settings(max_examples=150, deadline=None)
@given(rows)
def test_union_length_equals_covered_points(data):
    """Merged intervals per group cover exactly the integer points some interval covers."""
    for be in BACKENDS:
        groups, starts, ends = _columns(be, data)
        merged = be.merge_intervals(groups, starts, ends)
        lengths = be.group_sum(merged[0], 5, be.subtract(merged[2], merged[1])) if data else [0] * 5
        for g in range(5):
            covered = set()
            for gg, s, d in data:
                if gg == g:
                    covered.update(range(s, s + d))
            assert lengths[g] == len(covered)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1 << 40), st.integers(-(1 << 55), 1 << 55)), max_size=60))
def test_sum_by_key_is_exact(pairs):
    """Distinct keys ascending with the exact integer sum of each key's values (sums past 2**53 included)."""
    expected: dict[int, int] = {}
    for key, value in pairs:
        expected[key] = expected.get(key, 0) + value
    for be in BACKENDS:
        keys, sums = be.sum_by_key(be.column([k for k, _ in pairs], "int64"), be.column([v for _, v in pairs], "int64"))
        assert (keys, sums) == (sorted(expected), [expected[k] for k in sorted(expected)])


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=40), st.lists(st.integers(0, 50), min_size=1, max_size=40)
)
def test_rank_sum_test_agrees(a, b):
    """Both backends give the same z and p (numpy's ranks against the Python loop)."""
    results = [be.rank_sum_test(be.column(a, "int64"), be.column(b, "int64")) for be in BACKENDS]
    assert math.isclose(results[0][0], results[1][0], abs_tol=1e-9)
    assert math.isclose(results[0][1], results[1][1], abs_tol=1e-9)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 20), max_size=50), st.integers(1, 8))
def test_top_k_ties_by_the_tie_column(values, k):
    """The k largest, largest first, equal values by the tie column then row: both backends alike."""
    ties = [(v * 7) % 5 for v in values]
    expected = sorted(range(len(values)), key=lambda r: (-values[r], ties[r], r))[:k]
    for be in BACKENDS:
        assert be.top_k(be.column(values, "int64"), k, (be.column(ties, "int64"),)) == expected


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["gemm", "all_reduce", "rms_norm"]),
            st.integers(0, 1),  # rank (= device)
            st.sampled_from([7, 9]),  # stream
            st.integers(0, 3),  # step
            st.integers(0, 2_000),  # start, us
            st.integers(0, 500),  # duration, us
        ),
        min_size=1,
        max_size=40,
    )
)
def test_both_backends_give_the_same_report(bricks):
    """Random GPU traces (two ranks, two streams, overlapping work): every figure of every section
    is the same whichever backend computes it."""
    from analysis_synthetic import _resource, span

    from brickscope.analysis import analyse, to_json
    from brickscope.analysis._table import TableBuilder

    resources = [_resource(0), _resource(1)]
    spans = [
        span(i + 1, name, "brick", start, start + duration, resources[rank], device=rank, stream=stream,
             step=step, category="communication" if name == "all_reduce" else "x")
        for i, (name, rank, stream, step, start, duration) in enumerate(bricks)
    ]  # fmt: skip
    reports = []
    for be in BACKENDS:
        builder = TableBuilder(be)
        builder.add_all(spans)
        reports.append(to_json(analyse(builder.build(), top=5)))
    assert reports[0] == reports[1]
