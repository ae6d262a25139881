# SPDX-License-Identifier: Apache-2.0
"""brickscope's span attribute conventions (:mod:`brickscope.trace.attributes`).

The span processors that used to be importable from here live in :mod:`brickscope.sdk`;
the names below still resolve, on first use (PEP 562), so that importing the conventions
(as the offline tools and exporters do) never loads the OpenTelemetry SDK.
"""

from typing import Any

__all__ = ["SYNC_MODES", "CategoryAggregator", "GpuSyncSpanProcessor", "StepSampling"]

#: Names kept for programs written against the earlier layout: ``brickscope.sdk`` is their home.
_MOVED_TO_SDK = frozenset(__all__)


def __getattr__(name: str) -> Any:
    if name not in _MOVED_TO_SDK:
        raise AttributeError(f"module 'brickscope.trace' has no attribute {name!r}")
    value = getattr(__import__("importlib").import_module("brickscope.sdk"), name)
    globals()[name] = value
    return value
