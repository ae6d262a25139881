# SPDX-License-Identifier: Apache-2.0
"""GPU timing with CUDA driver events (private; the core's CUDA clock builds on it).

Example::

    from brickscope._gpu import CudaTimer, CudaUnavailable

    try:
        timer = CudaTimer()
    except CudaUnavailable as exc:
        print("host timing only:", exc.reason)

Importing this package never imports cuda-python: ``CudaTimer()`` does, lazily,
through ``_driver`` (the only module that touches ``cuda.bindings.driver``).
"""

from brickscope._gpu._driver import CudaError, CudaUnavailable
from brickscope._gpu._streams import StreamRef, stream_handle
from brickscope._gpu._timer import CudaTimer, host_epoch_ns

__all__ = ["CudaError", "CudaTimer", "CudaUnavailable", "StreamRef", "host_epoch_ns", "stream_handle"]
