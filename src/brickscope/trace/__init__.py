# SPDX-License-Identifier: Apache-2.0
"""OpenTelemetry glue: brickscope's span processors and attribute conventions.

Example::

    from brickscope.trace import CategoryAggregator
    provider.add_span_processor(CategoryAggregator())
"""

from typing import Any

__all__ = ["SYNC_MODES", "CategoryAggregator", "GpuSyncSpanProcessor", "StepSampling"]

# Loaded on first use (PEP 562): they import the OpenTelemetry SDK, which
# ``import brickscope.trace.attributes`` (used by the offline tools) does not need.
_LAZY = {
    "CategoryAggregator": "brickscope.trace._aggregation",
    "GpuSyncSpanProcessor": "brickscope.trace._sync",
    "SYNC_MODES": "brickscope.trace._sync",
    "StepSampling": "brickscope.trace._sampling",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'brickscope.trace' has no attribute {name!r}")
    value = getattr(__import__("importlib").import_module(module), name)
    globals()[name] = value
    return value
