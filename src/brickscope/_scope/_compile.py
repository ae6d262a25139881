# SPDX-License-Identifier: Apache-2.0
"""torch.compile stand-ins for the C factories and tokens, which Dynamo cannot trace."""

from __future__ import annotations

from typing import Any

from brickscope._record import Record
from brickscope._scope import _factories, _tokens
from brickscope._scope._scopes import F, _hot


class _InGraph:
    """What the factories give inside torch.compile'd code in C mode: records nothing (as
    every scope while compiling), and is plain Python, which Dynamo can trace."""

    __slots__ = ()

    def __enter__(self) -> _InGraph:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __call__(self, func: F) -> F:
        return func


_substitutes_registered = False


def _in_graph(*args: Any, **kwargs: Any) -> _InGraph:
    return _InGraph()  # made inside the compiled region: Dynamo traces its with-statement


def register_compile_substitutes(torch: Any) -> None:
    """Give torch.compile Python stand-ins for the C factories (Dynamo cannot trace C, and a
    C call is a graph break): inside compiled code a factory returns a scope that records
    nothing, which is what every scope does while compiling. Idempotent; no-op in pure Python."""
    global _substitutes_registered
    substitute = getattr(getattr(torch, "compiler", None), "substitute_in_graph", None)
    if _hot is None or _substitutes_registered or substitute is None:
        return
    # Read at the call: the names the C accelerator rebound at import (_factories, _tokens).
    for factory in (_factories.brick, _factories.kernel, _factories.layer, _factories.step):
        substitute(factory, skip_signature_check=True)(_in_graph)
    substitute(_tokens.enter_scope, skip_signature_check=True)(_enter_in_graph)
    substitute(_tokens.open_scope, skip_signature_check=True)(_enter_in_graph)
    substitute(_tokens.exit_scope, skip_signature_check=True)(_exit_in_graph)
    substitute(_hot.torch_compiling, skip_signature_check=True)(_compiling_in_graph)
    _substitutes_registered = True


def _enter_in_graph(scope: Any) -> Record:
    return _tokens._INERT  # what enter_scope gives while torch.compile traces


def _compiling_in_graph() -> bool:
    return True  # what torch.compiler.is_compiling() folds to while torch.compile traces


def _exit_in_graph(token: Any, error: BaseException | None = None) -> None:
    return None  # an inert token: nothing to close
