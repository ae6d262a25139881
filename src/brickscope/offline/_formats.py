# SPDX-License-Identifier: Apache-2.0
"""Trace formats and how a file's format is told: by its first bytes, once.

Example (an exporter distribution's ``pyproject.toml``)::

    [project.entry-points."brickscope.readers"]
    pftrace = "brickscope.exporter.perfetto._reader:PFTRACE"

The core reads OTLP JSON and Chrome trace JSON (torch.profiler's traces) itself. Other formats come from installed
distributions through the ``brickscope.readers`` entry-point group: each entry
point names a :class:`TraceFormat` instance, so the core never imports an
exporter.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from functools import lru_cache
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from ._source import TraceSource

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan

_logger = logging.getLogger(__name__)

#: The entry-point group other distributions register their formats in.
READERS_GROUP = "brickscope.readers"
#: How many leading bytes (of the decompressed stream) :meth:`TraceFormat.matches` sees.
HEAD_BYTES = 64

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_UTF8_BOM = b"\xef\xbb\xbf"
_PFTRACE_TAG = 0x0A  # Trace.packet, field 1, length-delimited


#: A span as a plain tuple, for consumers that need no ``ReadableSpan`` (the analysis
#: table): ``(name, start_ns, end_ns, span_id, parent_span_id or 0, resource, attributes)``.
SpanRecord = tuple[str, int, int, int, int, "Resource", Mapping[str, Any]]


def span_record(span: ReadableSpan) -> SpanRecord:
    """The :data:`SpanRecord` of a span."""
    parent = span.parent
    return (
        span.name,
        span.start_time,
        span.end_time,
        span.context.span_id,
        0 if parent is None else parent.span_id,
        span.resource,
        span.attributes or {},
    )


class TraceFormat:
    """A file format :func:`~brickscope.offline.open_spans` can read (a plain base class)."""

    #: Short name, as in error messages and ``SpanStream.format``.
    name = ""

    def matches(self, head: bytes) -> bool:
        """Whether a file starting with ``head`` (up to HEAD_BYTES) is in this format."""
        return False

    def read(self, source: TraceSource) -> Iterator[ReadableSpan]:
        """Yield the spans of ``source``, streaming.

        Raise ``source.error(...)`` for a bad file; call ``source.truncated(...)``
        for a file cut short (it raises unless truncated files are allowed, and
        then the reader stops at the cut); call ``source.report_progress()`` now
        and then.
        """
        raise NotImplementedError

    def read_records(self, source: TraceSource) -> Iterator[SpanRecord]:
        """Yield a :data:`SpanRecord` per span, as :meth:`read` would its spans.

        A reader that decodes into records first overrides this (and makes its
        spans from them); the default makes each record from a span.
        """
        return map(span_record, self.read(source))


class _OtlpJson(TraceFormat):
    name = "otlp-json"

    def matches(self, head: bytes) -> bool:
        if head.startswith(_UTF8_BOM):
            head = head[len(_UTF8_BOM) :]
        head = head.lstrip(b" \t\r\n")
        return not head or head[:1] in (b"{", b"[")

    def read(self, source: TraceSource) -> Iterator[ReadableSpan]:
        from ._otlp_json import read_otlp_json

        return read_otlp_json(source)


OTLP_JSON = _OtlpJson()

#: Top-level keys of a Chrome trace object (the Trace Event Format's, Kineto's, brickscope's writer's).
_CHROME_KEYS = (
    b'"traceEvents"', b'"displayTimeUnit"', b'"otherData"', b'"systemTraceEvents"', b'"stackFrames"',
    b'"samples"', b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"', b'"baseTimeNanoseconds"',
    b'"traceName"', b'"metadata"',
)  # fmt: skip
#: Keys of a trace event (the first key of a bare array's first element).
_EVENT_KEYS = (b'"ph"', b'"name"', b'"ts"', b'"pid"', b'"tid"', b'"cat"', b'"dur"', b'"args"', b'"id"', b'"s"')


class _ChromeJson(TraceFormat):
    """Chrome trace JSON, torch.profiler's (Kineto's) included. Told from OTLP JSON by its first
    key: an object opening with a Chrome trace key (or naming ``traceEvents`` in its first bytes),
    or an array whose first element opens with an event key."""

    name = "chrome-json"

    def matches(self, head: bytes) -> bool:
        if head.startswith(_UTF8_BOM):
            head = head[len(_UTF8_BOM) :]
        head = head.lstrip(b" \t\r\n")
        if head[:1] == b"{":
            return head[1:].lstrip().startswith(_CHROME_KEYS) or b'"traceEvents"' in head
        if head[:1] == b"[":
            element = head[1:].lstrip()
            return element[:1] == b"{" and element[1:].lstrip().startswith(_EVENT_KEYS)
        return False

    def read(self, source: TraceSource) -> Iterator[ReadableSpan]:
        from ._chrome_read import read_chrome

        return read_chrome(source)

    def read_records(self, source: TraceSource) -> Iterator[SpanRecord]:
        from ._chrome_read import read_chrome_records

        return read_chrome_records(source)


CHROME_JSON = _ChromeJson()


@lru_cache(maxsize=1)
def installed_formats() -> tuple[TraceFormat, ...]:
    """Chrome trace JSON, OTLP JSON (which takes any other JSON), then every format registered
    under :data:`READERS_GROUP`, by name."""
    found: list[TraceFormat] = [CHROME_JSON, OTLP_JSON]
    for entry_point in sorted(entry_points(group=READERS_GROUP), key=lambda ep: ep.name):
        try:
            found.append(entry_point.load())
        except Exception as error:  # a broken plugin must not stop the other formats
            _logger.warning("cannot load trace format %s (%s): %s", entry_point.name, entry_point.value, error)
    return tuple(found)


def sniff(source: TraceSource) -> TraceFormat:
    """The format of ``source``, told from its first bytes; raises TraceFileError if none fits."""
    head = source.stream.peek(HEAD_BYTES)[:HEAD_BYTES] if hasattr(source.stream, "peek") else b""
    if not head:
        if source.truncation is not None:  # cut before its first byte: no prefix to read
            raise source.truncation
        raise source.error("empty file" + (" (after decompression)" if source.compressed else ""))
    if head.startswith(_ZSTD_MAGIC):
        raise source.error(f"zstd-compressed; decompress it first (zstd -d {source.path})")
    for candidate in installed_formats():
        if candidate.matches(head):
            return candidate
    expected = "OTLP JSON (JSON Lines or one document, gzip accepted), Chrome trace JSON"
    names = [f.name for f in installed_formats() if f not in (OTLP_JSON, CHROME_JSON)]
    if names:
        expected += " or " + ", ".join(names)
    hint = ""
    if head[0] == _PFTRACE_TAG and "pftrace" not in names:
        hint = "; it may be a Perfetto trace: reading one needs brickscope-exporter-perfetto (pip install ./exporters/perfetto in the brickscope repository)"
    raise source.error(
        f"not a trace brickscope can read: expected {expected}{hint}; it starts with {head[:8].hex(' ')}"
    )
