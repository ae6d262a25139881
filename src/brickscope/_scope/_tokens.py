# SPDX-License-Identifier: Apache-2.0
"""Scopes without a ``with`` block: ``enter_scope``/``exit_scope`` tokens and
``start_brick``/``end_brick`` handles, for hooks and middleware called at the start and at the
end of the work. At import the C accelerator takes over the common cases of both token
functions (the block at the bottom); functions here and elsewhere read ``enter_scope`` and
``exit_scope`` from this module, so they get the C ones."""

from __future__ import annotations

from typing import Any

from brickscope import _state
from brickscope._record import Record
from brickscope._scope._entry import _Entry, _exit_entry_out_of_order
from brickscope._scope._scopes import (
    Brick,
    Scope,
    _enter_failed,
    _exit,
    _exit_failed,
    _exit_out_of_order,
    _hot,
    _Scope,
    _tracing,
    _warn_once,
)

#: What :func:`enter_scope` returns: opaque, for :func:`exit_scope` only.
ScopeToken = Record
#: The handle :func:`start_brick` returns (a :data:`ScopeToken`).
BrickHandle = Record

_INERT = Record()  # the token of a scope that recorded nothing (brickscope off)
_INERT.ended = True


def enter_scope(scope: Scope) -> ScopeToken:
    """Open ``scope`` (from :func:`brick`, :func:`kernel`, :func:`layer` or :func:`step`)
    without a ``with`` block: for hooks and middleware, which get called at the start
    and at the end of the work. Close it with :func:`exit_scope`.

    Scopes opened on this thread or task while it is open nest under it. Returns an
    opaque token, an inert one when brickscope is off. Never raises.

    .. versionadded:: 0.2.0
    """
    if _tracing():
        return _INERT
    return open_scope(scope)


def open_scope(scope: Scope) -> ScopeToken:
    """:func:`enter_scope` for a caller that has just asked ``torch.compiler.is_compiling()``
    itself and found it false (brickscope.torch's module call): not asked a second time."""
    if type(scope) is _Entry:
        scope = scope._scope
    recorder = _state.recorder
    if recorder is None:
        return _INERT
    if not isinstance(scope, _Scope):
        _misuse("enter_scope_type", "brickscope: enter_scope() expects a brick, kernel, layer or step scope, got %r", scope)
        return _INERT
    try:
        token = recorder.open(scope)
    except Exception:
        _enter_failed(recorder)
        return _INERT
    return _INERT if token is None else token


def exit_scope(token: ScopeToken, error: BaseException | None = None) -> None:
    """Close the scope ``token`` was returned for (optionally recording ``error``).

    Exactly that scope ends, even when scopes opened after it are still open: they
    stay open, keep it as their parent, and the repair is counted
    (``stats()["scope_repairs"]``). Exiting a token twice, or something that is not
    a token, counts as misuse, logs one warning and is ignored. Never raises.

    .. versionadded:: 0.2.0
    """
    if type(token) is not Record:
        _misuse("exit_scope_type", "brickscope: exit_scope() expects a token from enter_scope(), got %r", token)
        return
    if token is _INERT:
        return
    if token.ended:
        token.recorder.count("misuse")
        _warn_once("exit_twice", "brickscope: scope %r ended twice (exit_scope/end_brick); ignored", token.owner._name)
        return
    _exit(token, error)


def _misuse(key: str, message: str, *args: object) -> None:
    recorder = _state.configured
    if recorder is not None:
        recorder.count("misuse")
    _warn_once(key, message, *args)


class _HandleBrick(Brick):
    """A brick opened by start_brick: it never becomes the current OTel span, because
    its end may come from another task, out of order with the OTel context stack."""

    __slots__ = ()
    _propagates = False


def start_brick(
    name: str, category: str | None = None, elements: int = 0, stream: Any = None, **attributes: Any
) -> BrickHandle:
    """Open a brick that does not fit one lexical block; returns the handle for :func:`end_brick`.

    Scopes opened on this context while it is open nest under it. Arguments as :class:`brick`.
    Unlike :func:`enter_scope`, the brick never becomes the current OTel span, so its
    end may come from any task or thread.

    .. versionadded:: 0.1.0
    """
    return enter_scope(_HandleBrick(name, category, elements, stream, **attributes))


def end_brick(handle: BrickHandle, error: BaseException | None = None) -> None:
    """Close a brick opened with :func:`start_brick` (optionally recording ``error``): :func:`exit_scope`.

    .. versionadded:: 0.1.0
    """
    exit_scope(handle, error)


if _hot is not None:
    _hot.init_scopes(
        state_globals=vars(_state), enter_failed=_enter_failed, exit_failed=_exit_failed,
        exit_out_of_order=_exit_out_of_order, exit_entry_out_of_order=_exit_entry_out_of_order,
        inert=_INERT, enter_scope=enter_scope, exit_scope=exit_scope, open_scope=open_scope,
    )  # fmt: skip
    # Tokens in C too (brickscope.torch's module calls); misuse and the rest: the Python above.
    enter_scope = _hot.enter_scope
    open_scope = _hot.open_scope
    exit_scope = _hot.exit_scope
