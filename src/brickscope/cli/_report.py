# SPDX-License-Identifier: Apache-2.0
"""``brickscope report`` and ``brickscope diff`` (entry points of ``brickscope.commands``).

Example::

    $ brickscope report trace.pftrace --top 5 --step 2:
    $ brickscope report runs/ --format json > report.json
    $ brickscope diff --base a1/ a2/ a3/ --new b1/ b2/ b3/ --fail-above 5

Bad input prints one line naming the file and the problem and exits 1; bad
arguments exit 2 (the statuses of every ``brickscope`` command). Nothing is
printed to stdout unless the whole report is ready.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from typing import Any

from brickscope.analysis._communication import MIN_RATIO
from brickscope.analysis._diff import ALPHA, MIN_CHANGE_PCT, compare, compare_runs
from brickscope.analysis._divergence import divergence
from brickscope.analysis._engine import analyse, select
from brickscope.analysis._engines import ENGINES, check_memory, choose, load_with, report_with, summarise_with
from brickscope.analysis._load import AnalysisError
from brickscope.analysis._memory import HOTSPOT_SHARE
from brickscope.analysis._peaks import Peak
from brickscope.analysis._render import FORMATS, render, render_comparison
from brickscope.cli import EXIT_BAD_INPUT, EXIT_OK, UsageError
from brickscope.offline import Progress, StepRange, one_line, step_argument


def register_report(subparsers: Any) -> None:
    """Add the ``report`` subcommand."""
    parser = subparsers.add_parser(
        "report",
        help="where the time went: operations, devices, ranks, communication, memory, roofline",
        description="Analyse brickscope traces (.pftrace, OTLP JSON, or directories of per-rank files).",
    )
    parser.add_argument("inputs", nargs="+", metavar="FILE", help="trace files or directories")
    _add_common(parser)
    parser.add_argument(
        "--top", type=_positive, default=10, metavar="N", help="slowest instances and outliers to list (10)"
    )
    parser.add_argument(
        "--peak",
        action="append",
        default=[],
        metavar="NAME=FLOPS,BYTES",
        help=(
            "roofline peak for devices whose name contains NAME ('*': any device, host included),"
            " e.g. H100=989e12,3.35e12"
        ),
    )
    parser.add_argument(
        "--comm-min-ratio",
        default=str(MIN_RATIO),
        metavar="R",
        help=f"communication operations holding at least this share of self time are bottlenecks ({MIN_RATIO})",
    )
    parser.add_argument(
        "--memory-min-share",
        default=str(HOTSPOT_SHARE),
        metavar="S",
        help=f"operations holding at least this share of the bytes are memory hotspots ({HOTSPOT_SHARE})",
    )
    parser.set_defaults(func=run_report)


def register_diff(subparsers: Any) -> None:
    """Add the ``diff`` subcommand."""
    parser = subparsers.add_parser(
        "diff",
        help="per-operation change between runs, with a run-level test and intervals (CI guard)",
        description=(
            "Compare each operation's self time between the base runs and the new runs: per run a"
            " statistic (median over steps), a moderated t test on its logs, Benjamini-Hochberg across"
            " operations, the change with its confidence interval. Give several runs a side"
            " (--base A1 A2 A3 --new B1 B2 B3); BASE NEW compares one run a side, where run-to-run"
            " noise cannot be measured."
        ),
    )
    parser.add_argument(
        "runs", nargs="*", metavar="BASE NEW", help="one run a side: trace file or directory of each"
    )
    parser.add_argument(
        "--base",
        nargs="*",
        metavar="RUN",
        help="the reference runs: each a trace file or a directory of one run's files",
    )
    parser.add_argument("--new", nargs="*", metavar="RUN", help="the runs to judge, as --base")
    _add_common(parser)
    parser.add_argument(
        "--fail-above",
        type=float,
        metavar="PCT",
        help="exit 1 when a significant regression's whole confidence interval lies above +PCT percent",
    )
    parser.add_argument(
        "--allow-single-run",
        action="store_true",
        help=(
            "with one run a side, let --fail-above judge the change itself (no interval exists):"
            " it then also fails on run-to-run noise"
        ),
    )
    parser.add_argument(
        "--alpha", type=float, default=ALPHA, help=f"false discovery rate, and 1 - the intervals' level ({ALPHA})"
    )
    parser.add_argument(
        "--min-change",
        type=float,
        default=MIN_CHANGE_PCT,
        metavar="PCT",
        help=f"smallest change reported as significant, percent ({MIN_CHANGE_PCT})",
    )
    parser.add_argument(
        "--divergence",
        action="store_true",
        help="compare output checksums (bs.checksum) instead: name the first diverging kernel; exit 1 if any differs",
    )
    parser.set_defaults(func=run_diff)


def run_diff(args: argparse.Namespace) -> int:
    """Load the runs, compare, print; 1 when a regression is above --fail-above."""
    if not 0 < args.alpha < 1:
        raise UsageError(f"--alpha {args.alpha}: expected a number between 0 and 1")
    if not args.min_change >= 0 or math.isinf(args.min_change):
        raise UsageError(f"--min-change {args.min_change:g}: expected a percentage >= 0")
    if args.fail_above is not None and not math.isfinite(args.fail_above):
        raise UsageError(f"--fail-above {args.fail_above:g}: expected a percentage")
    base_runs, new_runs = _sides(args)
    single = len(base_runs) + len(new_runs) < 3
    if args.divergence:
        if len(base_runs) != 1 or len(new_runs) != 1:
            raise UsageError("--divergence compares one run a side: give BASE NEW")
        return run_divergence(args, base_runs[0], new_runs[0])
    if args.fail_above is not None and single and not args.allow_single_run:
        raise UsageError(
            "--fail-above with one run a side would fail on run-to-run noise: give several runs a side"
            " (--base A1 A2 A3 --new B1 B2 B3), or --allow-single-run to accept that"
        )
    try:
        engine = _engine(args, [*base_runs, *new_runs])
        if engine == "memory":
            base = [_filtered(args, [run], engine) for run in base_runs]
            new = [_filtered(args, [run], engine) for run in new_runs]
            comparison = compare(base, new, alpha=args.alpha, min_change_pct=args.min_change)
        else:  # each run's statistics computed by the SQL engine
            base, new = ([_summary_sql(args, engine, run) for run in runs] for runs in (base_runs, new_runs))
            comparison = compare_runs(base, new, alpha=args.alpha, min_change_pct=args.min_change)
    except AnalysisError as exc:
        return _fail(args, exc)
    sys.stdout.write(render_comparison(comparison, args.format))
    if args.fail_above is not None:
        worst = comparison.above(args.fail_above)
        if worst:
            change = worst[0]
            interval = ""
            if change.ci_low_pct is not None:
                interval = f" (interval {change.ci_low_pct:+.1f}% .. {change.ci_high_pct:+.1f}%)"
            print(
                f"brickscope diff: {len(worst)} regression(s) above {args.fail_above:g}%:"
                f" {one_line(change.name)} {change.change_pct:+.1f}%{interval}",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
    return EXIT_OK


def _sides(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The base and new runs, from BASE NEW or from --base/--new (not both)."""
    if args.base is None and args.new is None:
        if len(args.runs) != 2:
            raise UsageError(
                f"expected BASE NEW or --base RUN... --new RUN..., got {len(args.runs)} positional input(s)"
            )
        return [args.runs[0]], [args.runs[1]]
    if args.runs:
        raise UsageError("give BASE NEW or --base RUN... --new RUN..., not both")
    for option, runs in (("--base", args.base), ("--new", args.new)):
        if not runs:
            raise UsageError(f"{option}: no run given (expected one or more trace files or directories)")
        paths = [os.path.realpath(run) for run in runs]
        twice = [run for run, path in zip(runs, paths) if paths.count(path) > 1]
        if twice:
            raise UsageError(f"{option} {twice[0]}: given twice (a run repeated would pass for run-to-run agreement)")
    return args.base, args.new


