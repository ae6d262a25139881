# SPDX-License-Identifier: Apache-2.0
"""Read spans from OTLP JSON files (kept for compatibility: use :mod:`brickscope.offline`).

Example::

    from brickscope.otlp_json import read_spans

    for span in read_spans("spans.jsonl"):
        print(span.name, span.end_time - span.start_time)

The format is described in ``brickscope.offline._otlp_json``;
:func:`brickscope.offline.open_spans` reads it and every other format.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

from opentelemetry.sdk.trace import ReadableSpan

from brickscope.offline import ProgressCallback, TraceSource
from brickscope.offline._formats import OTLP_JSON, sniff

__all__ = ["read_spans"]

_logger = logging.getLogger(__name__)


def read_spans(
    path: str | os.PathLike[str], *, progress: ProgressCallback | None = None
) -> Iterator[ReadableSpan]:
    """Yield every span of an OTLP JSON file, in file order.

    Args:
        path: a JSON Lines file (one ``ExportTraceServiceRequest`` per line) or a
            single JSON document; gzip-compressed files are accepted.
        progress: called as ``progress(bytes_read, total_bytes)`` now and then
            while reading (sizes of the file on disk), and once at the end.

    Raises:
        TraceFileError: (a ValueError) the file is not OTLP JSON; the message
            names the file, the line and the field. Impossible spans are left out,
            with a warning naming the file and how many.
        OSError: the file cannot be read.
    """
    source = TraceSource(os.fspath(path), progress=progress)
    try:
        found = sniff(source)
        if found is not OTLP_JSON:
            raise source.error(f"not OTLP JSON (this is a {found.name} file: read it with brickscope.offline.open_spans)")
        yield from found.read(source)
        source.report_progress(final=True)
        if source.dropped:
            _logger.warning("%s", source.dropped_line())
    finally:
        source.close()
