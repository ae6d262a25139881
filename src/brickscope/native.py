# SPDX-License-Identifier: Apache-2.0
"""The optional C accelerators, the one switch that turns every one of them off, and the
register of every part with a fast and a reference implementation (:func:`implementations`).

Each accelerator is a C extension built by ``pip install`` when the machine has a C
compiler (setuptools ``Extension(optional=True)``), with a pure-Python implementation
that stays the reference and runs when the extension is missing, fails to import, or
``BRICKSCOPE_PURE_PYTHON=1`` is set (read once, at import). Code that has an
accelerator asks :func:`load` for it and falls back when it gets None; exporters with
their own accelerators use the same function, so one switch covers them all.

Example::

    from brickscope import native

    _hot = native.load("brickscope._hotpath", abi=4)   # the module, or None: use the Python code
    native.implementations()["brickscope._hotpath"]
    # Implementation(in_use='c', reason=None), or in_use='python' and the reason

Each C module exports an integer ``ABI_VERSION``, raised whenever what it expects from the
Python beside it changes (a registration field, a key table, a type's layout); the Python
code states the version it was written for, and :func:`load` refuses a module built for
another one (a stale build left next to newer sources), so the Python code runs instead.
"""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType
from typing import NamedTuple

__all__ = ["PURE_PYTHON", "REQUIRE_NATIVE", "Implementation", "implementations", "load", "note", "refuse"]

logger = logging.getLogger(__name__)

#: ``BRICKSCOPE_PURE_PYTHON=1``: every accelerator's pure-Python fallback runs.
PURE_PYTHON = os.environ.get("BRICKSCOPE_PURE_PYTHON", "").strip() not in ("", "0")
#: ``BRICKSCOPE_REQUIRE_NATIVE=1`` (CI, ``make test``): a missing accelerator is an error
#: the test suite reports (tests/unit/test_native.py), not a silent fallback.
REQUIRE_NATIVE = os.environ.get("BRICKSCOPE_REQUIRE_NATIVE", "").strip() not in ("", "0")



class Implementation(NamedTuple):
    """Which implementation of one part runs, and why, when it is not the fast one.

    ``in_use`` is ``"c"`` or ``"python"`` for a C accelerator (named by its module), and
    ``"fast"`` or ``"reference"`` for a fast path through the OpenTelemetry SDK's internals
    (named ``sdk.<path>``); ``reason`` is None while the fast implementation runs.
    """

    in_use: str
    reason: str | None = None


_parts: dict[str, Implementation] = {}  # every part asked so far (load(), note())


def note(part: str, in_use: str, reason: str | None = None) -> None:
    """Record which implementation ``part`` runs (the SDK layer's fast paths say so here)."""
    _parts[part] = Implementation(in_use, reason)


def load(name: str, abi: int | None = None) -> ModuleType | None:
    """The accelerator module ``name``, or None: the switch is set, or it is not built.

    A module that exists but fails to import (built for another Python, a missing
    symbol) is logged once and treated as not built. With ``abi``, a module whose
    ``ABI_VERSION`` is another (or missing: built before the check) is refused the same
    way: one warning, and the Python code runs.

    Args:
        name: the accelerator's module name.
        abi: the ``ABI_VERSION`` the calling Python code was written for.

    .. versionchanged:: 0.2.0
       The ``abi`` argument.
    """
    if PURE_PYTHON:
        note(name, "python", "BRICKSCOPE_PURE_PYTHON is set")
        return None
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            logger.warning("brickscope: the accelerator %s does not import (%s); using pure Python", name, exc)
            note(name, "python", f"does not import: {exc}")
        else:
            note(name, "python", "not built (no C compiler at install time)")
        return None
    except ImportError as exc:
        logger.warning("brickscope: the accelerator %s does not import (%s); using pure Python", name, exc)
        note(name, "python", f"does not import: {exc}")
        return None
    if abi is not None:
        built = getattr(module, "ABI_VERSION", None)
        if built != abi:
            reason = (
                f"built for ABI {built}, this Python expects {abi}"
                if isinstance(built, int)
                else f"built without an ABI version, this Python expects {abi}"
            )
            logger.warning("brickscope: the accelerator %s is %s (rebuild it); using pure Python", name, reason)
            note(name, "python", reason)
            return None
    note(name, "c")
    return module


def refuse(name: str, reason: str) -> None:
    """Record that the loaded accelerator ``name`` is not used after all (its registration
    found it does not fit the Python code: a key table that differs), with one warning."""
    logger.warning("brickscope: the accelerator %s does not fit this Python (%s); using pure Python", name, reason)
    note(name, "python", reason)


def implementations() -> dict[str, Implementation]:
    """Every part with a fast and a reference implementation that has been asked for so far:
    the C accelerators (``"c"`` or ``"python"``) and the SDK layer's fast paths through the
    OpenTelemetry SDK's internals (``"fast"`` or ``"reference"``), each with the reason when
    the fast one is off. Also ``brickscope.implementations()``."""
    return dict(_parts)
