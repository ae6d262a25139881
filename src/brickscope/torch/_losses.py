# SPDX-License-Identifier: Apache-2.0
"""Loss bricks for losses computed inside a model's ``forward`` with ``torch.nn.functional``.

HuggingFace's ``*ForCausalLM`` and ``*ForSequenceClassification`` compute their loss
when given ``labels``, through ``torch.nn.functional.cross_entropy`` (directly or by a
loss module made on the spot). While at least one model is instrumented, the functions
in :data:`FUNCTIONS` are replaced in ``torch.nn.functional`` by wrappers that open a
brick ``loss`` (category ``loss``), but only while an instrumented model's own call
runs on this thread and no instrumented loss module is already timing it. Everywhere
else the wrapper calls the function straight through. The originals come back when the
last instrumentation is removed.

Example::

    handle = brickscope.torch.instrument(model)   # GPT2LMHeadModel
    out = model(ids, labels=ids)                   # bricks: ..., loss (cross_entropy), ...
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from brickscope import _state
from brickscope._scope import enter_scope, exit_scope
from brickscope.torch._plan import Mapped

#: The ``torch.nn.functional`` losses timed when called inside an instrumented model's call.
FUNCTIONS = ("cross_entropy", "nll_loss", "binary_cross_entropy_with_logits", "mse_loss")

_is_compiling = torch.compiler.is_compiling
_local = threading.local()  # .armed: True while a model's call (and no loss module's) runs here
_lock = threading.Lock()
_users = 0  # instrumentations holding the wrappers in place
_originals: dict[str, Callable[..., Any]] = {}


def install(chooser: Callable[[Mapped], Callable[[tuple], Any]]) -> None:
    """Put the wrappers in place (counted: the first call installs them).

    ``chooser(mapped)``: the scope chooser for a planned module (``scope_chooser``).
    """
    global _users
    with _lock:
        _users += 1
        if _users > 1:
            return
        for name in FUNCTIONS:
            original = getattr(F, name)
            mapped = Mapped(f"torch.nn.functional.{name}", "brick", "loss", "loss", None, None)  # type: ignore[arg-type]
            _originals[name] = original
            setattr(F, name, _wrap(original, chooser(mapped)))


def uninstall() -> None:
    """Undo one :func:`install`; the last one puts the original functions back."""
    global _users
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if _users:
            return
        for name, original in _originals.items():
            setattr(F, name, original)
        _originals.clear()


def arming(forward: Callable[..., Any], on: bool) -> Callable[..., Any]:
    """``forward`` run with functional loss bricks on (a model's call) or off (a loss module's)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        before = getattr(_local, "armed", False)
        _local.armed = on
        try:
            return forward(*args, **kwargs)
        finally:
            _local.armed = before

    return run


def _wrap(function: Callable[..., Any], choose: Callable[[tuple], Any]) -> Callable[..., Any]:
    def loss(*args: Any, **kwargs: Any) -> Any:
        if _is_compiling() or not getattr(_local, "armed", False) or _state.recorder is None:
            return function(*args, **kwargs)
        _local.armed = False  # a loss calling another (or itself) is one brick
        token = enter_scope(choose(args))
        try:
            result = function(*args, **kwargs)
        except BaseException as exc:
            exit_scope(token, exc)
            raise
        finally:
            _local.armed = True
        exit_scope(token)
        return result

    loss.__wrapped__ = function  # type: ignore[attr-defined]
    loss.__name__ = function.__name__
    loss.__doc__ = function.__doc__
    return loss
