# SPDX-License-Identifier: Apache-2.0
"""FlamegraphSpanExporter: folded stacks and a speedscope profile, aggregated over the run.

Example::

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from brickscope.exporter.flamegraph import FlamegraphSpanExporter

    exporter = FlamegraphSpanExporter("run.folded", speedscope_path="run.speedscope.json")
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    ...
    provider.shutdown()                   # writes run.folded and run.speedscope.json
"""

from __future__ import annotations

import io
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, Any, TextIO

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from brickscope.exporter.flamegraph import environment_variables as env
from brickscope.exporter.flamegraph._folded import UNITS, folded_lines, write_folded
from brickscope.exporter.flamegraph._speedscope import speedscope_document
from brickscope.exporter.flamegraph._stacks import DEFAULT_LATE_WINDOW, StackAggregator, Stats
from brickscope.exporter.flamegraph._weights import Weight
from brickscope.offline import OutputError, check_output, write_atomically
from brickscope.sdk.pacing import Pacer
from brickscope.trace import attributes as A

logger = logging.getLogger(__name__)

#: One file per process, as the Perfetto exporter's: concurrent runs never share it.
DEFAULT_PATH = "brickscope-{pid}.folded"
DEFAULT_WRITE_INTERVAL_MILLIS = 10_000
_TRUE = ("true", "1", "yes", "on")