def run_divergence(args: argparse.Namespace, base: str, new: str) -> int:
    """``diff --divergence``: 0 when the checksummed outputs agree, 1 when one differs (or bad input)."""
    try:
        engine = _engine(args, [base, new])
        result = divergence(_filtered(args, [base], engine), _filtered(args, [new], engine))
    except AnalysisError as exc:
        return _fail(args, exc)
    if args.format == "json":
        sys.stdout.write(json.dumps({"schema": 1, **dataclasses.asdict(result)}, indent=2) + "\n")
    else:
        sys.stdout.write(result.text())
    if result.first is not None:
        print(one_line(f"brickscope diff: outputs diverge at {result.first.label()}"), file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


def _filtered(args: argparse.Namespace, inputs: list[str], engine: str = "memory") -> Any:
    """One run's table (built by ``engine``) with the --step/--rank/--device filters applied."""
    table = _load(args, inputs, engine)
    return select(table, steps=args.step, ranks=args.rank, devices=args.device)[0]


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=FORMATS, default="text", help="output format (text)")
    parser.add_argument(
        "--step", type=step_argument, metavar="N|A:B", help="only step N, or steps A <= step < B (either end may be empty)"
    )
    parser.add_argument("--rank", action="append", metavar="RANK", help="only this rank (repeatable)")
    parser.add_argument("--device", action="append", type=int, metavar="N", help="only GPU device N (repeatable)")
    parser.add_argument(
        "--allow-truncated",
        action="store_true",
        help="analyse the valid prefix of a truncated input (a writer killed mid-write) instead of failing",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        help="what builds the table: memory, or duckdb/spark over Parquet span files"
        " (default: duckdb for Parquet inputs of 1M spans or more when installed, else memory)",
    )
    parser.add_argument("--backend", choices=("numpy", "python"), help=argparse.SUPPRESS)


