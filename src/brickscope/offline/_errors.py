# SPDX-License-Identifier: Apache-2.0
"""The errors of the offline tools: a file that cannot be read (:class:`TraceFileError`) and
bad arguments a subcommand finds after parsing (:class:`UsageError`), and the one-line form
every message is printed in."""

from __future__ import annotations

import os
import re


class TraceFileError(ValueError):
    """A trace file that is not what it should be: which file, where, what is wrong.

    ``str(error)`` is the one line the ``brickscope`` command prints, for example
    ``run.pftrace: offset 1048576: truncated: the last packet has 12 of its 80 bytes``
    or ``spans.jsonl:3: not valid JSON: ...``.

    Attributes:
        path: the file.
        what: the problem, without the location.
        offset: byte offset of the problem in the file (in the decompressed
            stream for a gzip file), when known.
        line: 1-based line of the problem in a text format, when known.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        what: str,
        *,
        offset: int | None = None,
        line: int | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.what = what
        self.offset = offset
        self.line = line
        super().__init__(self._line())

    def _line(self) -> str:
        if self.line is not None:
            where = f"{self.path}:{self.line}"
        elif self.offset is not None:
            where = f"{self.path}: offset {self.offset}"
        else:
            where = self.path
        # One line, whatever the message quoted: newlines and control characters escaped.
        return one_line(f"{where}: {self.what}")

    def __reduce__(self):  # pickles with its keyword arguments
        return (_rebuild, (self.path, self.what, self.offset, self.line))


class UsageError(ValueError):
    """Bad arguments a ``brickscope`` subcommand finds after parsing: the command prints
    ``str(error)`` on one line and exits with status 2 (docs/api.md, "Subcommands")."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` with control characters (newlines, ANSI escapes) shown as escapes: one safe line."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def _rebuild(path: str, what: str, offset: int | None, line: int | None) -> TraceFileError:
    return TraceFileError(path, what, offset=offset, line=line)
