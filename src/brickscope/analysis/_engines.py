# SPDX-License-Identifier: Apache-2.0
"""Which engine builds a report's table: the in-memory one, DuckDB, or Spark.

Every engine gives the same table of the same spans, so the same figures; they differ in
what they read and how far they scale. The in-memory engine reads every format; the SQL
engines read Parquet span files (``brickscope convert TRACE -o TRACE.parquet`` makes them).
By default Parquet inputs of at least :data:`DUCKDB_MIN_SPANS` spans go to DuckDB when it is
installed, everything else stays in memory (docs/analysis.md, "Engines").

Example::

    choice = choose(["runs/job-17/"], None)      # Choice(engine="duckdb", reason="...")
    report = report_with(choice.engine, ["runs/job-17/"], top=5)   # a SQL engine, out of core
    table = load_with(choice.engine, ["runs/job-17/"])             # any engine: the table in memory
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from brickscope.analysis._load import AnalysisError, _expand, load
from brickscope.offline import StepRange

#: The engines, as ``--engine`` names them.
ENGINES = ("memory", "duckdb", "spark")
#: Parquet inputs of at least this many spans go to DuckDB by default: below it the in-memory
#: engine's table fits easily (about 0.7 KB a span) and starts faster than a DuckDB session.
DUCKDB_MIN_SPANS = 1_000_000


#: Peak memory of the in-memory engine a span, by command, measured on generated traces (1M
#: spans: report 1.06 GB, tree 1.43 GB with the interpreter; docs/analysis.md): a Parquet input
#: whose table would need more than the memory available is refused before it is read.
MEMORY_PER_SPAN = {"report": 1_000, "diff": 1_000, "tree": 1_400}


@dataclass(frozen=True)
class Choice:
    """The engine chosen for some inputs, and why, in words: the line ``report`` prints when
    it chose by itself among several (empty where only the in-memory engine reads the inputs)."""

    engine: str
    reason: str


def is_parquet(path: str) -> bool:
    """Whether an input names only Parquet span files: a ``.parquet`` file, or a directory or glob
    whose trace files (as :func:`~brickscope.analysis.load` finds them) are all ``.parquet``; a
    URI is taken to (Spark reads it, and names a file that is not one).

    Raises:
        AnalysisError: the input is missing, or a directory or glob names no trace file.
    """
    if is_uri(path):
        return True
    return all(name.endswith(".parquet") for name in _expand(path))


def is_uri(path: str) -> bool:
    """Whether an input is a URI (``s3a://bucket/run/``, ``hdfs://...``): Spark's file systems read it."""
    return "://" in path


def choose(inputs: Sequence[str], requested: str | None) -> Choice:
    """The engine for ``inputs``: ``requested`` when given (checked it can read them), else the
    default rule of the module docstring.

    Raises:
        AnalysisError: a SQL engine was asked for inputs that are not Parquet span files.
    """
    for path in map(os.fspath, inputs):
        if is_uri(path) and requested != "spark":
            raise AnalysisError(f"{path}: a URI, which --engine spark reads (the other engines read local files)")
    parquet = bool(inputs) and all(is_parquet(os.fspath(path)) for path in inputs)
    if requested is not None:
        if requested != "memory" and not parquet:
            other = next(name for path in inputs for name in _expand(os.fspath(path)) if not name.endswith(".parquet"))
            raise AnalysisError(
                f"{other}: --engine {requested} reads Parquet span files;"
                f" convert it first (brickscope convert {other} -o {_stem(other)}.parquet) or use --engine memory"
            )
        return Choice(requested, f"engine {requested} (--engine)")
    if not parquet:
        return Choice("memory", "")
    from brickscope.analysis import _duckdb

    if not _duckdb.available():
        return Choice("memory", "engine memory (duckdb is not installed: pip install 'brickscope[duckdb]')")
    spans = _duckdb.count_spans(_duckdb.parquet_files(*map(os.fspath, inputs)))
    if spans < DUCKDB_MIN_SPANS:
        return Choice("memory", f"engine memory ({spans:,} spans, under {DUCKDB_MIN_SPANS:,}; --engine to choose)")
    return Choice("duckdb", f"engine duckdb ({spans:,} spans in Parquet; --engine to choose)")


def check_memory(inputs: Sequence[str], command: str, hint: str) -> None:
    """Refuse Parquet inputs whose in-memory table would not fit in the memory available now.

    Only Parquet inputs are checked (their footers give the exact number of spans; nothing
    else is read): a run that cannot fit is refused in one line before minutes of reading
    end in the kernel's out-of-memory killer. Other formats, and systems where the available
    memory is not known, are not checked.

    Raises:
        AnalysisError: the estimate (spans x :data:`MEMORY_PER_SPAN`) exceeds the available
            memory; the message gives both and ``hint`` (what to do instead).
    """
    paths = [os.fspath(path) for path in inputs]
    if not local_parquet(paths):
        return
    available = available_memory()
    if available is None:
        return
    import pyarrow.parquet as pq

    spans = 0
    for name in (file for path in paths for file in _expand(path)):
        try:
            spans += pq.read_metadata(name).num_rows
        except (OSError, ValueError):
            return  # the loader names the file and its problem
    needed = spans * MEMORY_PER_SPAN[command]
    if needed > available:
        raise AnalysisError(
            f"{paths[0] if len(paths) == 1 else f'{len(paths)} inputs'}: {spans:,} spans need about {_size(needed)} in"
            f" memory ({MEMORY_PER_SPAN[command]:,} bytes a span), {_size(available)} is available; {hint}"
        )


def _size(size: int) -> str:
    return f"{size / 1e9:.1f} GB" if size >= 1e9 else f"{size / 1e6:.1f} MB"


def local_parquet(inputs: Sequence[str]) -> bool:
    """Whether pyarrow can read ``inputs`` here: some inputs, every one local Parquet span files."""
    paths = [os.fspath(path) for path in inputs]
    if not paths or importlib.util.find_spec("pyarrow") is None:
        return False
    return all(is_parquet(path) and not is_uri(path) for path in paths)


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation now (Linux ``MemAvailable``); None elsewhere."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def load_with(
    engine: str,
    inputs: Sequence[str],
    *,
    backend: str | None = None,
    allow_truncated: bool = False,
    progress_for: Callable[[str], Any] | None = None,
    steps: StepRange | None = None,
) -> Any:
    """The table of ``inputs`` built by ``engine`` (see :func:`choose`); ``steps``: the
    in-memory engine's selection of :func:`~brickscope.analysis.load`.

    Raises:
        AnalysisError: as :func:`~brickscope.analysis.load` and the engine's loader say, or
            the engine is not installed.
    """
    if engine == "memory":
        return load(*inputs, backend=backend, allow_truncated=allow_truncated, progress_for=progress_for, steps=steps)
    if steps is not None:
        raise AnalysisError(f"--engine {engine} loads every step (steps are chosen by the in-memory engine)")
    if engine == "duckdb":
        from brickscope.analysis._duckdb import load_parquet

        progress = progress_for(f"{_label(inputs)} (duckdb)") if progress_for is not None else None
        return load_parquet(*map(os.fspath, inputs), backend=backend, progress=progress)
    if engine == "spark":
        from brickscope.analysis._spark import load_spark

        return load_spark(*map(os.fspath, inputs), backend=backend)
    raise AnalysisError(f"--engine {engine}: not available in this installation")


