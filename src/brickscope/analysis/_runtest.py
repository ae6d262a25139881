# SPDX-License-Identifier: Apache-2.0
"""The run-level test of ``brickscope diff``: a moderated t per operation, Benjamini-Hochberg
across operations, and the change's confidence interval.

Each operation contributes one number per run (its run statistic); the test works on their
logarithms, so a change is a ratio and run-to-run noise is relative. With a few runs a side an
operation's own variance rests on very few degrees of freedom, so it is shrunk toward the
variance of all operations together by empirical Bayes (the moderated t of Smyth 2004, limma's
``squeezeVar``): an operation keeps its own variance where the data say operations differ, and
borrows the others' degrees of freedom where they do not. Pure Python (no scipy): the Student t
distribution through the regularized incomplete beta function, and the digamma and trigamma
functions the variance prior needs.

Example::

    result = run_test({"gemm": ([100.0, 102.0, 99.0], [111.0, 112.0, 109.0])}, alpha=0.05)
    result["gemm"].change_pct, result["gemm"].ci_low_pct, result["gemm"].q_value
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

_EPS = 1e-14
_TINY = 1e-300


@dataclass(frozen=True)
class RunTest:
    """One operation's run-level result: the change (new/base - 1, percent), its interval, the test."""

    change_pct: float
    ci_low_pct: float
    ci_high_pct: float
    #: the moderated standard deviation of the log run statistic, percent: run-to-run noise
    run_spread_pct: float
    t: float
    df: float
    p_value: float
    #: Benjamini-Hochberg adjusted p-value across the operations tested together
    q_value: float


def run_test(
    values: Mapping[Hashable, tuple[Sequence[float], Sequence[float]]], alpha: float
) -> dict[Hashable, RunTest]:
    """Per key, (base run statistics, new run statistics) -> its :class:`RunTest`.

    Every key must have the same numbers of runs per side, at least three runs in all, and
    positive statistics. The interval is the two-sided ``1 - alpha`` interval of the ratio.
    """
    keys = list(values)
    if not keys:
        return {}
    n1, n2 = len(values[keys[0]][0]), len(values[keys[0]][1])
    if n1 < 1 or n2 < 1 or n1 + n2 < 3:
        raise ValueError(f"the run-level test needs three runs in all, one a side at least: got {n1} and {n2}")
    diffs, variances = [], []
    for key in keys:
        base, new = values[key]
        if (len(base), len(new)) != (n1, n2):
            raise ValueError(f"{key}: {len(base)} and {len(new)} runs, expected {n1} and {n2}")
        if min(*base, *new) <= 0:
            raise ValueError(f"{key}: run statistics must be positive")
        logs_base, logs_new = [math.log(v) for v in base], [math.log(v) for v in new]
        mean_base, mean_new = sum(logs_base) / n1, sum(logs_new) / n2
        squares = sum((x - mean_base) ** 2 for x in logs_base) + sum((x - mean_new) ** 2 for x in logs_new)
        diffs.append(mean_new - mean_base)
        variances.append(squares / (n1 + n2 - 2))
    posterior, df = squeeze_variances(variances, n1 + n2 - 2)
    scale = math.sqrt(1 / n1 + 1 / n2)
    critical = t_critical(alpha, df)
    rows = []
    for diff, variance in zip(diffs, posterior):
        se = math.sqrt(variance) * scale
        if se > 0:
            t = diff / se
            p = t_two_sided_p(t, df)
        else:  # every run of both sides identical: the difference is exact
            t, p = (0.0, 1.0) if diff == 0 else (math.copysign(math.inf, diff), 0.0)
        rows.append((diff, se, t, p, math.sqrt(variance)))
    q_values = benjamini_hochberg([row[3] for row in rows])
    return {
        key: RunTest(
            _pct(diff),
            _pct(diff - critical * se),
            _pct(diff + critical * se),
            sd * 100,
            t,
            df,
            p,
            q,
        )
        for key, (diff, se, t, p, sd), q in zip(keys, rows, q_values)
    }


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values, in the input's order.

    The i-th smallest of m p-values becomes min over j >= i of (m p_(j) / j), at most 1; the
    hypotheses with adjusted p <= alpha are exactly those the step-up procedure rejects at
    false discovery rate alpha.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        index = order[rank - 1]
        running = min(running, p_values[index] * m / rank)
        adjusted[index] = running
    return adjusted


