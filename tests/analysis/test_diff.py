# SPDX-License-Identifier: Apache-2.0
"""brickscope diff: with several runs a side, a moderated t on the log of each operation's run
statistic, Benjamini-Hochberg across operations and the change's interval; with one run a side,
Mann-Whitney U on per-instance self times and a plain statement that run-to-run noise was not
measured; exit status 1 when a regression's interval lies above --fail-above."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest
from analysis_synthetic import _resource, span, write_otlp_json

from brickscope.analysis import compare, get_backend
from brickscope.analysis._diff import INSTANCE_MEDIAN, METHOD_RUNS, METHOD_WITHIN_RUN, STEP_MEDIAN, summarise
from brickscope.analysis._runtest import benjamini_hochberg, run_test, squeeze_variances, t_critical, t_two_sided_p
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


class TestCompareOneRunASide:
    def test_verdicts_medians_totals_and_p_values(self, backend):
        """gemm regresses (p50 109 -> 139 us), ffn improves (209 -> 159), rms_norm and noisy do not."""
        comparison = compare(_table(BASE, backend), _table(NEW, backend))
        assert (comparison.method, comparison.run_noise_measured) == (METHOD_WITHIN_RUN, False)
        assert (comparison.base_runs, comparison.new_runs) == (1, 1)
        by_name = {c.name: c for c in comparison.changes}
        gemm = by_name["gemm"]
        assert (gemm.verdict, gemm.base_p50_ns, gemm.new_p50_ns) == ("regression", 109_000, 139_000)
        assert gemm.p50_change_pct == pytest.approx(30 / 109 * 100)
        # no steps: the run statistic is the instance median, so the change is the p50's
        assert (gemm.statistic, gemm.base_runs_ns, gemm.new_runs_ns) == (INSTANCE_MEDIAN, (109_000,), (139_000,))
        assert gemm.change_pct == pytest.approx(30 / 109 * 100)
        assert (gemm.ci_low_pct, gemm.ci_high_pct, gemm.run_spread_pct) == (None, None, None)
        assert (gemm.base_total_ns, gemm.new_total_ns) == (
            sum(range(100, 120)) * 1000,
            sum(range(130, 150)) * 1000,
        )
        z, p = _mann_whitney(NEW["gemm"], BASE["gemm"])
        assert (gemm.test_statistic, gemm.p_value) == (pytest.approx(z), pytest.approx(p))
        # Benjamini-Hochberg over the four operations: gemm and ffn share the smallest p
        # (mirror images), so both get 4 p / 2; noisy 4 p / 3; rms_norm p = 1 stays 1.
        assert gemm.q_value == pytest.approx(4 * p / 2)
        noisy_p = _mann_whitney(NEW["noisy"], BASE["noisy"])[1]
        assert by_name["noisy"].q_value == pytest.approx(min(1.0, 4 * noisy_p / 3))
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
        assert change.test_statistic == pytest.approx(z)
        assert change.p_value == pytest.approx(math.erfc(z / math.sqrt(2)))


class TestBenjaminiHochberg:
    def test_adjusted_p_values_by_hand(self):
        """Sorted 0.01, 0.03, 0.04, 0.2 of m = 4: m p / rank = 0.04, 0.06, 0.0533, 0.2, then the running
        minimum from the largest down: 0.04, 0.0533, 0.0533, 0.2 (returned in the input's order)."""
        assert benjamini_hochberg([0.01, 0.04, 0.03, 0.2]) == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, 0.2])

    def test_step_up_keeps_a_p_value_whose_own_bound_fails(self):
        """0.02, 0.03, 0.045: 3 p / rank = 0.06, 0.045, 0.045; step-up rejects all three at 0.05
        although 0.02 alone would need 0.05 / 3 (Bonferroni would keep none)."""
        assert benjamini_hochberg([0.02, 0.03, 0.045]) == pytest.approx([0.045, 0.045, 0.045])
        assert benjamini_hochberg([]) == []


