# SPDX-License-Identifier: Apache-2.0
"""Output files written safely: checked before anything is opened, replaced atomically.

Example::

    output = AtomicOutput("all.pftrace", overwrite=False, inputs=["a.pftrace", "b.pftrace"])
    with output:                       # removes the temporary file if the block raises
        with open(output.temporary, "xb") as out:
            out.write(data)
        output.commit()                # fsync, then rename over the destination

Rules, the same for every command and exporter that writes a file:

- an existing destination is replaced only when asked (``overwrite``), and only if
  it is a regular file: never a symbolic link (its target would be clobbered), a
  device node, a directory, a pipe or a socket;
- a destination that is one of the inputs (same device and inode, whatever the
  name) is refused before anything is opened for writing;
- the data goes to a temporary file in the same directory, is flushed to disk,
  then renamed over the destination: a reader sees the old file or the new one,
  and a failure or a kill leaves no partial destination;
- temporary files left by processes that no longer exist are removed.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import IO

from ._errors import one_line


class OutputError(ValueError):
    """An output file that must not be written: ``str()`` is one line naming it."""

    def __init__(self, path: str | os.PathLike[str], what: str) -> None:
        self.path = os.fspath(path)
        self.what = what
        super().__init__(one_line(f"{self.path}: {what}"))


def check_output(
    path: str | os.PathLike[str],
    *,
    overwrite: bool,
    inputs: Iterable[str | os.PathLike[str]] = (),
    force_flag: str = "overwrite=True",
) -> str:
    """The absolute path of an output that may be written, or OutputError saying why not.

    Args:
        path: the destination.
        overwrite: whether an existing regular file may be replaced.
        inputs: files the writer reads; the destination must be none of them.
        force_flag: how the caller spells "overwrite" in the message (``--force``).
    """
    text = os.fspath(path)
    if not isinstance(text, str) or not text:
        raise OutputError(repr(path), "an output must be a non-empty file path")
    absolute = os.path.abspath(text)
    directory = os.path.dirname(absolute)
    try:
        info = os.lstat(absolute)
    except FileNotFoundError:
        info = None
    except OSError as error:
        raise OutputError(text, f"cannot be checked: {error.strerror}") from None
    if info is not None:
        if stat.S_ISLNK(info.st_mode):
            raise OutputError(text, "is a symbolic link; refusing to write through it (give the real path)")
        if stat.S_ISDIR(info.st_mode):
            raise OutputError(text, "is a directory; give a file name")
        if not stat.S_ISREG(info.st_mode):
            raise OutputError(text, "is not a regular file (a device, pipe or socket); refusing to replace it")
        for source in inputs:
            try:
                other = os.stat(source)
            except OSError:
                continue  # the reader reports a missing input
            if (other.st_dev, other.st_ino) == (info.st_dev, info.st_ino):
                raise OutputError(text, f"is also an input ({os.fspath(source)}); write the output elsewhere")
        if not overwrite:
            raise OutputError(text, f"already exists; pass {force_flag} to replace it")
    if not os.path.isdir(directory):
        raise OutputError(text, f"directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputError(text, f"directory {directory} is not writable")
    return absolute


class AtomicOutput:
    """A checked destination and the temporary file its content is written to first.

    Attributes:
        path: the destination (absolute).
        temporary: the temporary file to write (not created yet), in the same directory.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        overwrite: bool,
        inputs: Iterable[str | os.PathLike[str]] = (),
        force_flag: str = "overwrite=True",
    ) -> None:
        self.path = check_output(path, overwrite=overwrite, inputs=inputs, force_flag=force_flag)
        self._overwrite = overwrite
        self._force_flag = force_flag
        directory, name = os.path.split(self.path)
        remove_stale_temporaries(self.path)
        self.temporary = os.path.join(directory, f".{_plain(name)}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        self.committed = False

    def open(self, mode: str = "xb") -> IO[bytes]:
        """The temporary file, created exclusively (never an existing file or link)."""
        return open(self.temporary, mode)  # the caller closes it

    def commit(self) -> None:
        """Flush the temporary file to disk and move it over the destination."""
        descriptor = os.open(self.temporary, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        try:
            # Checked again: something may have appeared there since the start.
            check_output(self.path, overwrite=self._overwrite, force_flag=self._force_flag)
            if self._overwrite:
                os.replace(self.temporary, self.path)
            else:
                os.link(self.temporary, self.path)  # fails if the name was taken meanwhile
                os.unlink(self.temporary)
        except FileExistsError:
            self.abort()
            raise OutputError(self.path, f"already exists; pass {self._force_flag} to replace it") from None
        except BaseException:
            self.abort()
            raise
        _sync_directory(os.path.dirname(self.path))
        self.committed = True

    def abort(self) -> None:
        """Remove the temporary file (if it was created)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.temporary)

    def __enter__(self) -> AtomicOutput:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if not self.committed:
            self.abort()


def write_atomically(
    path: str, write: Callable[[IO[bytes]], None], *, overwrite: bool = True, force_flag: str = "overwrite=True"
) -> None:
    """Write ``path`` through a temporary file (see :class:`AtomicOutput`)."""
    with AtomicOutput(path, overwrite=overwrite, force_flag=force_flag) as output:
        with output.open() as out:
            write(out)
        output.commit()


_TEMPORARY = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp\Z")


def remove_stale_temporaries(path: str) -> int:
    """Remove temporary files of ``path`` left by processes that no longer exist; returns how many."""
    directory, name = os.path.split(os.path.abspath(path))
    removed = 0
    try:
        entries = os.listdir(directory)
    except OSError:
        return 0
    for entry in entries:
        match = _TEMPORARY.match(entry)
        if match is None or match["name"] != _plain(name) or _alive(int(match["pid"])):
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, entry))
            removed += 1
    return removed


def _plain(name: str) -> str:
    """``name`` without braces: writers expand ``{pid}`` in paths, never in our temporary names."""
    return name.replace("{", "_").replace("}", "_")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _sync_directory(directory: str) -> None:
    with contextlib.suppress(OSError):  # not every file system can sync a directory
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
