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

from brickscope.analysis._backend import get_backend
from brickscope.analysis._engine import analyse
from brickscope.analysis._load import AnalysisError, load
from brickscope.analysis._model import Report
from brickscope.analysis._peaks import Peak
from brickscope.analysis._render import FORMATS, render, to_json
from brickscope.analysis._table import Table

__all__ = [
    "FORMATS",
    "AnalysisError",
    "Peak",
    "Report",
    "Table",
    "analyse",
    "get_backend",
    "load",
    "render",
    "to_json",
]
