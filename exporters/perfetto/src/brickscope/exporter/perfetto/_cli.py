# SPDX-License-Identifier: Apache-2.0
"""The ``brickscope convert`` and ``brickscope merge`` subcommands.

Example::

    $ brickscope convert spans.jsonl -o trace.pftrace
    $ brickscope convert trace.pftrace -o trace.json          # Chrome trace JSON
    $ brickscope convert trace.pftrace -o trace.parquet --run baseline   # the Parquet span format
    $ brickscope convert rank*.pftrace -o job42/      # a Parquet dataset: job42/rank0.parquet, ...
    $ brickscope merge rank0.pftrace rank1.pftrace -o all.pftrace

Both register through the ``brickscope.commands`` entry-point group, read
through :mod:`brickscope.offline` and write atomically (nothing is left behind
on failure); errors and exit statuses are the ``brickscope`` command's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Any

_TRUNCATED_HELP = "read the valid prefix of a truncated input (a writer killed mid-write) instead of failing"

#: What ``convert`` writes: format name -> the output extension that implies it.
OUTPUT_FORMATS = {"pftrace": ".pftrace", "chrome-json": ".json", "parquet": ".parquet"}


def register_convert(subparsers: Any) -> None:
    """Add ``brickscope convert``: any trace brickscope reads to ``.pftrace``, Chrome trace JSON or Parquet."""
    parser = subparsers.add_parser(
        "convert",
        help="convert a trace to a Perfetto trace, Chrome trace JSON or Parquet",
        description=(
            "Convert a trace brickscope reads (OTLP JSON from the OpenTelemetry Collector's file exporter "
            "or opentelemetry-exporter-otlp-json-file, JSON Lines or one document, gzip accepted; a .pftrace; "
            "Chrome trace JSON, torch.profiler's included) "
            "into a Perfetto .pftrace or Chrome trace JSON, to open in https://ui.perfetto.dev or "
            "chrome://tracing, or into the Parquet span format, to query with DuckDB or Spark. "
            "The output's format is --to, or else its extension: .pftrace, .json or .parquet. "
            "Several inputs make a Parquet dataset: the output is a directory (created if missing) that gets one "
            "<input name>.parquet per input, all with the directory's name as their run unless --run is given; "
            "written all or nothing."
        ),
    )
    parser.add_argument("inputs", nargs="+", metavar="input", help="OTLP JSON file (or any trace brickscope reads)")
    parser.add_argument(
        "-o", "--output", required=True,
        help="the file to write (.pftrace, .json or .parquet), or with several inputs the dataset's directory",
    )  # fmt: skip
    parser.add_argument(
        "--to",
        choices=sorted(OUTPUT_FORMATS),
        help="the output format (default: from the output's extension, .pftrace, .json or .parquet)",
    )
    parser.add_argument(
        "--run",
        help=(
            "Parquet: the run column, a name for this run (default: the input's file name without its extension;"
            " with several inputs, the output directory's name)"
        ),
    )
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
            "sequences and track uuids that collide. Timestamps stay on the wall clock. An input in "
            "another format brickscope reads (OTLP JSON, Chrome trace JSON) is converted first."
        ),
    )
    parser.add_argument("inputs", nargs="+", help=".pftrace files (or any trace brickscope reads)")
    parser.add_argument("-o", "--output", required=True, help="the merged .pftrace to write")
    parser.add_argument("-f", "--force", action="store_true", help="overwrite the output if it exists")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    parser.add_argument("--allow-truncated", action="store_true", help=_TRUNCATED_HELP)
    parser.set_defaults(func=_merge)


def output_format(path: str, to: str | None) -> str:
    """The format ``convert`` writes ``path`` in: ``to`` when given, else told by the extension.

    Raises UsageError (one line, exit 2) for an extension no format has while ``to`` is not
    given, and for one that belongs to another format than ``to``.
    """
    from brickscope.offline import UsageError

    extension = os.path.splitext(path)[1].lower()
    implied = next((name for name, ext in OUTPUT_FORMATS.items() if ext == extension), None)
    if to is None:
        if implied is None:
            known = " or ".join(OUTPUT_FORMATS.values())
            raise UsageError(
                f"{path}: unknown output extension {extension or '(none)'!r}; name it {known},"
                f" or give --to {{{','.join(sorted(OUTPUT_FORMATS))}}}"
            )
        return implied
    if implied is not None and implied != to:
        raise UsageError(f"{path}: the extension {extension} is for {implied}, not --to {to}; rename the output")
    return to


def _convert(args: argparse.Namespace) -> int:
    """``brickscope convert``, its process's cyclic collector paused: what it reads and writes
    is acyclic and freed by reference counting (see ``brickscope.offline.cyclic_gc_paused``)."""
    from brickscope.offline import cyclic_gc_paused

    with cyclic_gc_paused():
        if len(args.inputs) > 1:
            return _convert_to_dataset(args)
        return _convert_one(args)


def _convert_one(args: argparse.Namespace) -> int:
    """One input into one output file, in the format ``output_format`` chose."""
    from brickscope.offline import AtomicOutput, Progress, TraceFileError, UsageError, replay, write_chrome_trace

    from ._exporter import PerfettoSpanExporter

    (source,) = args.inputs
    chosen = output_format(args.output, args.to)
    if args.run is not None and chosen != "parquet":
        raise UsageError(f"--run names the run column of a Parquet output, not of {chosen}")
    if chosen == "parquet":
        _require_pyarrow()
    with AtomicOutput(args.output, overwrite=args.force, inputs=[source], force_flag="--force") as output:
        progress = Progress(source, quiet=args.quiet)
        try:
            with _open(args, source, progress) as spans:
                if chosen == "chrome-json":
                    with output.open() as out:
                        count = write_chrome_trace(spans, out)
                elif chosen == "parquet":
                    count = _write_parquet(spans, output.temporary, args.run or _stem(source), progress)
                else:
                    with PerfettoSpanExporter(output.temporary) as exporter:
                        count = replay(spans, exporter, on_batch=lambda n: setattr(progress, "extra", f", {n:,} spans"))
        finally:
            progress.finish()
        if not count:
            raise TraceFileError(source, "no spans in this file")
        output.commit()
    _report_truncation(spans)
    print(f"wrote {count:,} spans to {output.path}", file=sys.stderr)
    return 0


def _convert_to_dataset(args: argparse.Namespace) -> int:
    """Several inputs into one Parquet dataset directory: one file per input, all or nothing.

    Every destination is checked before anything is read; each file is written to a
    temporary beside it and the files are moved into place only once every input has
    been converted, so a bad input leaves the directory as it was (removed if this
    command created it).
    """
    from brickscope.offline import AtomicOutput, Progress, TraceFileError, UsageError

    if args.to not in (None, "parquet"):
        raise UsageError(f"several inputs make a Parquet dataset, not --to {args.to}; convert them one at a time")
    directory = args.output
    if os.path.splitext(directory.rstrip("/\\"))[1].lower() in OUTPUT_FORMATS.values():
        raise UsageError(
            f"{directory}: several inputs need a directory to write a Parquet dataset into, not a file name"
        )
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise UsageError(f"{directory}: not a directory (several inputs make a Parquet dataset in a directory)")
    names = [_stem(path) + ".parquet" for path in args.inputs]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UsageError(f"two inputs would both be written to {twice[0]}; rename one, or convert them one at a time")
    _require_pyarrow()
    run = args.run or os.path.basename(os.path.abspath(directory))
    created = not os.path.isdir(directory)
    if created:
        parent = os.path.dirname(os.path.abspath(directory))
        if not os.path.isdir(parent):
            raise UsageError(f"{directory}: directory {parent} does not exist")
        os.mkdir(directory)
    outputs: list[AtomicOutput] = []
    try:
        for name in names:
            destination = os.path.join(directory, name)
            outputs.append(AtomicOutput(destination, overwrite=args.force, inputs=args.inputs, force_flag="--force"))
        counts, readers = [], []
        for source, output in zip(args.inputs, outputs):
            progress = Progress(source, quiet=args.quiet)
            try:
                with _open(args, source, progress) as spans:
                    counts.append(_write_parquet(spans, output.temporary, run, progress))
            finally:
                progress.finish()
            if not counts[-1]:
                raise TraceFileError(source, "no spans in this file")
            readers.append(spans)
        for output in outputs:
            output.commit()
    except BaseException:
        for output in outputs:
            output.abort()
        if created:
            shutil.rmtree(directory, ignore_errors=True)
        raise
    for spans in readers:
        _report_truncation(spans)
    print(f"wrote {sum(counts):,} spans to {len(outputs)} files in {directory} (run {run!r})", file=sys.stderr)
    return 0


def _open(args: argparse.Namespace, source: str, progress: Any) -> Any:
    from brickscope.offline import open_spans

    return open_spans(source, allow_truncated=args.allow_truncated, progress=progress)


def _require_pyarrow() -> None:
    """A Parquet output needs pyarrow: without it, one line saying what to install (exit 2)."""
    from brickscope.offline import UsageError, parquet_schema

    try:
        parquet_schema()
    except ImportError as error:
        raise UsageError(str(error)) from None


def _write_parquet(spans: Any, path: str, run: str, progress: Any) -> int:
    """Every span into one Parquet file (row groups written as they fill); how many were written."""
    from itertools import islice

    from brickscope.offline import ParquetSpanWriter

    with ParquetSpanWriter(path, run=run) as writer:
        while chunk := list(islice(spans, 4096)):
            writer.write(chunk)
            progress.extra = f", {writer.spans_written:,} spans"
    return writer.spans_written


def _stem(path: str) -> str:
    """``run`` of ``runs/run.jsonl.gz``: the file name without its extensions."""
    name = os.path.basename(path)
    return name.split(".", 1)[0] or name


def _report_truncation(spans: Any) -> None:
    """The stderr lines about what reading left out: impossible spans, a truncated tail."""
    if spans.dropped:
        print(spans.dropped_line(), file=sys.stderr)
    for note in spans.notes:
        print(f"{spans.path}: {note}", file=sys.stderr)
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