class TestRunTest:
    def test_student_t_table_values(self):
        """Two-sided 5 % critical values of Student's t (any table): df 1: 12.706, 2: 4.303, 4: 2.776, 30: 2.042."""
        for df, value in ((1, 12.706), (2, 4.303), (4, 2.776), (30, 2.042)):
            assert t_critical(0.05, df) == pytest.approx(value, abs=5e-4)
        assert t_two_sided_p(2.776445, 4) == pytest.approx(0.05, abs=1e-6)
        assert t_two_sided_p(0.0, 3) == pytest.approx(1.0)

    def test_interval_on_a_tiny_example(self):
        """Three runs a side whose logs are ln 100 + (-0.02, 0, 0.02) and 0.1 more: the change is
        e^0.1 - 1 = 10.517 %; pooled s^2 = 2 (0.0004 + 0.0004) / 4 = 0.0004, se = 0.02 sqrt(2/3) =
        0.016330, t = 6.1237 on 4 df (one operation: nothing to pool), p = 0.0036; the interval is
        e^(0.1 -+ 2.776445 se) - 1 = +5.618 % .. +15.643 %."""
        base = [100 * math.exp(x) for x in (-0.02, 0.0, 0.02)]
        new = [v * math.exp(0.1) for v in base]
        result = run_test({"gemm": (base, new)}, alpha=0.05)["gemm"]
        assert result.change_pct == pytest.approx(10.517, abs=1e-3)
        assert (result.df, result.t) == (4.0, pytest.approx(6.1237, abs=1e-4))
        assert result.p_value == pytest.approx(0.0036022, abs=1e-6) and result.q_value == result.p_value
        assert (result.ci_low_pct, result.ci_high_pct) == (
            pytest.approx(5.618, abs=1e-3),
            pytest.approx(15.643, abs=1e-3),
        )
        assert result.run_spread_pct == pytest.approx(2.0)

    def test_agreeing_variances_are_pooled(self):
        """Operations with one and the same run-to-run variance borrow each other's degrees of freedom:
        three of them on 4 df each are tested with the pooled variance on 12 df."""
        posterior, df = squeeze_variances([0.0004, 0.0004, 0.0004], 4)
        assert (posterior, df) == (pytest.approx([0.0004] * 3), 12.0)

    def test_spread_variances_are_shrunk_toward_each_other(self):
        """Variances far apart are each pulled toward the others, never past them: every posterior is
        a weighted mean of its own and a common prior, so they keep their order, stay within the
        original range, spread less, and rest on more than their own 4 df (at most all 20)."""
        variances = [1e-4, 2e-4, 4e-4, 9e-4, 30e-4]
        posterior, df = squeeze_variances(variances, 4)
        assert 4 < df <= 20
        assert posterior == sorted(posterior) and 1e-4 < posterior[0] and posterior[-1] < 30e-4
        assert posterior[-1] / posterior[0] < 30e-4 / 1e-4

    def test_refuses_what_it_cannot_test(self):
        """Two runs in all, or a zero statistic (no log), are refused rather than turned into numbers."""
        with pytest.raises(ValueError, match="three runs"):
            run_test({"k": ([1.0], [2.0])}, alpha=0.05)
        with pytest.raises(ValueError, match="positive"):
            run_test({"k": ([1.0, 0.0], [2.0])}, alpha=0.05)


def _program(rng, slower: dict[str, float], steps: int = 30) -> dict[int, list]:
    """One run of a small program on two ranks: three bricks twice per step, a run shift per
    operation (sigma 2 %), a step factor (3 %), instance noise (5 %), one instance in 100 stalled 10x."""
    shifts = {name: rng.normal(0, 0.02) for name in ("gemm", "attention", "norm")}
    ranks: dict[int, list] = {}
    span_id = 1
    for rank in (0, 1):
        spans, start = [], 0
        for step in range(steps):
            factor = rng.normal(0, 0.03)
            for name, micros in (("gemm", 300), ("attention", 500), ("norm", 100)):
                for _ in range(2):
                    value = micros * slower.get(name, 1.0) * math.exp(shifts[name] + factor + rng.normal(0, 0.05))
                    value *= 10 if rng.random() < 0.01 else 1
                    end = start + round(value)
                    spans.append(span(span_id, name, "brick", start, end, _resource(rank), step=step, category="x"))
                    start = end
                    span_id += 1
        ranks[rank] = spans
    return ranks


