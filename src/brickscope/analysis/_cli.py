# SPDX-License-Identifier: Apache-2.0
"""``brickscope report`` and ``brickscope diff`` (entry points of ``brickscope.commands``).

Example::

    $ brickscope report trace.pftrace --top 5 --step 2:
    $ brickscope report runs/ --format json > report.json
    $ brickscope diff base.pftrace new.pftrace --fail-above 5

Bad input prints one line naming the file and the problem and exits 1; bad
arguments exit 2. Nothing is printed to stdout unless the whole report is ready.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from brickscope.analysis._engine import analyse
from brickscope.analysis._load import AnalysisError, load
from brickscope.analysis._peaks import Peak
from brickscope.analysis._render import FORMATS, render


def register_report(subparsers: Any) -> None:
    """Add the ``report`` subcommand."""
    parser = subparsers.add_parser(
        "report",
        help="where the time went: operations, devices, ranks, communication, memory, roofline",
        description="Analyse brickscope traces (.pftrace, OTLP JSON, or directories of per-rank files).",
    )
    parser.add_argument("inputs", nargs="+", metavar="FILE", help="trace files or directories")
    _add_common(parser)
    parser.add_argument("--top", type=_positive, default=10, metavar="N", help="slowest instances and outliers to list (10)")
    parser.add_argument(
        "--peak", action="append", default=[], metavar="NAME=FLOPS,BYTES",
        help="roofline peak for devices whose name contains NAME ('*': any device, host included), e.g. H100=989e12,3.35e12",
    )
    parser.set_defaults(func=run_report)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=FORMATS, default="text", help="output format (text)")
    parser.add_argument("--step", type=_step_range, metavar="A:B", help="only steps A <= step < B (either end may be empty)")
    parser.add_argument("--rank", action="append", metavar="RANK", help="only this rank (repeatable)")
    parser.add_argument("--device", action="append", type=int, metavar="N", help="only GPU device N (repeatable)")
    parser.add_argument("--backend", choices=("numpy", "python"), help=argparse.SUPPRESS)


def run_report(args: argparse.Namespace) -> int:
    """Load, analyse, print; returns the exit status."""
    try:
        peaks = dict(_peak(text) for text in args.peak)
    except ValueError as exc:
        return _fail("report", 2, exc)
    try:
        table = _load(args.inputs, args.backend)
        report = analyse(table, top=args.top, steps=args.step, ranks=args.rank, devices=args.device, peaks=peaks)
        text = render(report, args.format)
    except (AnalysisError, ValueError) as exc:
        return _fail("report", 1, exc)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


def _load(inputs: list[str], backend: str | None) -> Any:
    progress = _Progress() if sys.stderr.isatty() else None
    try:
        return load(*inputs, backend=backend, progress=progress)
    finally:
        if progress is not None:
            progress.done()


class _Progress:
    """A percentage of the input bytes read, on stderr (only on a terminal)."""

    def __init__(self) -> None:
        self._shown = -1

    def __call__(self, done: int, total: int) -> None:
        percent = 100 * done // total if total else 100
        if percent != self._shown:
            self._shown = percent
            print(f"\rreading: {percent:3d}%", end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self._shown >= 0:
            print("\r\x1b[K", end="", file=sys.stderr, flush=True)


def _step_range(text: str) -> tuple[int | None, int | None]:
    low, sep, high = text.partition(":")
    try:
        bounds = (int(low) if low.strip() else None, int(high) if high.strip() else None)
    except ValueError:
        bounds = None
    if not sep or bounds is None or (bounds[0] is not None and bounds[1] is not None and bounds[1] <= bounds[0]):
        raise argparse.ArgumentTypeError(f"{text!r}: expected A:B with integers A < B (either may be empty)")
    return bounds


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive integer")
    return value


def _peak(text: str) -> tuple[str, Peak]:
    name, sep, figures = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--peak {text!r}: expected NAME=FLOPS,BYTES such as H100=989e12,3.35e12")
    return name.strip(), Peak.parse(figures)


def _fail(command: str, status: int, exc: BaseException) -> int:
    message = " ".join(str(exc).split())
    print(f"brickscope {command}: error: {message}", file=sys.stderr)
    return status