def run_report(args: argparse.Namespace) -> int:
    """Load, analyse, print; returns the exit status (errors: see :func:`_fail`)."""
    try:
        peaks = dict(_peak(text) for text in args.peak)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    comm_min_ratio = _fraction("--comm-min-ratio", args.comm_min_ratio)
    memory_min_share = _fraction("--memory-min-share", args.memory_min_share)
    options = {
        "top": args.top, "steps": args.step, "ranks": args.rank, "devices": args.device, "peaks": peaks,
        "comm_min_ratio": comm_min_ratio, "memory_min_share": memory_min_share,
    }  # fmt: skip
    try:
        engine = _engine(args, args.inputs)
        if engine == "memory":
            report = analyse(_load(args, args.inputs), **options)
        else:  # out of core: every section in SQL
            report = _report_sql(args, engine, options)
    except AnalysisError as exc:
        return _fail(args, exc)
    text = render(report, args.format)
    sys.stdout.write(text)
    return EXIT_OK


def _summary_sql(args: argparse.Namespace, engine: str, run: str) -> Any:
    """One run's diff statistics computed by a SQL engine, with its progress line and notes on stderr."""
    shown: list[Progress] = []

    def progress_for(label: str) -> Progress:
        shown.append(Progress(label, quiet=args.quiet or not sys.stderr.isatty()))
        return shown[-1]

    try:
        summary, notes = summarise_with(
            engine, [run], backend=args.backend, progress_for=progress_for, steps=args.step, ranks=args.rank,
            devices=args.device,
        )  # fmt: skip
    finally:
        for progress in shown:
            progress.finish()
    for note in notes:
        print(one_line(note), file=sys.stderr)
    return summary


def _report_sql(args: argparse.Namespace, engine: str, options: dict[str, Any]) -> Any:
    """The report computed by a SQL engine, with its progress line and the inputs' notes on stderr."""
    shown: list[Progress] = []

    def progress_for(label: str) -> Progress:
        shown.append(Progress(label, quiet=args.quiet or not sys.stderr.isatty()))
        return shown[-1]

    try:
        report = report_with(engine, args.inputs, backend=args.backend, progress_for=progress_for, **options)
    finally:
        for progress in shown:
            progress.finish()
    for note in report.notes:
        print(one_line(note), file=sys.stderr)
    return report


def _engine(args: argparse.Namespace, inputs: list[str]) -> str:
    """The engine of the command's inputs (all of them: one engine a command), said on stderr in
    one line when it was chosen by default among several."""
    choice = choose(inputs, args.engine)
    if args.engine is None and choice.reason and not args.quiet:
        print(f"brickscope {args.command}: {choice.reason}", file=sys.stderr)
    return choice.engine


def _load(args: argparse.Namespace, inputs: list[str], engine: str = "memory", steps: StepRange | None = None) -> Any:
    """The inputs' table built by ``engine`` (only ``steps``' spans when given: see
    :func:`brickscope.analysis.load`), with a progress line per file on stderr when it is a terminal."""
    shown: list[Progress] = []

    def progress_for(path: str) -> Progress:
        shown.append(Progress(os.path.basename(path), quiet=args.quiet or not sys.stderr.isatty()))
        return shown[-1]

    if engine == "memory" and steps is None:
        check_memory(inputs, args.command, _memory_hint(args.command))
    try:
        table = load_with(
            engine,
            inputs,
            backend=args.backend,
            allow_truncated=args.allow_truncated,
            progress_for=progress_for,
            steps=steps,
        )
    finally:
        for progress in shown:
            progress.finish()
    for note in table.notes:
        print(one_line(note), file=sys.stderr)
    return table


def _memory_hint(command: str) -> str:
    """What to do instead when the in-memory engine cannot hold a command's inputs."""
    if command == "tree":
        return "draw a few steps with --step A:B (only their rows are read)"
    from brickscope.analysis import _duckdb

    install = "" if _duckdb.available() else " (pip install 'brickscope[duckdb]')"
    return f"--engine duckdb computes it out of core{install}"


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive integer")
    return value


def _fraction(option: str, text: str) -> float:
    """A share in [0, 1] given to ``option``; UsageError (one line, exit 2) otherwise."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 1:
        raise UsageError(f"{option} {text!r}: expected a number between 0 and 1 (0.1 is 10%)")
    return value


def _peak(text: str) -> tuple[str, Peak]:
    name, sep, figures = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--peak {text!r}: expected NAME=FLOPS,BYTES such as H100=989e12,3.35e12")
    return name.strip(), Peak.parse(figures)


def _fail(args: argparse.Namespace, exc: AnalysisError) -> int:
    """One line naming the input and the problem, as every brickscope command prints it; status 1."""
    print(one_line(f"brickscope {args.command}: {exc}"), file=sys.stderr)
    return EXIT_BAD_INPUT
