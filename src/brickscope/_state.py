# SPDX-License-Identifier: Apache-2.0
"""The one piece of global state: the active recorder (None when brickscope is off).

Scopes read ``_state.recorder`` first thing on enter; None means "do nothing",
which is what a disabled or not-yet-configured brickscope costs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from brickscope.trace._recorder import Recorder

#: The Recorder scopes record into; None when disabled or unconfigured.
recorder: Recorder | None = None
#: The configured recorder, kept while disabled so enable() can restore it.
configured: Recorder | None = None
#: ``torch.compiler.is_compiling`` once torch is in use (set by brickscope.torch, or by
#: configure() when torch is already imported; never imported here), else None. Scopes
#: ask it first and record nothing while torch.compile traces them: the call folds to
#: True in the graph, so a scope neither breaks the graph nor disables compilation.
compiling: Callable[[], bool] | None = None
