# SPDX-License-Identifier: Apache-2.0
"""brickscope: measured GPU time per op, as OpenTelemetry spans, cheap enough to leave on.

Example::

    import brickscope as bs

    session = bs.configure()                  # global TracerProvider, deferred sync
    with bs.step(0), bs.layer(0):
        with bs.brick("rms_norm", elements=4096):
            with bs.kernel("rms_norm_fwd", grid=(32,), block=(256,)):
                ...
    print(session.report())
"""

# Exporter distributions install brickscope.exporter.<name> from their own src/ trees;
# extending __path__ lets one import path span them (STYLE.md 7.1, option a).
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from brickscope._catalog import CATEGORIES, register_brick
from brickscope._config import Session, configure, disable, enable, shutdown
from brickscope._scope import (
    BrickHandle,
    ScopeToken,
    brick,
    end_brick,
    enter_scope,
    event,
    exit_scope,
    kernel,
    layer,
    start_brick,
    step,
    sync,
)
from brickscope.trace import CategoryAggregator, GpuSyncSpanProcessor
from brickscope.version import __version__

__all__ = [
    "CATEGORIES",
    "BrickHandle",
    "CategoryAggregator",
    "GpuSyncSpanProcessor",
    "ScopeToken",
    "Session",
    "__version__",
    "brick",
    "configure",
    "disable",
    "enable",
    "end_brick",
    "enter_scope",
    "event",
    "exit_scope",
    "kernel",
    "layer",
    "register_brick",
    "shutdown",
    "start_brick",
    "step",
    "sync",
]
