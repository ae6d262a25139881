# SPDX-License-Identifier: Apache-2.0
"""brickscope diff: per-operation medians and totals, Mann-Whitney U on per-instance self times,
only significant changes listed, exit status 1 above --fail-above."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
from analysis_synthetic import _resource, span, write_otlp_json

from brickscope.analysis import compare, get_backend
from brickscope.analysis._table import TableBuilder
from brickscope.cli import main

BASE = {
    "gemm": range(100, 120),  # 20 instances, us
    "ffn": range(200, 220),
    "rms_norm": range(50, 70),
    "noisy": range(100, 120),
    "dropout": range(10, 13),
}
NEW = {
    "gemm": range(130, 150),  # every instance slower: a regression
    "ffn": range(150, 170),  # every instance faster: an improvement
    "rms_norm": range(50, 70),  # identical
    "noisy": range(102, 122),  # median +1.8%, but the samples overlap: noise
    "rope": range(5, 8),
}


def _spans(durations: dict[str, range]) -> list:
    spans, start, span_id = [], 0, 1
    for name, values in durations.items():
        for value in values:
            spans.append(span(span_id, name, "brick", start, start + value, _resource(0), category="x"))
            start += value
            span_id += 1
    return spans


def _table(durations, backend):
    builder = TableBuilder(get_backend(backend))
    builder.add_all(_spans(durations))
    return builder.build()


def _mann_whitney(a, b):
    """By hand: U counts pairs where the new value is larger (ties half); normal approximation
    with continuity correction and the tie correction sum(t^3 - t) over equal values."""
    u = sum((x > y) + 0.5 * (x == y) for x in a for y in b)
    n1, n2 = len(a), len(b)
    n = n1 + n2
    ties = sum(t**3 - t for t in Counter([*a, *b]).values())
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1))))
    delta = u - n1 * n2 / 2
    z = (delta - math.copysign(0.5, delta)) / sigma if delta else 0.0
    return z, math.erfc(abs(z) / math.sqrt(2))


class TestCompare:
    def test_verdicts_medians_totals_and_p_values(self, backend):
        """gemm regresses (p50 109 -> 139 us), ffn improves (209 -> 159), rms_norm and noisy do not."""
        comparison = compare(_table(BASE, backend), _table(NEW, backend))
        by_name = {c.name: c for c in comparison.changes}
        gemm = by_name["gemm"]
        assert (gemm.verdict, gemm.base_p50_ns, gemm.new_p50_ns) == ("regression", 109_000, 139_000)
        assert gemm.p50_change_pct == pytest.approx(30 / 109 * 100)
        assert (gemm.base_total_ns, gemm.new_total_ns) == (
            sum(range(100, 120)) * 1000,
            sum(range(130, 150)) * 1000,
        )
        z, p = _mann_whitney(NEW["gemm"], BASE["gemm"])
        assert (gemm.z, gemm.p_value) == (pytest.approx(z), pytest.approx(p))
        assert by_name["ffn"].verdict == "improvement" and by_name["ffn"].p50_change_pct == pytest.approx(
            -50 / 209 * 100
        )
        assert by_name["rms_norm"].verdict == "unchanged" and by_name["rms_norm"].p_value == pytest.approx(1.0)
        noisy = by_name["noisy"]
        assert noisy.verdict == "unchanged" and noisy.p50_change_pct == pytest.approx(2 / 109 * 100)
        assert (
            noisy.p_value == pytest.approx(_mann_whitney(NEW["noisy"], BASE["noisy"])[1]) and noisy.p_value > 0.01
        )
        assert [c.name for c in comparison.regressions] == ["gemm"]
        assert [c.name for c in comparison.improvements] == ["ffn"]
        assert (comparison.added, comparison.removed) == (("brick rope",), ("brick dropout",))

    def test_ties_use_the_tie_correction(self, backend):
        """Equal samples with ties everywhere: z = 0, p = 1; a constant shift of tied values is significant."""
        same = {"k": [5] * 10 + [6] * 10}
        assert compare(_table(same, backend), _table(same, backend)).changes[0].p_value == pytest.approx(1.0)
        # base: ten 5s, ten 6s; new: ten 6s, ten 7s. Ranks with ties averaged, by hand:
        # 5 x10 -> 5.5, 6 x20 -> 20.5, 7 x10 -> 35.5; new rank sum = 10*20.5 + 10*35.5 = 560
        # U = 560 - 20*21/2 = 350; ties: 2 blocks of 10 and one of 20: sum t^3 - t = 2*990 + 7980
        change = compare(_table(same, backend), _table({"k": [6] * 10 + [7] * 10}, backend)).changes[0]
        sigma = math.sqrt(20 * 20 / 12 * (41 - (2 * 990 + 7980) / (40 * 39)))
        z = (350 - 200 - 0.5) / sigma
        assert change.z == pytest.approx(z) and change.p_value == pytest.approx(math.erfc(z / math.sqrt(2)))


class TestDiffCommand:
    @pytest.fixture(name="runs")
    def _runs(self, tmp_path):
        return write_otlp_json(tmp_path / "base.jsonl", _spans(BASE)), write_otlp_json(
            tmp_path / "new.jsonl", _spans(NEW)
        )

    def test_fail_above_guards_ci(self, runs, capsys):
        """+27.5% on gemm: --fail-above 20 exits 1 naming it; --fail-above 30 exits 0."""
        base, new = (str(p) for p in runs)
        assert main(["diff", base, new, "--fail-above", "20"]) == 1
        captured = capsys.readouterr()
        assert "Regressions (1)" in captured.out and "gemm" in captured.out
        assert "regression(s) above 20%: gemm +27.5%" in captured.err
        assert main(["diff", base, new, "--fail-above", "30"]) == 0

    def test_json(self, runs, capsys):
        """JSON lists every operation with its verdict, schema 1."""
        assert main(["diff", *(str(p) for p in runs), "--format", "json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["schema"] == 1 and data["alpha"] == 0.01
        verdicts = {c["name"]: c["verdict"] for c in data["changes"]}
        assert verdicts == {
            "gemm": "regression",
            "ffn": "improvement",
            "rms_norm": "unchanged",
            "noisy": "unchanged",
        }

    def test_bad_input(self, runs, tmp_path, capsys):
        """A missing run: one line naming it, exit 1, nothing on stdout."""
        assert main(["diff", str(runs[0]), str(tmp_path / "nope.jsonl")]) == 1
        captured = capsys.readouterr()
        assert captured.out == "" and "nope.jsonl: no such file" in captured.err
