# SPDX-License-Identifier: Apache-2.0
"""Trace analysis: where GPU time goes, across operations, devices, streams and ranks.

Example::

    from brickscope import analysis

    table = analysis.load("trace.pftrace")          # or OTLP JSON, a directory, a Session
    report = analysis.analyse(table, top=5, steps=(2, None))
    print(report.load_balance["devices"].imbalance_ratio)
    print(analysis.render(report, "markdown"))

    graphs = analysis.tree_graphs(table, steps=(2, None))   # brickscope tree
    print(analysis.render_tree(graphs, "dot"))

Every input becomes one columnar :class:`Table` (one row per span; parents as row
indices), and every figure is computed from it by one engine with two backends:
numpy (``pip install 'brickscope[analysis]'``) and pure Python (always there, so a
live ``session.report()`` works on a core install). What each ``brickscope`` command
prints is one call here (``docs/api.md``, "Analysis in-process"); ``docs/analysis.md``
defines each figure.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see of the names loaded lazily below ("X as X": exported)
    from brickscope.analysis._backend import (
        get_backend as get_backend,
    )
    from brickscope.analysis._diff import (
        Comparison as Comparison,
        OperationChange as OperationChange,
        compare as compare,
    )
    from brickscope.analysis._engine import (
        analyse as analyse,
        select as select,
    )
    from brickscope.analysis._graph import (
        SLACK_FRACTION as SLACK_FRACTION,
        Node as Node,
        StepGraph as StepGraph,
        median_graph as median_graph,
        step_graphs as step_graphs,
        tree_graphs as tree_graphs,
    )
    from brickscope.analysis._load import (
        AnalysisError as AnalysisError,
        load as load,
        load_spans as load_spans,
    )
    from brickscope.analysis._model import (
        Report as Report,
    )
    from brickscope.analysis._peaks import (
        Peak as Peak,
    )
    from brickscope.analysis._render import (
        FORMATS as FORMATS,
        render as render,
        render_comparison as render_comparison,
        to_json as to_json,
    )
    from brickscope.analysis._table import (
        Table as Table,
    )
    from brickscope.analysis._tree import (
        TREE_FORMATS as TREE_FORMATS,
        render_tree as render_tree,
    )

# name -> module. Imported on first use (PEP 562): the core imports this package for
# the live session's table at ``import brickscope``, which must stay cheap.
_EXPORTS = {
    "FORMATS": "_render",
    "SLACK_FRACTION": "_graph",
    "TREE_FORMATS": "_tree",
    "AnalysisError": "_load",
    "Comparison": "_diff",
    "Node": "_graph",
    "OperationChange": "_diff",
    "Peak": "_peaks",
    "Report": "_model",
    "StepGraph": "_graph",
    "Table": "_table",
    "analyse": "_engine",
    "compare": "_diff",
    "get_backend": "_backend",
    "load": "_load",
    "load_spans": "_load",
    "median_graph": "_graph",
    "render": "_render",
    "render_comparison": "_render",
    "render_tree": "_tree",
    "select": "_engine",
    "step_graphs": "_graph",
    "to_json": "_render",
    "tree_graphs": "_graph",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
