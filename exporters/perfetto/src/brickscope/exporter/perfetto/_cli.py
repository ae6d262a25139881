# SPDX-License-Identifier: Apache-2.0
"""The ``brickscope convert`` and ``brickscope merge`` subcommands.

Example::

    $ brickscope convert spans.jsonl -o trace.pftrace
    $ brickscope merge rank0.pftrace rank1.pftrace -o all.pftrace

Both register through the ``brickscope.commands`` entry-point group.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, TextIO

_BATCH_SPANS = 4096
# Progress is shown for inputs at least this big, at most this often.
_PROGRESS_MIN_BYTES = 8 << 20
_PROGRESS_EVERY_S = 0.5


def register_convert(subparsers: Any) -> None:
    """Add ``brickscope convert``: OTLP JSON to ``.pftrace``."""
    parser = subparsers.add_parser(
        "convert",
        help="convert an OTLP JSON file to a Perfetto trace",
        description=(
            "Convert an OTLP JSON file (the OpenTelemetry Collector's file exporter, "
            "opentelemetry-exporter-otlp-json-file; JSON Lines or one document, gzip accepted) "
            "into a Perfetto .pftrace to open in https://ui.perfetto.dev."
        ),
    )
    parser.add_argument("input", help="OTLP JSON file")
    parser.add_argument("-o", "--output", required=True, help="the .pftrace to write")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite the output if it exists")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    parser.set_defaults(func=_convert)


def register_merge(subparsers: Any) -> None:
    """Add ``brickscope merge``: several ``.pftrace`` files into one."""
    parser = subparsers.add_parser(
        "merge",
        help="merge per-process Perfetto traces into one timeline",
        description=(
            "Merge Perfetto traces (one per rank or process) into one trace, renaming packet "
            "sequences and track uuids that collide. Timestamps stay on the wall clock."
        ),
    )
    parser.add_argument("inputs", nargs="+", help=".pftrace files")
    parser.add_argument("-o", "--output", required=True, help="the merged .pftrace to write")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite the output if it exists")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    parser.set_defaults(func=_merge)


class _Progress:
    """Rate-limited progress lines on stderr, for big inputs only."""

    def __init__(self, stream: TextIO, quiet: bool) -> None:
        self._stream = stream
        self._quiet = quiet
        self._last = 0.0

    def __call__(self, label: str, done: int, total: int, extra: str = "") -> None:
        if self._quiet or total < _PROGRESS_MIN_BYTES:
            return
        now = time.monotonic()
        if done < total and now - self._last < _PROGRESS_EVERY_S:
            return
        self._last = now
        end = "\n" if done >= total else "\r" if self._stream.isatty() else "\n"
        percent = 100.0 * done / total if total else 100.0
        self._stream.write(f"{label}: {percent:5.1f}% of {total / 1e6:,.1f} MB{extra}{end}")
        self._stream.flush()


def _convert(args: argparse.Namespace) -> int:
    from brickscope.otlp_json import read_spans as read_otlp_json

    from ._exporter import PerfettoSpanExporter

    progress = _Progress(sys.stderr, args.quiet)
    count = 0
    try:
        exporter = PerfettoSpanExporter(args.output, overwrite=args.force)
    except (ValueError, TypeError) as error:
        print(f"brickscope convert: {error}", file=sys.stderr)
        return 1
    with exporter:
        batch = []
        try:
            spans = read_otlp_json(
                args.input, progress=lambda done, total: progress(args.input, done, total, f", {count:,} spans")
            )
            for span in spans:
                batch.append(span)
                if len(batch) >= _BATCH_SPANS:
                    count += _write(exporter, batch)
                    batch = []
            count += _write(exporter, batch)
        except (ValueError, OSError) as error:
            print(f"brickscope convert: {error}", file=sys.stderr)
            return 1
    print(f"wrote {count:,} spans to {exporter.path}", file=sys.stderr)
    return 0


def _write(exporter: Any, batch: list[Any]) -> int:
    from opentelemetry.sdk.trace.export import SpanExportResult

    if batch and exporter.export(batch) is not SpanExportResult.SUCCESS:
        raise OSError(f"cannot write {exporter.path} (see the log above)")
    return len(batch)


def _merge(args: argparse.Namespace) -> int:
    from ._merge import merge_traces

    progress = _Progress(sys.stderr, args.quiet)
    try:
        result = merge_traces(
            args.inputs,
            args.output,
            overwrite=args.force,
            progress=lambda path, done, total: progress(path, done, total),
        )
    except (ValueError, OSError) as error:
        print(f"brickscope merge: {error}", file=sys.stderr)
        return 1
    print(
        f"merged {sum(result.packets):,} packets from {len(args.inputs)} files into {os.fspath(args.output)}"
        f" ({result.renamed_sequences} sequence ids and {result.renamed_tracks} track uuids renamed)",
        file=sys.stderr,
    )
    return 0
