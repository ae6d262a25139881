# SPDX-License-Identifier: Apache-2.0
"""Stream arguments: whatever users pass as a stream, as a raw ``CUstream`` handle.

Example::

    from brickscope._gpu._streams import stream_handle

    stream_handle(None)                  # 0: the legacy default stream
    stream_handle(torch_stream)          # __cuda_stream__() -> (0, handle), or .cuda_stream
    stream_handle(cupy_stream)           # .ptr
    stream_handle(driver.CUstream(h))    # int(...)

Pure Python: nothing here calls the driver (``_timer`` resolves contexts/devices).
"""

from __future__ import annotations

import operator
from typing import NamedTuple

__all__ = ["LEGACY_HANDLES", "StreamRef", "stream_handle"]

#: Handles that name the calling thread's context's default stream rather than a
#: stream object: 0 (NULL), CU_STREAM_LEGACY (0x1) and CU_STREAM_PER_THREAD (0x2).
LEGACY_HANDLES = frozenset((0, 1, 2))


class StreamRef(NamedTuple):
    """A stream brickscope can record events on; get one from ``CudaTimer.stream_ref``.

    Attributes:
        handle: The raw ``CUstream`` handle (0 = legacy default stream).
        device: CUDA device ordinal the stream belongs to.
        ctx: Internal: the raw ``CUcontext`` handle the stream belongs to (events are per context).
    """

    handle: int
    device: int
    ctx: int


def _as_handle(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            raise TypeError(f"{what} is not an integer stream handle: {value!r}") from None
    if value < 0:
        raise ValueError(f"{what} is negative: {value}")
    return value


def stream_handle(stream: object | None) -> int:
    """The raw ``CUstream`` handle of a stream-like object.

    Accepted, in this order: ``None`` (legacy default stream, 0); objects with
    ``__cuda_stream__()`` returning ``(0, handle)`` (the CUDA stream protocol:
    cuda.core, PyTorch >= 2.10); cuda-bindings ``CUstream``/``cudaStream_t``
    (``getPtr()``); ``int`` (or any integer with ``__index__``); objects with ``.cuda_stream`` (PyTorch) or ``.ptr`` (CuPy).

    Raises:
        TypeError: ``stream`` is none of these (``bool`` included), or the protocol
            returned something other than ``(0, int)``.
        ValueError: a negative handle.
    """
    if stream is None:
        return 0
    protocol = getattr(type(stream), "__cuda_stream__", None)
    if protocol is not None:
        result = stream.__cuda_stream__()  # type: ignore[attr-defined]
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(f"__cuda_stream__() must return (version, handle), got {result!r}")
        version, handle = result
        if version != 0:
            raise TypeError(f"unsupported __cuda_stream__ protocol version {version!r} (expected 0)")
        return _as_handle(handle, "__cuda_stream__() handle")
    get_ptr = getattr(stream, "getPtr", None)
    if callable(get_ptr):
        return _as_handle(get_ptr(), "getPtr()")
    if not isinstance(stream, bool) and hasattr(type(stream), "__index__"):
        return _as_handle(operator.index(stream), "stream")  # int, numpy integers
    for attr in ("cuda_stream", "ptr"):
        value = getattr(stream, attr, None)
        if value is not None:
            return _as_handle(value, f"stream.{attr}")
    raise TypeError(
        f"cannot use {type(stream).__name__!r} as a CUDA stream: pass None, an int handle, a "
        "cuda.bindings CUstream, or an object with __cuda_stream__, .cuda_stream or .ptr"
    )
