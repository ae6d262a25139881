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
# extending __path__ lets one import path span them (docs/design.md, "One import path").
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from typing import TYPE_CHECKING, Any

from brickscope._catalog import CATEGORIES, register_brick
from brickscope._clock import now_ns
from brickscope._scope import (
    Brick,
    BrickHandle,
    Kernel,
    Layer,
    Scope,
    ScopeToken,
    Step,
    brick,
    end_brick,
    enter_scope,
    event,
    exit_scope,
    kernel,
    layer,
    record_gpu,
    start_brick,
    step,
    sync,
    tile,
)
from brickscope._state import is_enabled
from brickscope.native import implementations
from brickscope.version import __version__

if TYPE_CHECKING:  # what type checkers see of the names loaded lazily below
    from brickscope._checksum import checksum
    from brickscope._kernel_sources import register_kernel_source
    from brickscope.sdk import (
        CategoryAggregator,
        GpuSyncSpanProcessor,
        Session,
        StepSampling,
        configure,
        disable,
        enable,
        shutdown,
    )

# The OpenTelemetry SDK (~0.3 s to import) loads on first use of these (PEP 562), so that
# instrumented code that never configures brickscope, and the offline tools, start fast.
_LAZY = {
    "Session": "brickscope.sdk",
    "configure": "brickscope.sdk",
    "disable": "brickscope.sdk",
    "enable": "brickscope.sdk",
    "shutdown": "brickscope.sdk",
    "CategoryAggregator": "brickscope.sdk",
    "GpuSyncSpanProcessor": "brickscope.sdk",
    "StepSampling": "brickscope.sdk",
    "register_kernel_source": "brickscope._kernel_sources",
    "checksum": "brickscope._checksum",
}


def __getattr__(name: str) -> Any:
    """Load a lazy name's module and bind its names here. The SDK's names bring the other
    lazy names along (cheap beside the SDK), and then this function removes itself: while a
    module has a ``__getattr__``, CPython (3.11-3.13) never specializes attribute loads on
    it, and every ``bs.brick(...)`` would pay a generic lookup, about 5 % of a brick's record
    (docs/benchmarks.md, "The record on CPython 3.11-3.13")."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'brickscope' has no attribute {name!r}")
    wanted = set(_LAZY.values()) if module == "brickscope.sdk" else {module}
    namespace = globals()
    for lazy, where in _LAZY.items():
        if where in wanted:
            namespace[lazy] = getattr(__import__("importlib").import_module(where), lazy)
    if all(lazy in namespace for lazy in _LAZY):
        namespace.pop("__getattr__", None)  # pop: another thread may have removed it
    return namespace[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "CATEGORIES",
    "Brick",
    "BrickHandle",
    "CategoryAggregator",
    "GpuSyncSpanProcessor",
    "Kernel",
    "Layer",
    "Scope",
    "ScopeToken",
    "Session",
    "Step",
    "StepSampling",
    "__version__",
    "brick",
    "checksum",
    "configure",
    "disable",
    "enable",
    "end_brick",
    "enter_scope",
    "event",
    "exit_scope",
    "implementations",
    "is_enabled",
    "kernel",
    "layer",
    "now_ns",
    "record_gpu",
    "register_brick",
    "register_kernel_source",
    "shutdown",
    "start_brick",
    "step",
    "sync",
    "tile",
]
