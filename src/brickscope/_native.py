# SPDX-License-Identifier: Apache-2.0
"""The optional C accelerators, and the one switch that turns every one of them off.

Each accelerator is a C extension built by ``pip install`` when the machine has a C
compiler (setuptools ``Extension(optional=True)``), with a pure-Python implementation
that stays the reference and runs when the extension is missing, fails to import, or
``BRICKSCOPE_PURE_PYTHON=1`` is set (read once, at import). Code that has an
accelerator asks :func:`load` for it and falls back when it gets None; exporters with
their own accelerators use the same function, so one switch covers them all.

Example::

    from brickscope import _native

    _hot = _native.load("brickscope._hotpath")   # the module, or None: use the Python code
    _native.implementations()                     # {"brickscope._hotpath": "c"} or "python"
"""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType

__all__ = ["PURE_PYTHON", "REQUIRE_NATIVE", "implementations", "load"]

logger = logging.getLogger(__name__)

#: ``BRICKSCOPE_PURE_PYTHON=1``: every accelerator's pure-Python fallback runs.
PURE_PYTHON = os.environ.get("BRICKSCOPE_PURE_PYTHON", "").strip() not in ("", "0")
#: ``BRICKSCOPE_REQUIRE_NATIVE=1`` (CI, ``make test``): a missing accelerator is an error
#: the test suite reports (tests/unit/test_native.py), not a silent fallback.
REQUIRE_NATIVE = os.environ.get("BRICKSCOPE_REQUIRE_NATIVE", "").strip() not in ("", "0")

_loaded: dict[str, str] = {}  # module name -> "c" | "python", for every load() asked


def load(name: str) -> ModuleType | None:
    """The accelerator module ``name``, or None: the switch is set, or it is not built.

    A module that exists but fails to import (built for another Python, a missing
    symbol) is logged once and treated as not built.
    """
    if PURE_PYTHON:
        _loaded[name] = "python"
        return None
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            logger.warning("brickscope: the accelerator %s does not import (%s); using pure Python", name, exc)
        module = None
    except ImportError as exc:
        logger.warning("brickscope: the accelerator %s does not import (%s); using pure Python", name, exc)
        module = None
    _loaded[name] = "python" if module is None else "c"
    return module


def implementations() -> dict[str, str]:
    """Which implementation each accelerated part runs: ``"c"`` or ``"python"``."""
    return dict(_loaded)