def report_with(
    engine: str,
    inputs: Sequence[str],
    *,
    backend: str | None = None,
    progress_for: Callable[[str], Any] | None = None,
    **options: Any,
) -> Any:
    """The report of ``inputs`` computed by a SQL ``engine`` out of core (``options``: those of
    :func:`~brickscope.analysis.analyse`).

    Raises:
        AnalysisError: as :func:`~brickscope.analysis.analyse` and the engine's loader say, or the
            engine is not installed.
    """
    if engine == "duckdb":
        from brickscope.analysis._duckdb import report_parquet

        progress = progress_for(f"{_label(inputs)} (duckdb)") if progress_for is not None else None
        return report_parquet(*map(os.fspath, inputs), backend=backend, progress=progress, **options)
    if engine == "spark":
        from brickscope.analysis._spark import report_spark

        return report_spark(*map(os.fspath, inputs), backend=backend, **options)
    raise AnalysisError(f"--engine {engine}: not available in this installation")


def summarise_with(
    engine: str,
    inputs: Sequence[str],
    *,
    backend: str | None = None,
    progress_for: Callable[[str], Any] | None = None,
    **filters: Any,
) -> Any:
    """One run's summary for ``diff`` computed by a SQL ``engine`` (``filters``: ``steps``,
    ``ranks``, ``devices``), and the notes on its input.

    Raises:
        AnalysisError: as :func:`~brickscope.analysis.select` and the engine's loader say, or the
            engine is not installed.
    """
    if engine == "duckdb":
        from brickscope.analysis._duckdb import summarise_parquet

        progress = progress_for(f"{_label(inputs)} (duckdb)") if progress_for is not None else None
        return summarise_parquet(*map(os.fspath, inputs), backend=backend, progress=progress, **filters)
    if engine == "spark":
        from brickscope.analysis._spark import summarise_spark

        return summarise_spark(*map(os.fspath, inputs), backend=backend, **filters)
    raise AnalysisError(f"--engine {engine}: not available in this installation")


def _label(inputs: Sequence[str]) -> str:
    return os.path.basename(os.fspath(inputs[0]).rstrip(os.sep)) if len(inputs) == 1 else f"{len(inputs)} inputs"


def _stem(path: str) -> str:
    name = os.path.basename(path.rstrip(os.sep))
    for suffix in (".pftrace", ".json.gz", ".jsonl.gz", ".otlp.json", ".json", ".jsonl"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name
