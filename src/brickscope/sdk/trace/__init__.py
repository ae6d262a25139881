# SPDX-License-Identifier: Apache-2.0
"""The span pipeline behind the scopes: recorder, sync policies, resolution, span building,
delivery to the provider's processors, and the category aggregator.

Example::

    from brickscope.sdk.trace import CategoryAggregator, GpuSyncSpanProcessor
    provider.add_span_processor(CategoryAggregator())
"""

from brickscope.sdk.trace._aggregation import CategoryAggregator
from brickscope.sdk.trace._sampling import StepSampling
from brickscope.sdk.trace._sync import SYNC_MODES, GpuSyncSpanProcessor

__all__ = ["SYNC_MODES", "CategoryAggregator", "GpuSyncSpanProcessor", "StepSampling"]
