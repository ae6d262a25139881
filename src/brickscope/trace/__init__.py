# SPDX-License-Identifier: Apache-2.0
"""OpenTelemetry glue: brickscope's span processors and attribute conventions.

Example::

    from brickscope.trace import CategoryAggregator
    provider.add_span_processor(CategoryAggregator())
"""

from brickscope.trace._aggregation import CategoryAggregator
from brickscope.trace._sync import SYNC_MODES, GpuSyncSpanProcessor

__all__ = ["SYNC_MODES", "CategoryAggregator", "GpuSyncSpanProcessor"]