class FlamegraphSpanExporter(SpanExporter):
    """Writes where the time goes, as a flamegraph of the span tree.

    The stack of a span is its service, then its ancestors (step, layer, brick,
    kernel, and any user span) and itself; its weight is its **self** time in
    the chosen clock, time not covered by its children (see the README for the
    exact rules). Spans arrive in any order across batches; the exporter keeps
    the aggregate and rewrites both files, atomically, on ``force_flush``,
    ``shutdown`` and at most every ``write_interval_millis`` while exporting,
    so the files are valid at every moment and a crash loses at most one
    interval.

    ``export`` runs on the span processor's thread and pauses briefly every half
    millisecond of work, so the application thread never waits long for the
    interpreter; it only folds spans into the aggregate (memory proportional to distinct stacks plus spans waiting for
    their parent) and never raises: a failure is logged once and returns
    ``FAILURE``.

    Args:
        path: folded output file; ``{pid}`` in it becomes the process id.
            Default: ``$BRICKSCOPE_FLAMEGRAPH_PATH``, else ``brickscope-{pid}.folded``
            (then ``brickscope-{pid}-1.folded``... if that exists).
        weight: ``"gpu"`` (GPU-timed spans), ``"host"`` (host interval of every
            span), or a numeric span attribute such as
            ``"brickscope.brick.elements"``. Default: ``$BRICKSCOPE_FLAMEGRAPH_WEIGHT``,
            else ``"gpu"``. Spans without it are frames but weigh nothing.
        speedscope_path: also write a speedscope JSON profile there (``{pid}``
            expanded too). Default:
            ``$BRICKSCOPE_FLAMEGRAPH_SPEEDSCOPE_PATH``, else none.
        unit: folded time unit, ``"us"`` or ``"ns"`` (speedscope is always in
            nanoseconds). Default: ``$BRICKSCOPE_FLAMEGRAPH_UNIT``, else ``"us"``.
        device_frames: put ``cuda:<device>;stream:<handle>`` frames above GPU spans.
        overwrite: replace output files that already exist. Default:
            ``$BRICKSCOPE_FLAMEGRAPH_OVERWRITE``, else False (refuse them).
        write_interval_millis: rewrite the files from ``export`` at most this
            often; None: only on ``force_flush`` and ``shutdown``.
        late_window: spans remembered for children exported after their parent.

    Raises:
        ValueError: unusable output path (missing directory, a directory, not
            writable, already exists without ``overwrite``, a symbolic link or
            anything but a regular file), unknown unit or weight.

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        weight: str | None = None,
        *,
        speedscope_path: str | os.PathLike[str] | None = None,
        unit: str | None = None,
        device_frames: bool = False,
        overwrite: bool | None = None,
        write_interval_millis: int | None = DEFAULT_WRITE_INTERVAL_MILLIS,
        late_window: int = DEFAULT_LATE_WINDOW,
    ) -> None:
        if overwrite is None:
            overwrite = os.environ.get(env.BRICKSCOPE_FLAMEGRAPH_OVERWRITE, "").lower() in _TRUE
        default = path is None and not os.environ.get(env.BRICKSCOPE_FLAMEGRAPH_PATH)
        if path is None:
            path = os.environ.get(env.BRICKSCOPE_FLAMEGRAPH_PATH) or DEFAULT_PATH
        if speedscope_path is None:
            speedscope_path = os.environ.get(env.BRICKSCOPE_FLAMEGRAPH_SPEEDSCOPE_PATH) or None
        # Default weight: GPU time, or host time when the first brickscope spans say they
        # were timed on the host clock (a session has one clock): never an empty file.
        self._auto_weight = weight is None and not os.environ.get(env.BRICKSCOPE_FLAMEGRAPH_WEIGHT)
        self._weight = Weight.parse(
            weight
            if weight is not None
            else os.environ.get(env.BRICKSCOPE_FLAMEGRAPH_WEIGHT, "gpu")
        )
        unit = unit if unit is not None else os.environ.get(env.BRICKSCOPE_FLAMEGRAPH_UNIT, "us")
        if unit not in UNITS:
            raise ValueError(f"unit must be one of {sorted(UNITS)}, got {unit!r}")
        if write_interval_millis is not None and write_interval_millis < 0:
            raise ValueError(
                f"write_interval_millis must be >= 0 or None, got {write_interval_millis}"
            )
        self._unit = unit
        self._path = _usable_output(path, overwrite, "path", numbered=default)
        self._speedscope_path = (
            _usable_output(speedscope_path, overwrite, "speedscope_path")
            if speedscope_path
            else None
        )
        if self._speedscope_path == self._path:
            raise ValueError(f"path and speedscope_path are the same file: {self._path}")
        self._stack_options = {"device_frames": device_frames, "late_window": late_window}
        self._stacks = StackAggregator(self._weight, **self._stack_options)
        self._write_interval_s = (
            None if write_interval_millis is None else write_interval_millis / 1000
        )
        self._last_write = time.monotonic()
        self._lock = threading.Lock()
        # Folding and writing pause every PACE_BUDGET_NS, so the application thread
        # never waits longer than that for the interpreter (see brickscope.sdk.pacing).
        self._pacer = Pacer()
        self._shutdown = False
        self._dirty = False  # spans folded since the last successful write
        self._written = False
        self._failures = 0
        self._bytes_written = 0
        self._logged: set[str] = set()

    @property
    def path(self) -> str:
        """The folded output file (absolute)."""
        return self._path

    @property
    def speedscope_path(self) -> str | None:
        """The speedscope output file (absolute), or None."""
        return self._speedscope_path

    @property
    def bytes_written(self) -> int:
        """Bytes written so far, summed over every write of the output files (each write
        replaces a whole file): what brickscope's self-telemetry reports as
        ``brickscope.export.bytes``."""
        return self._bytes_written

    @property
    def stats(self) -> Stats:
        """Span counts so far: received, weighted, unweighted, invalid, orphaned."""
        with self._lock:
            return Stats(**vars(self._stacks.stats))

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Fold a batch of ended spans into the aggregate. Never raises."""
        with self._lock:
            if self._shutdown:
                self._log_once(
                    "shutdown", logging.WARNING, "export() after shutdown: spans ignored"
                )
                return SpanExportResult.FAILURE
            ok = True
            self._dirty = self._dirty or bool(spans)
            if self._auto_weight:
                self._choose_weight(spans)
            pacer = self._pacer
            pacer.start()
            for span in spans:
                pacer.tick()
                try:
                    self._stacks.add(span)
                except Exception:  # a span that breaks the SDK's types must not stop the rest
                    ok = False
                    self._failures += 1
                    self._log_once(
                        "span", logging.ERROR, "cannot fold a span; skipped", exc_info=True
                    )
            interval = self._write_interval_s
            if interval is not None and time.monotonic() - self._last_write >= interval:
                ok = self._write() and ok
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def _choose_weight(self, spans: Sequence[ReadableSpan]) -> None:
        """With the default weight: the first batch carrying brickscope clocks decides:
        any GPU-timed span keeps ``gpu``; all on the host clock switches to ``host``."""
        clocks = set()
        for span in spans:
            try:
                clocks.add((span.attributes or {}).get(A.CLOCK))
            except Exception:  # a broken span: folding it says so
                continue
        clocks.discard(None)
        if not clocks:
            return
        self._auto_weight = False
        if not clocks & A.GPU_CLOCKS and self._stacks.stats.spans == 0:
            self._weight = Weight.parse("host")
            self._stacks = StackAggregator(self._weight, **self._stack_options)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Write both files now. Returns False if writing failed (logged)."""
        with self._lock:
            return False if self._shutdown else self._write()

    def shutdown(self) -> None:
        """Write the final files. Idempotent; later exports return FAILURE."""
        with self._lock:
            if self._shutdown:
                return
            if self._dirty or not self._written:
                self._write()
            self._shutdown = True
            self._log_summary()

    def __enter__(self) -> FlamegraphSpanExporter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    # -- writing -------------------------------------------------------------------

    def _write(self) -> bool:
        self._last_write = time.monotonic()
        self._dirty = False
        tick = self._pacer.tick
        try:
            tick()
            profile = self._stacks.snapshot()
            tick()
            lines = folded_lines(profile, self._unit)
            tick()
            _write_text(self._path, lambda out: write_folded(lines, out))
            self._bytes_written += os.stat(self._path).st_size
            if self._speedscope_path is not None:
                tick()
                document = speedscope_document(profile)
                tick()
                _write_text(
                    self._speedscope_path,
                    lambda out: json.dump(document, out, ensure_ascii=False, separators=(",", ":")),
                )
                self._bytes_written += os.stat(self._speedscope_path).st_size
        except Exception:
            self._failures += 1
            self._log_once("write", logging.ERROR, "cannot write %s", self._path, exc_info=True)
            self._dirty = True  # try again at the next flush
            return False
        self._written = True
        return True

    def _log_summary(self) -> None:
        stats = self._stacks.stats
        if stats.spans and not stats.weighted:
            logger.warning(
                "%s: none of %d spans carried %s; the flamegraph is empty (try weight='host')",
                self._path,
                stats.spans,
                _describe(self._weight),
            )
        elif stats.unweighted:
            logger.info(
                "%s: %d of %d spans carried no %s: shown as frames, weight 0",
                self._path,
                stats.unweighted,
                stats.spans,
                _describe(self._weight),
            )
        if stats.orphaned:
            logger.info(
                "%s: %d spans placed under their service: their parent span never arrived",
                self._path,
                stats.orphaned,
            )
        if self._failures:
            logger.warning(
                "%s: %d export or write failures (first one logged)", self._path, self._failures
            )

    def _log_once(self, key: str, level: int, message: str, *args: Any, **kwargs: Any) -> None:
        if key not in self._logged:
            self._logged.add(key)
            logger.log(level, message, *args, **kwargs)


def _describe(weight: Weight) -> str:
    return f"{weight.name} time" if weight.is_time else f"the attribute {weight.name!r}"


def _usable_output(path: str | os.PathLike[str], overwrite: bool, argument: str, *, numbered: bool = False) -> str:
    """The absolute path (``{pid}`` expanded), after checking that a file can be written there.

    ``numbered``: the default name, which takes the next free ``-1``, ``-2``... variant
    instead of failing when it exists.
    """
    text = os.fspath(path)
    if not isinstance(text, str) or not text:
        raise ValueError(f"{argument} must be a non-empty file path, got {path!r}")
    text = text.replace("{pid}", str(os.getpid()))
    flag = f"overwrite=True (${env.BRICKSCOPE_FLAMEGRAPH_OVERWRITE}=true)"
    candidate = text
    for attempt in range(1, 1000):
        try:
            return check_output(candidate, overwrite=overwrite, force_flag=flag)
        except OutputError as error:
            if not (numbered and os.path.lexists(candidate)):
                raise ValueError(f"{argument} {error}") from None
        stem, ext = os.path.splitext(text)
        candidate = f"{stem}-{attempt}{ext}"
    raise ValueError(f"{argument} {text!r} and its numbered variants all exist; pass a path")


def _write_text(path: str, write: Callable[[TextIO], None]) -> None:
    """Write a sibling temporary file, sync it, then rename it over ``path``: readers
    see the old file or the new one, never half of one (``brickscope.offline``'s rules:
    only a regular file is ever replaced)."""

    def binary(out: IO[bytes]) -> None:
        text = io.TextIOWrapper(out, encoding="utf-8", newline="\n")
        write(text)
        text.flush()
        text.detach()

    write_atomically(path, binary)
