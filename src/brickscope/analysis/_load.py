# SPDX-License-Identifier: Apache-2.0
"""Loading inputs into a :class:`~brickscope.analysis._table.Table`.

An input is a trace file (``.pftrace``, OTLP JSON or Parquet, told apart by content),
a directory of such files (per-rank files of one job; a Parquet dataset's subdirectories
too), a glob pattern, or a live
:class:`brickscope.Session`. Spans come from brickscope's one reader of each
format (:func:`_read`); this module never decodes a format itself.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

from brickscope.analysis._backend import get_backend
from brickscope.analysis._table import Table, TableBuilder
from brickscope.offline._errors import one_line
from brickscope.offline._integrity import describe_impossible
from brickscope.offline._replay import cyclic_gc_paused
from brickscope.offline._steps import StepRange
from brickscope.trace.attributes import STEP_NUMBER

#: Called as ``progress(bytes_read, total_bytes)`` over all inputs while loading.
ProgressCallback = Callable[[int, int], None]

_TRACE_SUFFIXES = (".pftrace", ".json", ".jsonl", ".json.gz", ".jsonl.gz", ".otlp.json", ".parquet")
#: What the flamegraph exporter writes beside a trace (its speedscope profile): JSON, not a trace.
_NOT_TRACES = (".speedscope.json",)


@runtime_checkable
class LiveSession(Protocol):
    """What :func:`load` reads of a live :class:`brickscope.Session` (the SDK layer sits
    above this package, which never imports it)."""

    aggregator: Any

    def sync(self) -> None: ...


class AnalysisError(ValueError):
    """An input cannot be analysed. ``str()`` is one line naming the input and the problem.

    .. versionadded:: 0.2.0
    """


def load(
    *inputs: Any,
    backend: str | None = None,
    progress: ProgressCallback | None = None,
    allow_truncated: bool = False,
    progress_for: Callable[[str], ProgressCallback | None] | None = None,
    steps: StepRange | None = None,
) -> Table:
    """Load trace files, directories of them, or live sessions into one table.

    Args:
        inputs: paths (str or PathLike) of files or directories, or Session objects.
        backend: ``"numpy"`` or ``"python"``; default numpy when installed.
        progress: called as ``progress(bytes_read, total_bytes)`` over all files while they are read.
        allow_truncated: analyse the valid prefix of a file cut short (a writer killed
            mid-write) instead of failing.
        progress_for: instead of ``progress``, a callback per file (``progress_for(path)``).
        steps: keep only the spans of these steps (``(low, high)``: ``low <= step < high``,
            an end None: open) and the spans without a step number, for what needs nothing
            else (``tree_graphs`` of those steps): the table of a few steps of a long run
            fits where the whole would not, and Parquet row groups outside the range are
            not read. Not for a report, which counts every span. Files only.

    Raises:
        AnalysisError: an input is missing, unreadable, empty, not a brickscope
            trace, truncated or corrupt, or holds only impossible spans; or no input
            holds a brick or kernel span. Impossible spans of a file that has others
            are left out, counted in ``Table.impossible`` and named in ``Table.notes``.
    """
    if not inputs:
        raise AnalysisError("brickscope: nothing to analyse (no input given)")
    engine = get_backend(backend)
    files: list[str] = []
    sessions = []
    for item in inputs:
        if isinstance(item, LiveSession):
            sessions.append(item)
        else:
            files.extend(_expand(os.fspath(item)))
    if sessions and files or len(sessions) > 1:
        raise AnalysisError("brickscope: a live session is analysed on its own, not mixed with other inputs")
    if sessions:
        session = sessions[0]
        if steps is not None:
            raise AnalysisError("brickscope: steps= selects spans of files; a live session's table is whole")
        if session.aggregator is None:
            raise AnalysisError("brickscope: this session was configured with aggregate=False: it keeps no spans")
        session.sync()
        table = session.aggregator.table(engine.name)
        _require_spans(table, "the live session")
        return table
    with cyclic_gc_paused():
        return _load_files(files, engine, progress, allow_truncated, progress_for, steps)


def load_spans(spans: Iterable[Any], *, backend: str | None = None) -> Table:
    """Spans already in memory as one table: OpenTelemetry ``ReadableSpan`` objects, such as
    an ``InMemorySpanExporter``'s or ones a test builds (``brickscope.testing.make_span``).

    Args:
        spans: ended spans, in any order (parents are found by span id).
        backend: ``"numpy"`` or ``"python"``; default numpy when installed.

    Raises:
        AnalysisError: no span among them.

    .. versionadded:: 0.2.0
    """
    builder = TableBuilder(get_backend(backend))
    builder.add_all(spans)
    table = builder.build(release=True)
    _require_spans(table, "the spans given")
    return table


def _load_files(
    files: list[str],
    engine: Any,
    progress: ProgressCallback | None,
    allow_truncated: bool,
    progress_for: Callable[[str], ProgressCallback | None] | None,
    steps: StepRange | None,
) -> Table:
    builder = TableBuilder(engine)
    sizes = [_size(path) for path in files]
    total, before = sum(sizes), 0
    for path, size in zip(files, sizes):
        report = None
        if progress is not None:
            report = (lambda offset: lambda done, _total: progress(offset + done, total))(before)
        rows = builder.rows
        callback = report if progress_for is None else progress_for(path)
        try:
            if not _add_parquet(builder, path, callback, steps):
                with _read(path, allow_truncated, callback) as spans:
                    builder.add_records(spans if steps is None else _in_steps(spans, steps))
                if spans.truncation is not None:
                    builder.notes.append(f"{spans.truncation}; analysed the valid prefix ({spans.spans_read:,} spans)")
                _note_impossible(builder, spans.dropped, spans.dropped_line())
                builder.notes.extend(f"{path}: {note}" for note in spans.notes)
        except (ValueError, OSError, EOFError) as exc:
            raise AnalysisError(_one_line(path, exc)) from None
        if builder.rows == rows:
            raise AnalysisError(f"{path}: no spans in this file")
        builder.sources.append(path)
        before += size
    table = builder.build(release=True)
    _require_spans(table, files[0] if len(files) == 1 else f"{len(files)} files")
    return table


def _add_parquet(builder: TableBuilder, path: str, progress: ProgressCallback | None, steps: StepRange | None) -> bool:
    """A Parquet span file straight into rows (brickscope.analysis._parquet) when pyarrow is
    installed and the file allows it; False: read it as spans."""
    from brickscope.analysis._parquet import add_parquet, is_parquet

    if not is_parquet(path) or importlib.util.find_spec("pyarrow") is None:
        return False
    added = add_parquet(builder, path, progress, steps)
    if added is None:
        return False
    rows, dropped = added
    if dropped:
        count = sum(dropped.values())
        line = one_line(f"{path}: {count:,} impossible span{'s' if count > 1 else ''} left out ({describe_impossible(dropped)})")
        if not rows:
            raise AnalysisError(one_line(f"{path}: every span is impossible ({describe_impossible(dropped)}): refused"))
        _note_impossible(builder, dropped, line)
    return True


def _in_steps(records: Iterable[Any], steps: StepRange) -> Iterator[Any]:
    """The records of ``steps`` and those without an integer step number (the rule of
    :func:`brickscope.analysis._parquet.add_parquet`'s filter, on the record path)."""
    low, high = steps
    for record in records:
        step = record[6].get(STEP_NUMBER)
        if type(step) is not int or ((low is None or step >= low) and (high is None or step < high)):
            yield record


def _note_impossible(builder: TableBuilder, dropped: dict[str, int], line: str | None) -> None:
    """Count a file's impossible spans in the table and say so in its notes."""
    if dropped and line is not None:
        for reason, count in dropped.items():
            builder.impossible[reason] = builder.impossible.get(reason, 0) + count
        builder.notes.append(line)


def _expand(path: str) -> list[str]:
    """The trace files an input names: the file; a directory's trace files, with the
    ``.parquet`` files of its subdirectories (a Parquet dataset, one directory per run or
    rank); or the files a glob pattern matches."""
    if os.path.isdir(path):
        names = sorted(
            name
            for name in os.listdir(path)
            if name.endswith(_TRACE_SUFFIXES)
            and not name.endswith(_NOT_TRACES)
            and os.path.isfile(os.path.join(path, name))
        )
        nested = sorted(
            os.path.join(root, name)
            for root, _dirs, files in os.walk(path)
            if root != path
            for name in files
            if name.endswith(".parquet") and not name.startswith(".")
        )
        if not names and not nested:
            raise AnalysisError(f"{path}: directory holds no trace files ({', '.join(_TRACE_SUFFIXES)})")
        return [os.path.join(path, name) for name in names] + nested
    if not os.path.exists(path) and glob.has_magic(path):
        matched = sorted(name for name in glob.glob(path, recursive=True) if os.path.isfile(name))
        if not matched:
            raise AnalysisError(f"{path}: no file matches this pattern")
        return matched
    if not os.path.exists(path):
        raise AnalysisError(f"{path}: no such file or directory")
    if not os.path.isfile(path):
        raise AnalysisError(f"{path}: not a regular file")
    return [path]


def _size(path: str) -> int:
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise AnalysisError(_one_line(path, exc)) from None
    if size == 0:
        raise AnalysisError(f"{path}: empty file")
    return size


def _read(path: str, allow_truncated: bool, progress: ProgressCallback | None) -> Any:
    """The spans of one file as SpanRecords, from brickscope's one reader of its format
    (a context manager)."""
    from brickscope.offline import open_records

    return open_records(path, allow_truncated=allow_truncated, progress=progress)


def _require_spans(table: Table, what: str) -> None:
    """A table of no span has nothing to analyse; spans of no brickscope kind (another
    producer's slices) have their own section (docs/analysis.md)."""
    if not table.rows:
        raise AnalysisError(f"{what}: no spans")


def _one_line(path: str, exc: BaseException) -> str:
    """The reader's own line (TraceFileError names the file), or one made from an OSError."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{path}: {exc.strerror}"
    message = one_line(str(exc)) or type(exc).__name__
    return message if message.startswith(path) else f"{path}: {message}"
