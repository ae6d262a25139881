# SPDX-License-Identifier: Apache-2.0
"""The one piece of global state: the active recorder (None when brickscope is off).

Scopes read ``_state.recorder`` first thing on enter; None means "do nothing",
which is what a disabled or not-yet-configured brickscope costs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from brickscope.sdk.trace._recorder import Recorder


class _NotConfigured:
    """The recorder until configure() is first called: the first scope entered logs one
    warning and turns scopes off (``recorder = None``), so a forgotten configure() is
    said once and costs nothing afterwards."""

    def open(self, owner: Any, opener: Any = None) -> None:
        global recorder
        if recorder is self:
            recorder = None
            logging.getLogger("brickscope").warning(
                "brickscope: a scope was entered before brickscope.configure(); "
                "scopes record nothing until it is called (logged once)"
            )

    def count(self, what: str) -> None:
        """Nothing is recorded, so nothing is counted."""


#: The Recorder scopes record into; None when disabled, shut down, or after the
#: not-configured warning.
recorder: Recorder | _NotConfigured | None = _NotConfigured()
#: The configured recorder, kept while disabled so enable() can restore it.
configured: Recorder | None = None
#: ``torch.compiler.is_compiling`` once torch is in use (set by brickscope.torch, or by
#: configure() when torch is already imported; never imported here), else None. Scopes
#: ask it first and record nothing while torch.compile traces them: the call folds to
#: True in the graph, so a scope neither breaks the graph nor disables compilation.
compiling: Callable[[], bool] | None = None


def is_enabled() -> bool:
    """Whether brickscope records now: configured, and not disabled or shut down.

    False before ``configure()``, after ``disable()`` until ``enable()``, and after
    ``shutdown()``; scopes entered then record nothing. For skipping work done only to
    annotate spans (formatting attributes, reading external timers). Never raises.

    .. versionadded:: 0.2.0
    """
    current = recorder
    return current is not None and current is configured
