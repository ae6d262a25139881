# SPDX-License-Identifier: Apache-2.0
"""A Chrome trace JSON document read one event at a time (the stdlib's C scanner per value).

Example::

    header: dict[str, Any] = {}
    for index, event in trace_events(source, header):
        ...                     # each event a dict, as json.loads would give it
    header.get("baseTimeNanoseconds")   # complete once the events are exhausted

A Chrome trace is an object with a ``traceEvents`` array, or a bare array of events
(the Trace Event Format's "JSON Array Format"). torch.profiler writes files of
hundreds of MB, so the document is never parsed whole: the top level is walked by
hand and each event (and each other top-level value: ``deviceProperties``,
``distributedInfo``, ``baseTimeNanoseconds``...) is decoded on its own from a
window of about a MiB. Kineto writes some of those values after the events, so
``header`` is complete only when the events are.

Text that is not UTF-8 is read with U+FFFD in place of each bad byte (torch.profiler
writes some Python function names as raw bytes). A bare array may end without its ``]`` (the format allows it, so that a crashed
process's trace stays readable); anything else that ends early is a truncated file.

Numbers written with more than 15 characters (a microsecond timestamp since the Unix
epoch with nanosecond decimals) are decoded as :class:`~decimal.Decimal`, exact:
a double would lose the nanoseconds.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from ._source import TraceSource

_CHUNK_BYTES = 1 << 20
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_UTF8_BOM = "\ufeff"
#: The longest number text a double holds exactly to the nanosecond once read as
#: microseconds (15 significant digits: the error stays below half a nanosecond).
_EXACT_FLOAT_CHARS = 15
#: How close to the end of the text a JSON error must be to mean "cut short" (a literal,
#: a number or an escape sequence the window ends in).
_CUT_CHARS = 8


def _number(text: str) -> float | Decimal:
    return float(text) if len(text) <= _EXACT_FLOAT_CHARS else Decimal(text)


_DECODER = json.JSONDecoder(parse_float=_number)


class _Text:
    """The document's text, decoded from UTF-8 a chunk at a time, with a read position."""

    def __init__(self, source: TraceSource) -> None:
        self._source = source
        # torch.profiler writes some Python function names as raw bytes: those bytes are read
        # as U+FFFD rather than refusing the whole trace.
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.buffer = ""
        self.pos = 0
        self.eof = False
        self._dropped = 0  # characters discarded before buffer[0]

    @property
    def offset(self) -> int:
        """Characters read before the current position (the byte offset, for ASCII text)."""
        return self._dropped + self.pos

    def more(self) -> bool:
        """Append the next chunk to the buffer (dropping what was consumed); False at the end."""
        if self.eof:
            return False
        data = self._source.stream.read(_CHUNK_BYTES)
        text = self._decoder.decode(data, final=not data)
        self._dropped += self.pos
        self.buffer = self.buffer[self.pos :] + text
        self.pos = 0
        if not data:
            self.eof = True
        self._source.report_progress()
        return True

    def peek(self) -> str:
        """The next character that is not whitespace ("" at the end), not consumed."""
        while True:
            blank = _WHITESPACE.match(self.buffer, self.pos)
            assert blank is not None  # the pattern matches the empty string
            self.pos = blank.end()
            if self.pos < len(self.buffer) or not self.more():
                return self.buffer[self.pos : self.pos + 1]

    def value(self) -> tuple[Any, bool]:
        """The JSON value at the position, consumed, and True; or (None, False) when the
        text ends inside it. Raises ``source.error`` for malformed JSON."""
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buffer, self.pos)
            except json.JSONDecodeError as exc:
                # A value cut by the window fails near the window's end (a string: at its start,
                # unterminated): read on and try again. At the end of the text, only a failure
                # at its very end (or in a string left open) is a file cut short.
                unterminated = exc.msg.startswith("Unterminated string")
                if not self.eof and (unterminated or exc.pos >= len(self.buffer) - _CUT_CHARS) and self.more():
                    continue
                if self.eof and (unterminated or exc.pos >= len(self.buffer.rstrip())):
                    return None, False
                raise self._source.error(f"not valid JSON: {exc.msg}", offset=self._dropped + exc.pos) from None
            if end == len(self.buffer) and self.more():
                continue  # a number may go on in the next chunk
            self.pos = end
            return value, True


def trace_events(source: TraceSource, header: dict[str, Any]) -> Iterator[tuple[int, Any]]:
    """Yield ``(index, event)`` for each element of the trace's event array, streaming;
    fill ``header`` with the document's other top-level keys (complete at the end).

    Raises ``source.error`` for text that is not a Chrome trace JSON document, and
    ``source.truncated`` (which raises unless truncated files are allowed) for one cut short.
    """
    text = _Text(source)
    first = text.peek()
    if first == _UTF8_BOM:
        text.pos += 1
        first = text.peek()
    if first == "[":
        text.pos += 1
        yield from _array(source, text, bare=True)
    elif first == "{":
        text.pos += 1
        yield from _object(source, text, header)
    else:
        raise source.error("not a Chrome trace: expected an object with traceEvents or an array of events")
    if source.truncation is None and text.peek():
        raise source.error("data after the end of the JSON document", offset=text.offset)


def _cut(source: TraceSource, text: _Text, what: str) -> None:
    source.truncated(source.error(f"truncated: {what}", offset=text.offset))


def _array(source: TraceSource, text: _Text, *, bare: bool) -> Iterator[tuple[int, Any]]:
    index = 0
    while True:
        char = text.peek()
        if char == "]":
            text.pos += 1
            return
        if not char:
            if not bare:  # a bare array may end without its "]"
                _cut(source, text, "the traceEvents array ends early")
            return
        event, whole = text.value()
        if not whole:
            _cut(source, text, f"the file ends inside event [{index}]")
            return
        yield index, event
        index += 1
        char = text.peek()
        if char == ",":
            text.pos += 1
        elif char != "]" and (char or not bare):
            if not char:
                _cut(source, text, "the traceEvents array ends early")
                return
            raise source.error(f"not valid JSON: expected ',' or ']' after event [{index - 1}]", offset=text.offset)


def _object(source: TraceSource, text: _Text, header: dict[str, Any]) -> Iterator[tuple[int, Any]]:
    while True:
        char = text.peek()
        if char == "}":
            text.pos += 1
            return
        if not char:
            _cut(source, text, "the JSON document ends early")
            return
        key, whole = text.value()
        if whole and not isinstance(key, str):
            raise source.error("not valid JSON: expected a key", offset=text.offset)
        if not whole or text.peek() != ":":
            if not whole or not text.peek():
                _cut(source, text, "the JSON document ends early")
                return
            raise source.error(f"not valid JSON: expected ':' after {key!r}", offset=text.offset)
        text.pos += 1
        if key == "traceEvents":
            if text.peek() != "[":
                if not text.peek():
                    _cut(source, text, "the JSON document ends early")
                    return
                raise source.error("traceEvents: expected an array of events", offset=text.offset)
            text.pos += 1
            yield from _array(source, text, bare=False)
            if source.truncation is not None:
                return
        else:
            value, whole = text.value()
            if not whole:
                _cut(source, text, f"the file ends inside {key!r}")
                return
            header[key] = value
        char = text.peek()
        if char == ",":
            text.pos += 1
        elif char != "}":
            if not char:
                _cut(source, text, "the JSON document ends early")
                return
            raise source.error(f"not valid JSON: expected ',' or '}}' after {key!r}", offset=text.offset)
