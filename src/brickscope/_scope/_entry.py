# SPDX-License-Identifier: Apache-2.0
"""The Python twin of ``brickscope._hotpath.Entry``: one use of a shared scope object, what
the factories return while brickscope records."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from brickscope import _state
from brickscope._record import KIND_NAMES, Record
from brickscope._scope._scopes import (
    F,
    _enter_failed,
    _exit,
    _exit_failed,
    _hot,
    _innermost_open,
    _on_stack,
    _Scope,
    _TOP_get,
)


class _PyEntry:
    """One use of a shared scope object: what the factories return while brickscope records.

    The factories share one immutable scope object per name, so that building a scope
    per call stays cheap; a ``with`` needs to close exactly the record it opened,
    though (two nested same-name bricks, two generators interleaving the same brick),
    which a shared object cannot remember. The entry remembers it. (In Python: the
    reference; ``brickscope._hotpath.Entry`` is the same in C.)
    """

    __slots__ = ("_scope", "_record")

    def __enter__(self) -> _PyEntry:
        recorder = _state.recorder
        compiling = _state.compiling
        if recorder is None or (compiling is not None and compiling()):
            self._record = None
        else:
            try:
                self._record = recorder.open(self._scope, self)
            except Exception:
                self._record = None
                _enter_failed(recorder)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        rec = self._record
        if rec is None:
            return
        if _TOP_get() is rec:
            try:
                rec.recorder.close(rec, exc)
            except Exception:
                _exit_failed(rec)
        else:
            _exit_entry_out_of_order(self, rec, exc)

    def __call__(self, func: F) -> F:
        """Decorate ``func`` with the shared scope (each call opens its own record)."""
        return self._scope(func)

    def __repr__(self) -> str:
        return f"<brickscope {KIND_NAMES[self._scope._kind]} {self._scope._name!r}>"


def _exit_entry_out_of_order(entry: Any, rec: Record, error: BaseException | None) -> None:
    """The entry's record is not the innermost open one: close it where it is (counted
    as a repair), unless it is not on this context's stack (the entry was entered
    again, here or on another thread): then close the innermost record this entry
    opened in this context."""
    top = _TOP_get()
    if rec.ended or not _on_stack(top, rec):
        rec = _innermost_open(top, entry)
        if rec is None:
            return
    _exit(rec, error)


_new_entry = object.__new__


def _py_make_entry(scope: _Scope) -> _PyEntry:
    entry = _new_entry(_PyEntry)
    entry._scope = scope
    return entry


_Entry: Any = _PyEntry if _hot is None else _hot.Entry
#: A fresh entry for a scope object.
_make_entry: Callable[[_Scope], Any] = _py_make_entry if _hot is None else _hot.Entry


def _entry(scope: _Scope) -> Any:
    """``scope`` itself when brickscope is off (nothing to remember), else a fresh entry."""
    if _state.recorder is None:
        return scope
    return _make_entry(scope)
