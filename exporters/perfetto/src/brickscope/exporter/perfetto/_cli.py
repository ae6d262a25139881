# SPDX-License-Identifier: Apache-2.0
"""The ``brickscope convert`` and ``brickscope merge`` subcommands.

Example::

    $ brickscope convert spans.jsonl -o trace.pftrace
    $ brickscope merge rank0.pftrace rank1.pftrace -o all.pftrace

Both register through the ``brickscope.commands`` entry-point group, read
through :mod:`brickscope.offline` and write atomically (nothing is left behind
on failure); errors and exit statuses are the ``brickscope`` command's.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

_TRUNCATED_HELP = "read the valid prefix of a truncated input (a writer killed mid-write) instead of failing"


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
    parser.add_argument("input", help="OTLP JSON file (or any trace brickscope reads)")
    parser.add_argument("-o", "--output", required=True, help="the .pftrace to write")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite the output if it exists")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    parser.add_argument("--allow-truncated", action="store_true", help=_TRUNCATED_HELP)
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
    parser.add_argument("--allow-truncated", action="store_true", help=_TRUNCATED_HELP)
    parser.set_defaults(func=_merge)


def _convert(args: argparse.Namespace) -> int:
    from brickscope.offline import AtomicOutput, Progress, TraceFileError, open_spans, replay

    from ._exporter import PerfettoSpanExporter

    with AtomicOutput(args.output, overwrite=args.force, inputs=[args.input], force_flag="--force") as output:
        progress = Progress(args.input, quiet=args.quiet)
        try:
            with open_spans(args.input, allow_truncated=args.allow_truncated, progress=progress) as spans:
                with PerfettoSpanExporter(output.temporary) as exporter:
                    count = replay(spans, exporter, on_batch=lambda n: setattr(progress, "extra", f", {n:,} spans"))
        finally:
            progress.finish()
        if not count:
            raise TraceFileError(args.input, "no spans in this file")
        output.commit()
    _report_truncation(spans)
    print(f"wrote {count:,} spans to {output.path}", file=sys.stderr)
    return 0


def _report_truncation(spans: Any) -> None:
    """The stderr lines about what reading left out: impossible spans, a truncated tail."""
    if spans.dropped:
        print(spans.dropped_line(), file=sys.stderr)
    if spans.truncation is not None:
        print(
            f"{spans.truncation}; read the valid prefix ({spans.spans_read:,} spans, --allow-truncated)",
            file=sys.stderr,
        )


def _merge(args: argparse.Namespace) -> int:
    from brickscope.offline import Progress

    from ._merge import merge_traces

    progress = {path: Progress(path, quiet=args.quiet) for path in args.inputs}
    result = merge_traces(
        args.inputs,
        args.output,
        overwrite=args.force,
        allow_truncated=args.allow_truncated,
        progress=lambda path, done, total: progress[path](done, total),
        force_flag="--force",
    )
    for cut in result.truncations:
        print(f"{cut}; copied the packets before the cut (--allow-truncated)", file=sys.stderr)
    print(
        f"merged {sum(result.packets):,} packets from {len(args.inputs)} files into {os.fspath(args.output)}"
        f" ({result.renamed_sequences} sequence ids, {result.renamed_tracks} track uuids and"
        f" {result.renamed_processes} process ids renamed)",
        file=sys.stderr,
    )
    return 0
