# SPDX-License-Identifier: Apache-2.0
"""``brickscope tree`` (an entry point of ``brickscope.commands``): a step's graph.

Example::

    $ brickscope tree trace.pftrace                 # the median over steps, per rank
    $ brickscope tree trace.pftrace --step 3 --format dot | dot -Tsvg > step3.svg
    $ brickscope tree trace.pftrace --sources --format json

Same output for the same trace, byte for byte. Bad input: one line, status 1;
bad arguments: status 2; nothing on stdout unless the whole tree is ready.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from brickscope.analysis._engine import select
from brickscope.analysis._graph import StepGraph, median_graph, step_graphs
from brickscope.analysis._load import AnalysisError
from brickscope.analysis._tree import FORMATS, SLACK_FRACTION, render_tree
from brickscope.cli import EXIT_OK
from brickscope.cli._report import _fail, _load


def register_tree(subparsers: Any) -> None:
    """Add the ``tree`` subcommand."""
    parser = subparsers.add_parser(
        "tree",
        help="a step's execution graph: durations, launch configs, sources, critical path and slack",
        description=(
            "Draw the graph of one step (--step N) or the median over steps, per rank, as a"
            " deterministic text tree, Graphviz DOT or JSON, with the critical path and each node's slack."
        ),
    )
    parser.add_argument("inputs", nargs="+", metavar="FILE", help="trace files or directories")
    parser.add_argument("--format", choices=FORMATS, default="text", help="output format (text)")
    parser.add_argument("--step", type=_step_number, metavar="N", help="this step only (default: the median over steps)")
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
        table = _load(args, args.inputs)
        table = select(table, ranks=args.rank)[0]
        graphs = chosen_graphs(step_graphs(table), args.step)
    except AnalysisError as exc:
        return _fail(args, exc)
    sys.stdout.write(
        render_tree(
            graphs, args.format, sources=table.kernel_sources, show_sources=args.sources, slack_fraction=args.slack_above
        )
    )
    return EXIT_OK


def chosen_graphs(graphs: list[StepGraph], step: int | None) -> list[StepGraph]:
    """Step ``step`` of each rank, or each rank's median over its steps.

    Raises:
        AnalysisError: no such step.
    """
    if step is not None:
        chosen = [g for g in graphs if g.step == step]
        if not chosen:
            numbers = sorted({g.step for g in graphs if g.step is not None})
            known = f"steps {numbers[0]} to {numbers[-1]}" if numbers else "no step scopes"
            raise AnalysisError(f"no step {step} in the trace ({known})")
        return chosen
    by_rank: dict[str, list[StepGraph]] = {}
    for graph in graphs:
        by_rank.setdefault(graph.rank, []).append(graph)
    return [median_graph(group) for group in by_rank.values()]


def _step_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a step number (an integer >= 0)")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a fraction between 0 and 1")
    return value