def _write_runs(directory, rng, count: int, slower: dict[str, float]) -> list[str]:
    """``count`` runs, each a directory holding one trace file per rank."""
    runs = []
    for _ in range(count):
        run = directory / f"run{len(list(directory.iterdir())) if directory.exists() else 0}"
        run.mkdir(parents=True)
        for rank, spans in _program(rng, slower).items():
            write_otlp_json(run / f"rank{rank}.jsonl", spans)
        runs.append(str(run))
    return runs


class TestCompareRuns:
    def test_step_median_is_the_run_statistic(self, backend):
        """Per run, an operation's statistic is the median over steps of its self time in the step:
        steps of 10+20, 30+40 and 50+60 us give 70 us; the change and the interval come from runs."""
        def run(steps):
            spans, start, span_id = [], 0, 1
            for step, values in enumerate(steps):
                for value in values:
                    end = start + value
                    spans.append(span(span_id, "k", "brick", start, end, _resource(0), step=step, category="x"))
                    start = end
                    span_id += 1
            builder = TableBuilder(get_backend(backend))
            builder.add_all(spans)
            return builder.build()

        base = [run(((10, 20), (30, 40), (50, 60))), run(((10, 20), (31, 40), (50, 60)))]  # 70, 71 us
        new = [run(((33, 44), (10, 20), (50, 60))), run(((34, 44), (10, 20), (50, 60)))]  # 77, 78 us
        comparison = compare(base, new)
        (change,) = comparison.changes
        assert (comparison.method, comparison.run_noise_measured) == (METHOD_RUNS, True)
        assert (change.statistic, change.base_runs_ns, change.new_runs_ns) == (
            STEP_MEDIAN,
            (70_000, 71_000),
            (77_000, 78_000),
        )
        assert (change.base_count, change.base_p50_ns, change.base_total_ns) == (12, 31_000, 210_500)
        logs = [math.log(v) for v in (70, 71, 77, 78)]
        assert change.change_pct == pytest.approx((math.exp((logs[2] + logs[3] - logs[0] - logs[1]) / 2) - 1) * 100)
        assert change.ci_low_pct < change.change_pct < change.ci_high_pct
        assert change.df == 2.0

    def test_one_name_under_two_categories_is_one_operation(self, backend):
        """Instances of k under categories x and y in one step are the operation's self time in that
        step together: steps of 10 (x) + 20 (y), 30 + 40, 50 + 60 us give a step median of 70 us."""
        spans, start = [], 0
        for step, values in enumerate(((10, 20), (30, 40), (50, 60))):
            for value, category in zip(values, ("x", "y")):
                spans.append(
                    span(len(spans) + 1, "k", "brick", start, start + value, _resource(0), step=step, category=category)
                )
                start += value
        builder = TableBuilder(get_backend(backend))
        builder.add_all(spans)
        summary = summarise(builder.build())
        (operation,) = summary.operations.values()
        assert operation.step_median_ns == 70_000 and operation.total_ns == 210_000

    def test_generated_aa_runs_do_not_fire_the_gate(self, tmp_path, capsys):
        """Three runs against three of the same program (seed 7): no regression above 5 %, exit 0;
        the same two sides one run each would be judged by the within-run test, and are refused."""
        rng = np.random.default_rng(7)
        base = _write_runs(tmp_path / "base", rng, 3, {})
        new = _write_runs(tmp_path / "new", rng, 3, {})
        assert main(["diff", "--base", *base, "--new", *new, "--fail-above", "5", "--format", "json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert (data["base_runs"], data["new_runs"], data["method"]) == (3, 3, METHOD_RUNS)
        statistics = {c["name"]: c["statistic"] for c in data["changes"]}
        assert statistics == dict.fromkeys(("gemm", "attention", "norm"), STEP_MEDIAN)
        assert all(c["ci_high_pct"] < 5 for c in data["changes"])
        assert main(["diff", base[0], new[0], "--fail-above", "5"]) == 2

    def test_generated_twenty_percent_regression_fires_the_gate(self, tmp_path, capsys):
        """attention 20 % slower in the new runs (seed 7): a significant regression whose interval
        lies above 5 %, named on stderr, exit 1; gemm and norm are not called regressions."""
        rng = np.random.default_rng(7)
        base = _write_runs(tmp_path / "base", rng, 3, {})
        new = _write_runs(tmp_path / "new", rng, 3, {"attention": 1.2})
        assert main(["diff", "--base", *base, "--new", *new, "--fail-above", "5"]) == 1
        captured = capsys.readouterr()
        assert "3 runs" in captured.out and "Regressions (1)" in captured.out
        assert captured.err.startswith("brickscope diff: 1 regression(s) above 5%: attention +")
        assert main(["diff", "--base", *base, "--new", *new, "--format", "json"]) == 0
        data = {c["name"]: c for c in json.loads(capsys.readouterr().out)["changes"]}
        assert data["attention"]["verdict"] == "regression" and data["attention"]["ci_low_pct"] > 5
        assert data["attention"]["ci_low_pct"] < 20 < data["attention"]["ci_high_pct"]
        assert data["gemm"]["verdict"] != "regression" and data["norm"]["verdict"] != "regression"


class TestDiffCommand:
    @pytest.fixture(name="runs")
    def _runs(self, tmp_path):
        return write_otlp_json(tmp_path / "base.jsonl", _spans(BASE)), write_otlp_json(
            tmp_path / "new.jsonl", _spans(NEW)
        )

    def test_fail_above_with_one_run_a_side(self, runs, capsys):
        """One run a side: --fail-above is refused (exit 2, naming --allow-single-run); with it, +27.5 %
        on gemm exits 1 above 20 and 0 above 30."""
        base, new = (str(p) for p in runs)
        assert main(["diff", base, new, "--fail-above", "20"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--allow-single-run" in err
        assert main(["diff", base, new, "--fail-above", "20", "--allow-single-run"]) == 1
        captured = capsys.readouterr()
        assert "Regressions (1)" in captured.out and "gemm" in captured.out
        assert "run-to-run noise was not measured" in captured.out
        assert "regression(s) above 20%: gemm +27.5%" in captured.err
        assert main(["diff", base, new, "--fail-above", "30", "--allow-single-run"]) == 0

    def test_json(self, runs, capsys):
        """JSON lists every operation with its verdict and interval (null: one run a side), schema 2."""
        assert main(["diff", *(str(p) for p in runs), "--format", "json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["schema"] == 2 and data["alpha"] == 0.05
        assert (data["base_runs"], data["new_runs"], data["run_noise_measured"]) == (1, 1, False)
        assert data["method"] == METHOD_WITHIN_RUN
        verdicts = {c["name"]: c["verdict"] for c in data["changes"]}
        assert verdicts == {
            "gemm": "regression",
            "ffn": "improvement",
            "rms_norm": "unchanged",
            "noisy": "unchanged",
        }
        assert all(c["ci_low_pct"] is None and c["ci_high_pct"] is None for c in data["changes"])

    def test_bad_input(self, runs, tmp_path, capsys):
        """A missing run: one line naming it, exit 1, nothing on stdout."""
        assert main(["diff", str(runs[0]), str(tmp_path / "nope.jsonl")]) == 1
        captured = capsys.readouterr()
        assert captured.out == "" and "nope.jsonl: no such file" in captured.err

    @pytest.mark.parametrize(
        ("arguments", "message"),
        [
            (["--base", "--new", "B"], "--base: no run given"),
            (["--base", "A", "--new"], "--new: no run given"),
            (["--base", "A", "B"], "--new: no run given"),
            (["A", "B", "--base", "C", "--new", "D"], "give BASE NEW or --base RUN... --new RUN..., not both"),
            (["A"], "expected BASE NEW or --base RUN... --new RUN..., got 1 positional input(s)"),
            (["--base", "A", "A", "--new", "B"], "--base A: given twice"),
            (["--base", "A", "--new", "B", "./B"], "--new B: given twice"),
            (["A", "B", "--min-change", "-1"], "--min-change -1: expected a percentage >= 0"),
            (["A", "B", "--min-change", "nan"], "--min-change nan: expected a percentage >= 0"),
            (["A", "B", "--fail-above", "inf"], "--fail-above inf: expected a percentage"),
            (["--base", "A", "C", "--new", "B", "--divergence"], "--divergence compares one run a side"),
        ],
    )
    def test_bad_options(self, arguments, message, capsys):
        """Bad use of the run options: one line naming the problem, exit 2, nothing on stdout."""
        assert main(["diff", *arguments]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err == f"brickscope diff: {message}" + captured.err.partition(message)[2]
        assert captured.err.count("\n") == 1
