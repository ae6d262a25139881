# SPDX-License-Identifier: Apache-2.0
"""``brickscope flamegraph``: a recorded trace to folded stacks (and speedscope), offline.

Example::

    $ brickscope flamegraph trace.pftrace -o run.folded --speedscope run.speedscope.json
    $ brickscope flamegraph spans.jsonl -o host.folded --weight host --unit ns

The input is any trace :func:`brickscope.offline.open_spans` reads: a Perfetto
trace written by brickscope's Perfetto exporter (``.pftrace``; needs
``brickscope-exporter-perfetto``) or OTLP JSON (the Collector's file exporter
output, or one JSON document; gzip accepted), told apart by content, not by
name. The spans go through the same :class:`FlamegraphSpanExporter` as a live
run, so the output is the same. Without ``--weight``, spans are weighted by GPU
time, or by host time when no span has any (said on stderr). The outputs are
written only once the whole input was read, atomically.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from brickscope.exporter.flamegraph._exporter import FlamegraphSpanExporter
from brickscope.exporter.flamegraph._folded import UNITS
from brickscope.exporter.flamegraph._stacks import Stats
from brickscope.offline import (
    Progress,
    TraceFileError,
    UsageError,
    check_output,
    cyclic_gc_paused,
    open_spans,
    replay,
)


def register(subparsers: Any) -> None:
    """Add the ``flamegraph`` subcommand (entry point of ``brickscope.commands``)."""
    parser = subparsers.add_parser(
        "flamegraph",
        help="a .pftrace or OTLP JSON file to folded stacks / speedscope",
        description=(
            "Fold the spans of a recorded trace into Brendan Gregg's folded-stack"
            " format (flamegraph.pl, inferno, speedscope), weighted by self time."
        ),
    )
    parser.add_argument("input", help="a brickscope .pftrace, or OTLP JSON (.json/.jsonl, gzip ok)")
    parser.add_argument(
        "-o", "--output", help="folded output file (default: the input name with .folded)"
    )
    parser.add_argument("--speedscope", metavar="PATH", help="also write a speedscope JSON profile")
    parser.add_argument(
        "--weight",
        help="gpu, host, or the name of a numeric span attribute"
        " (default: gpu, or host when no span has GPU time)",
    )
    parser.add_argument("--unit", choices=sorted(UNITS), default="us", help="folded time unit")
    parser.add_argument(
        "--device-frames", action="store_true", help="add cuda:<device>;stream:<handle> frames"
    )
    parser.add_argument("-f", "--force", action="store_true", help="overwrite existing outputs")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    parser.add_argument(
        "--allow-truncated",
        action="store_true",
        help="read the valid prefix of a truncated input (a writer killed mid-write) instead of failing",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Fold the input; returns 0, or raises what the ``brickscope`` command reports."""
    output = args.output or os.path.splitext(args.input)[0] + ".folded"
    outputs = [output] + ([args.speedscope] if args.speedscope else [])
    for target in outputs:  # before anything is read or written
        check_output(target, overwrite=args.force, inputs=[args.input], force_flag="--force")
    if args.speedscope and os.path.abspath(args.speedscope) == os.path.abspath(output):
        raise UsageError(f"{output}: given as both the folded and the speedscope output")
    if args.weight is not None and not args.weight.strip():
        raise UsageError("--weight: empty; give gpu, host or a numeric span attribute")
    weight = args.weight or "gpu"
    exporter, spans = _fold(args, output, weight)
    stats = exporter.stats
    if not stats.spans:
        raise TraceFileError(args.input, "no spans in this file")
    if not stats.weighted and args.weight is None:
        print(f"{args.input}: no span has GPU time; weighting by host time (--weight host)", file=sys.stderr)
        weight = "host"
        exporter, spans = _fold(args, output, weight)
        stats = exporter.stats
    if not stats.weighted:  # an empty flamegraph is no answer
        what = f"{weight} time" if weight in ("gpu", "host") else f"the attribute {weight!r}"
        hint = "" if weight == "host" else " (try --weight host)"
        raise TraceFileError(args.input, f"none of {stats.spans} spans has {what}: nothing to draw{hint}")
    if not exporter.force_flush():
        raise OSError(f"cannot write {output} (see the log above)")
    exporter.shutdown()  # nothing left to write: only closes
    if spans.dropped:
        print(spans.dropped_line(), file=sys.stderr)
    for note in spans.notes:
        print(f"{args.input}: {note}", file=sys.stderr)
    if spans.truncation is not None:
        print(f"{spans.truncation}; folded the valid prefix ({spans.spans_read:,} spans)", file=sys.stderr)
    written = output + (f" and {args.speedscope}" if args.speedscope else "")
    print(f"wrote {written}: {_summary(stats, weight)}", file=sys.stderr)
    return 0


def _fold(args: argparse.Namespace, output: str, weight: str) -> tuple[FlamegraphSpanExporter, Any]:
    """Read the whole input into a new exporter (nothing written yet), the cyclic collector
    paused: what is read and folded is acyclic and freed by reference counting, and the
    collections it would trigger took about a quarter of the CPU (100k spans: 2.0-2.4 s
    against 3.2-3.6 s)."""
    try:
        exporter = FlamegraphSpanExporter(
            output,
            weight,
            speedscope_path=args.speedscope,
            unit=args.unit,
            device_frames=args.device_frames,
            overwrite=args.force,
            write_interval_millis=None,
        )
    except ValueError as error:
        raise UsageError(str(error)) from None
    progress = Progress(args.input, quiet=args.quiet)
    try:
        with (
            cyclic_gc_paused(),
            open_spans(args.input, allow_truncated=args.allow_truncated, progress=progress) as spans,
        ):
            replay(spans, exporter)
    finally:
        progress.finish()
    return exporter, spans


def _summary(stats: Stats, weight: str) -> str:
    return (
        f"{stats.spans} spans, {stats.weighted} weighted by {weight},"
        f" {stats.unweighted} without it (frames only)"
        + (f", {stats.orphaned} without their parent" if stats.orphaned else "")
    )