def squeeze_variances(variances: Sequence[float], df: int) -> tuple[list[float], float]:
    """Empirical-Bayes posterior variances (all with ``df`` degrees of freedom) and their df.

    The variances are taken as scaled chi-square draws around a prior s0^2 with d0 degrees of
    freedom, fitted by moments of log s^2 (Smyth 2004): the posterior is
    ``(d0 s0^2 + df s^2) / (d0 + df)`` with ``d0 + df`` degrees of freedom, at most the total
    ``G df``. Fewer than three variances: no prior (each keeps its own, with ``df``); variances
    no more spread than chance makes them: one pooled variance (d0 infinite).
    """
    count = len(variances)
    if count < 3:
        return list(variances), float(df)
    floor = sorted(variances)[count // 2] * 1e-5 or 1e-5  # limma's guard against log(0)
    floored = [max(v, floor) for v in variances]
    half = df / 2
    e = [math.log(v) - digamma(half) + math.log(half) for v in floored]
    mean = sum(e) / count
    spread = sum((x - mean) ** 2 for x in e) / (count - 1) - trigamma(half)
    if spread <= 0:
        pooled = sum(variances) / count
        return [pooled] * count, float(count * df)
    d0 = 2 * trigamma_inverse(spread)
    prior = math.exp(mean + digamma(d0 / 2) - math.log(d0 / 2))
    return [(d0 * prior + df * v) / (d0 + df) for v in variances], min(d0 + df, float(count * df))


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom: I_{df/(df+t^2)}(df/2, 1/2)."""
    if df > 1e7:
        return 2 * NormalDist().cdf(-abs(t))
    return _betainc(df / 2, 0.5, df / (df + t * t))


def t_critical(alpha: float, df: float) -> float:
    """The c with P(|T| >= c) = alpha (the two-sided critical value), by bisection."""
    low, high = 0.0, 1.0
    while t_two_sided_p(high, df) > alpha:
        low, high = high, high * 2
    for _ in range(200):
        middle = (low + high) / 2
        if t_two_sided_p(middle, df) > alpha:
            low = middle
        else:
            high = middle
        if high - low < 1e-12 * high:
            break
    return (low + high) / 2


def digamma(x: float) -> float:
    """psi(x) for x > 0: the recurrence psi(x) = psi(x + 1) - 1/x up to 6, then the asymptotic series."""
    result = 0.0
    while x < 6:
        result -= 1 / x
        x += 1
    inv2 = 1 / (x * x)
    series = inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (1 / 240 - inv2 / 132))))
    return result + math.log(x) - 0.5 / x - series


def trigamma(x: float) -> float:
    """psi'(x) for x > 0: psi'(x) = psi'(x + 1) + 1/x^2 up to 6, then the asymptotic series."""
    result = 0.0
    while x < 6:
        result += 1 / (x * x)
        x += 1
    inv2 = 1 / (x * x)
    series = 1 / x + inv2 / 2 + inv2 / x * (1 / 6 - inv2 * (1 / 30 - inv2 * (1 / 42 - inv2 / 30)))
    return result + series


def _tetragamma(x: float) -> float:
    """psi''(x) for x > 0, for the Newton steps of :func:`trigamma_inverse`."""
    result = 0.0
    while x < 6:
        result -= 2 / (x * x * x)
        x += 1
    inv2 = 1 / (x * x)
    series = -inv2 - inv2 / x - inv2 * inv2 * (0.5 - inv2 * (1 / 6 - inv2 * (1 / 6 - inv2 * 3 / 10)))
    return result + series


def trigamma_inverse(y: float) -> float:
    """The x > 0 with trigamma(x) = y (limma's Newton iteration on 1/trigamma, from x = 1/2 + 1/y)."""
    if y > 1e7:
        return 1 / math.sqrt(y)
    if y < 1e-6:
        return 1 / y
    x = 0.5 + 1 / y
    for _ in range(50):
        tri = trigamma(x)
        step = tri * (1 - tri / y) / _tetragamma(x)
        x += step
        if -step / x < 1e-8:
            break
    return x


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (Lentz)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1 - front * _beta_fraction(b, a, 1 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > _TINY else _TINY)
            c = 1 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1) < _EPS:
            break
    return h


def _pct(log_ratio: float) -> float:
    return math.expm1(log_ratio) * 100
