# SPDX-License-Identifier: Apache-2.0
"""``brickscope tree`` (an entry point of ``brickscope.commands``): a step's graph.

Example::

    $ brickscope tree trace.pftrace                 # the median over steps, per rank
    $ brickscope tree trace.pftrace --step 2:       # the median over steps 2 and later
    $ brickscope tree trace.pftrace --step 3 --format dot | dot -Tsvg > step3.svg
    $ brickscope tree trace.pftrace --sources --format json

Same output for the same trace, byte for byte. Bad input: one line, status 1;
bad arguments: status 2; nothing on stdout unless the whole tree is ready.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from brickscope.analysis import TREE_FORMATS, AnalysisError, render_tree, select, tree_graphs
from brickscope.analysis._engines import local_parquet
from brickscope.analysis._graph import SLACK_FRACTION
from brickscope.analysis._load import _expand
from brickscope.cli import EXIT_OK
from brickscope.cli._report import _fail, _load
from brickscope.offline import StepRange, describe_steps, step_argument


def register_tree(subparsers: Any) -> None:
    """Add the ``tree`` subcommand."""
    parser = subparsers.add_parser(
        "tree",
        help="a step's execution graph: durations, launch configs, sources, critical path and slack",
        description=(
            "Draw the graph of one step (--step N) or the median over steps (all, or --step A:B), per rank, as a"
            " deterministic text tree, Graphviz DOT or JSON, with the critical path and each node's slack."
        ),
    )
    parser.add_argument("inputs", nargs="+", metavar="FILE", help="trace files or directories")
    parser.add_argument("--format", choices=TREE_FORMATS, default="text", help="output format (text)")
    parser.add_argument(
        "--step", type=step_argument, metavar="N|A:B",
        help="step N alone, or the median over steps A <= step < B (default: the median over every step)",
    )
    parser.add_argument("--rank", action="append", metavar="RANK", help="only this rank (repeatable)")
    parser.add_argument("--sources", action="store_true", help="say where each kernel came from (the source registry)")
    parser.add_argument(
        "--slack-above", type=_fraction, default=SLACK_FRACTION, metavar="FRACTION",
        help=f"list nodes whose slack is at least this share of their step ({SLACK_FRACTION})",
    )
    parser.add_argument(
        "--allow-truncated", action="store_true",
        help="read the valid prefix of a truncated input (a writer killed mid-write) instead of failing",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    parser.add_argument("--backend", choices=("numpy", "python"), help=argparse.SUPPRESS)
    parser.set_defaults(func=run_tree)


def run_tree(args: argparse.Namespace) -> int:
    """Load, build the graphs, print; returns the exit status."""
    try:
        table = _load(args, args.inputs, steps=_parquet_steps(args.inputs, args.step))
        table = select(table, ranks=args.rank)[0]
        graphs = tree_graphs(table, args.step)
    except AnalysisError as exc:
        return _fail(args, exc)
    sys.stdout.write(
        render_tree(
            graphs, args.format, sources=table.kernel_sources, show_sources=args.sources, slack_fraction=args.slack_above
        )
    )
    return EXIT_OK


def _parquet_steps(inputs: list[str], steps: StepRange | None) -> StepRange | None:
    """``steps`` when every input is Parquet, for the loader to read only those steps' rows (a few
    steps of a long run fit in memory where the whole run would not); otherwise None (every span).

    Raises:
        AnalysisError: no row of the Parquet inputs is in ``steps``; the message names the
            steps the files hold, as :func:`brickscope.analysis.tree_graphs` would.
    """
    if steps is None or not local_parquet(inputs):
        return None
    from brickscope.analysis._parquet import step_numbers

    low, high, found = step_numbers([file for path in inputs for file in _expand(os.fspath(path))], steps)
    if not found:
        known = f"steps {low} to {high}" if low is not None else "no step scopes"
        raise AnalysisError(f"no step {describe_steps(steps)} in the trace ({known})")
    return steps


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a fraction between 0 and 1")
    return value
