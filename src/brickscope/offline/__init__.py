# SPDX-License-Identifier: Apache-2.0
"""Reading recorded traces back, offline: one entry point, one error type, one replay loop.

Example::

    from brickscope.offline import TraceFileError, open_spans

    try:
        with open_spans("run.pftrace") as spans:
            for span in spans:
                print(span.name, span.end_time - span.start_time)
    except TraceFileError as error:
        print(error)   # run.pftrace: offset 4096: truncated: ...

Every offline tool (``brickscope convert``, ``flamegraph``, the analysis
commands) reads through :func:`open_spans`, feeds exporters through
:func:`replay` (with the cyclic collector paused: :func:`cyclic_gc_paused`), and writes its outputs through :class:`AtomicOutput`
(:func:`write_chrome_trace` writes spans as Chrome trace JSON); a format
beyond OTLP JSON and Chrome trace JSON (torch.profiler's traces included) is
added by registering a :class:`TraceFormat` under the ``brickscope.readers``
entry-point group. The Parquet span format is written by
:class:`ParquetSpanWriter` and read like every other format (:func:`parquet_files` lists
a dataset's files; :func:`parquet_schema` is its Arrow schema). Every command's ``--step`` is read by
:func:`step_argument` (``N``, ``A:B``, ``A:``, ``:B``). Every reader leaves out spans that
cannot be true (:func:`impossible`) and counts them by reason in ``SpanStream.dropped``.
"""

from brickscope.offline._chrome import write_chrome_trace
from brickscope.offline._errors import TraceFileError, UsageError, one_line
from brickscope.offline._formats import READERS_GROUP, SpanRecord, TraceFormat, span_record
from brickscope.offline._integrity import (
    GPU_DURATION_TOLERANCE_NS,
    IMPOSSIBLE_REASONS,
    NONNEGATIVE_KEYS,
    describe_impossible,
    impossible,
)
from brickscope.offline._open import SpanStream, open_records, open_spans
from brickscope.offline._output import AtomicOutput, OutputError, check_output, write_atomically
from brickscope.offline._parquet_read import ParquetFormatError, check_parquet_schema, parquet_files
from brickscope.offline._parquet_schema import (
    PARQUET_COLUMNS,
    PARQUET_SCHEMA_VERSION,
    Column,
    parquet_schema,
)
from brickscope.offline._parquet_write import ParquetSpanWriter
from brickscope.offline._replay import Progress, cyclic_gc_paused, replay
from brickscope.offline._source import ProgressCallback, TraceSource
from brickscope.offline._steps import StepRange, describe_steps, parse_steps, step_argument

__all__ = [
    "GPU_DURATION_TOLERANCE_NS",
    "NONNEGATIVE_KEYS",
    "IMPOSSIBLE_REASONS",
    "READERS_GROUP",
    "AtomicOutput",
    "OutputError",
    "PARQUET_COLUMNS",
    "PARQUET_SCHEMA_VERSION",
    "Column",
    "ParquetFormatError",
    "ParquetSpanWriter",
    "Progress",
    "ProgressCallback",
    "SpanRecord",
    "SpanStream",
    "StepRange",
    "TraceFileError",
    "TraceFormat",
    "TraceSource",
    "UsageError",
    "check_output",
    "cyclic_gc_paused",
    "describe_impossible",
    "describe_steps",
    "impossible",
    "one_line",
    "parquet_files",
    "parquet_schema",
    "check_parquet_schema",
    "open_records",
    "open_spans",
    "parse_steps",
    "replay",
    "span_record",
    "step_argument",
    "write_atomically",
    "write_chrome_trace",
]
