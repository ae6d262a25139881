# SPDX-License-Identifier: Apache-2.0
"""Trace analysis: where GPU time goes, across operations, devices, streams and ranks.

Example::

    from brickscope import analysis

    table = analysis.load("trace.pftrace")          # or OTLP JSON, a directory, a Session
    report = analysis.analyse(table, top=5, steps=(2, None))
    print(report.load_balance["devices"].imbalance_ratio)
    print(analysis.render(report, "markdown"))

Every input becomes one columnar :class:`Table` (one row per span; parents as row
indices), and every figure is computed from it by one engine with two backends:
numpy (``pip install 'brickscope[analysis]'``) and pure Python (always there, so a
live ``session.report()`` works on a core install). ``docs/analysis.md`` defines
each figure.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> module. Imported on first use (PEP 562): the core imports this package for
# the live session's table at ``import brickscope``, which must stay cheap.
_EXPORTS = {
    "FORMATS": "_render",
    "AnalysisError": "_load",
    "Comparison": "_diff",
    "OperationChange": "_diff",
    "Peak": "_peaks",
    "Report": "_model",
    "Table": "_table",
    "analyse": "_engine",
    "compare": "_diff",
    "get_backend": "_backend",
    "load": "_load",
    "render": "_render",
    "render_comparison": "_render",
    "to_json": "_render",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
