# SPDX-License-Identifier: Apache-2.0
"""Loading inputs into a :class:`~brickscope.analysis._table.Table`.

An input is a trace file (``.pftrace`` or OTLP JSON, told apart by content), a
directory of such files (per-rank files of one job), or a live
:class:`brickscope.Session`. Spans come from brickscope's one reader of each
format (:func:`_read`); this module never decodes a format itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from brickscope.analysis._backend import get_backend
from brickscope.analysis._table import KIND_BRICK, KIND_KERNEL, Table, TableBuilder

#: Called as ``progress(bytes_read, total_bytes)`` over all inputs while loading.
ProgressCallback = Callable[[int, int], None]

_TRACE_SUFFIXES = (".pftrace", ".json", ".jsonl", ".json.gz", ".jsonl.gz", ".otlp.json")
_JSON_STARTS = (b"{", b"[", b"\xef\xbb\xbf", b"\x1f\x8b")  # JSON, UTF-8 BOM, gzip


class AnalysisError(Exception):
    """An input cannot be analysed. ``str()`` is one line naming the input and the problem.

    .. versionadded:: 0.2.0
    """


def load(
    *inputs: Any,
    backend: str | None = None,
    progress: ProgressCallback | None = None,
) -> Table:
    """Load trace files, directories of them, or live sessions into one table.

    Args:
        inputs: paths (str or PathLike) of files or directories, or Session objects.
        backend: ``"numpy"`` or ``"python"``; default numpy when installed.
        progress: called as ``progress(bytes_read, total_bytes)`` while files are read.

    Raises:
        AnalysisError: an input is missing, unreadable, empty, not a brickscope
            trace, truncated or corrupt; or no input holds a brick or kernel span.
    """
    if not inputs:
        raise AnalysisError("brickscope: nothing to analyse (no input given)")
    engine = get_backend(backend)
    files: list[str] = []
    sessions = []
    for item in inputs:
        if hasattr(item, "analysis_table"):
            sessions.append(item)
        else:
            files.extend(_expand(os.fspath(item)))
    if sessions and files or len(sessions) > 1:
        raise AnalysisError("brickscope: a live session is analysed on its own, not mixed with other inputs")
    if sessions:
        table = sessions[0].analysis_table(engine)
        _require_work(table, "the live session")
        return table
    builder = TableBuilder(engine)
    sizes = [_size(path) for path in files]
    total, before = sum(sizes), 0
    for path, size in zip(files, sizes):
        report = None
        if progress is not None:
            report = (lambda offset: lambda done, _total: progress(offset + done, total))(before)
        rows = builder.rows
        try:
            builder.add_all(_read(path, report))
        except AnalysisError:
            raise
        except (ValueError, OSError, EOFError) as exc:
            raise AnalysisError(_one_line(path, exc)) from None
        if builder.rows == rows:
            raise AnalysisError(f"{path}: no spans in this file")
        builder.sources.append(path)
        before += size
    table = builder.build()
    _require_work(table, files[0] if len(files) == 1 else f"{len(files)} files")
    return table


def _expand(path: str) -> list[str]:
    if os.path.isdir(path):
        names = sorted(
            name for name in os.listdir(path)
            if name.endswith(_TRACE_SUFFIXES) and os.path.isfile(os.path.join(path, name))
        )
        if not names:
            raise AnalysisError(f"{path}: directory holds no trace files ({', '.join(_TRACE_SUFFIXES)})")
        return [os.path.join(path, name) for name in names]
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


def _read(path: str, progress: ProgressCallback | None) -> Iterator[Any]:
    """The spans of one file, from brickscope's reader of its format (chosen by content)."""
    try:
        from brickscope.offline import open_spans  # the core's one reading API, when installed
    except ImportError:
        pass
    else:
        return open_spans(path, progress=progress)
    with open(path, "rb") as probe:
        head = probe.read(64).lstrip()
    if head.startswith(_JSON_STARTS):
        from brickscope.otlp_json import read_spans

        return read_spans(path, progress=progress)
    # TODO(issue 12): until brickscope.offline lands, the Perfetto reader is found by name.
    try:
        from brickscope.exporter.perfetto import read_spans as read_pftrace
    except ImportError:
        raise AnalysisError(
            f"{path}: not OTLP JSON; reading a .pftrace needs brickscope-exporter-perfetto"
        ) from None
    return iter(read_pftrace(path, progress=progress))


def _require_work(table: Table, what: str) -> None:
    be = table.backend
    work = be.count_true(be.mask_in(table["kind"], (KIND_BRICK, KIND_KERNEL)))
    if not work:
        raise AnalysisError(
            f"{what}: {table.rows} spans but no brickscope brick or kernel span (not a brickscope trace?)"
        )


def _one_line(path: str, exc: BaseException) -> str:
    message = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        message = exc.strerror
    return message if message.startswith(path) else f"{path}: {message}"
