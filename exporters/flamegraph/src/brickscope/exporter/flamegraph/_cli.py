# SPDX-License-Identifier: Apache-2.0
"""``brickscope flamegraph``: a recorded trace to folded stacks (and speedscope), offline.

Example::

    $ brickscope flamegraph trace.pftrace -o run.folded --speedscope run.speedscope.json
    $ brickscope flamegraph spans.jsonl -o host.folded --weight host --unit ns

The input is a Perfetto trace written by brickscope's Perfetto exporter
(``.pftrace``; needs ``brickscope-exporter-perfetto``) or OTLP JSON (the
Collector's file exporter output, or one JSON document; gzip accepted). It is
told apart by content, not by name. The spans go through the same
:class:`FlamegraphSpanExporter` as a live run, so the output is the same.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from brickscope.exporter.flamegraph._exporter import FlamegraphSpanExporter
from brickscope.exporter.flamegraph._folded import UNITS
from opentelemetry.sdk.trace import ReadableSpan

_BATCH = 4096
_JSON_STARTS = (b"{", b"[", b"\xef\xbb\xbf", b"\x1f\x8b")  # JSON, UTF-8 BOM, gzip


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
        default="gpu",
        help="gpu (default), host, or the name of a numeric span attribute",
    )
    parser.add_argument("--unit", choices=sorted(UNITS), default="us", help="folded time unit")
    parser.add_argument(
        "--device-frames", action="store_true", help="add cuda:<device>;stream:<handle> frames"
    )
    parser.add_argument("-f", "--force", action="store_true", help="overwrite existing outputs")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Convert; returns the exit status (0 ok, 1 bad input, 2 bad arguments)."""
    output = args.output or os.path.splitext(args.input)[0] + ".folded"
    for target in (output, args.speedscope):
        if target and os.path.lexists(target) and not args.force:
            return _fail(2, FileExistsError(f"{target} exists; pass --force to replace it"))
    try:
        spans = _reader(args.input)
        exporter = FlamegraphSpanExporter(
            output,
            args.weight,
            speedscope_path=args.speedscope,
            unit=args.unit,
            device_frames=args.device_frames,
            overwrite=args.force,
            write_interval_millis=None,
        )
    except (OSError, ValueError, ImportError) as exc:
        return _fail(2, exc)
    progress = _Progress(args.input) if sys.stderr.isatty() else None
    try:
        batch: list[ReadableSpan] = []
        for span in spans(progress):
            batch.append(span)
            if len(batch) == _BATCH:
                exporter.export(batch)
                batch = []
        exporter.export(batch)
    except (OSError, ValueError) as exc:
        return _fail(1, exc)
    finally:
        if progress is not None:
            progress.done()
    if not exporter.force_flush():
        return _fail(1, OSError(f"cannot write {output} (see the log above)"))
    stats = exporter.stats
    exporter.shutdown()  # nothing left to write: only closes
    written = output + (f" and {args.speedscope}" if args.speedscope else "")
    print(
        f"wrote {written}: {stats.spans} spans, {stats.weighted} weighted by {args.weight},"
        f" {stats.unweighted} without it (frames only)"
        + (f", {stats.orphaned} without their parent" if stats.orphaned else ""),
        file=sys.stderr,
    )
    return 0


def _reader(path: str) -> Callable[[Any], Iterator[ReadableSpan]]:
    """A function reading the spans of ``path``, chosen by the file's first bytes."""
    with open(path, "rb") as probe:
        head = probe.read(64).lstrip()
    if head.startswith(_JSON_STARTS) or not head:
        from brickscope.otlp_json import read_spans

        return lambda progress: read_spans(path, progress=progress)
    try:
        from brickscope.exporter.perfetto import read_spans as read_pftrace
    except ImportError as exc:
        raise ImportError(
            f"{path} looks like a Perfetto trace; reading it needs brickscope-exporter-perfetto"
            f" (pip install brickscope-exporter-perfetto): {exc}"
        ) from exc
    return lambda progress: read_pftrace(path)


class _Progress:
    """A percentage on stderr while a big input is read."""

    def __init__(self, path: str) -> None:
        self._name = os.path.basename(path)
        self._shown = -1

    def __call__(self, done: int, total: int) -> None:
        percent = 100 * done // total if total else 100
        if percent != self._shown:
            self._shown = percent
            print(f"\rreading {self._name}: {percent:3d}%", end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self._shown >= 0:
            print(file=sys.stderr)


def _fail(status: int, exc: BaseException) -> int:
    print(f"brickscope flamegraph: error: {exc}", file=sys.stderr)
    return status
