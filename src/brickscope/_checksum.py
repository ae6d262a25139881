# SPDX-License-Identifier: Apache-2.0
"""Output checksums (opt-in): a 64-bit FNV-1a hash of a scope's output buffer, so two runs
(two GPUs, two builds, CPU against GPU) can be compared kernel by kernel
(``brickscope diff --divergence``).

The hash is **lane-parallel FNV-1a 64**, a documented variant of FNV-1a 64 that can
be vectorised (byte-wise FNV-1a is one long chain of multiplications: no SIMD, no
numpy). Definition, for a buffer of ``n`` bytes:

1. zero-pad the bytes to a multiple of ``8 * LANES`` (LANES = 256) and read them as
   little-endian 64-bit words ``w[0], w[1], ...``;
2. lane ``j`` hashes the words ``w[j], w[j + LANES], w[j + 2 LANES], ...`` with the
   FNV-1a step on 64-bit words: ``h = (h XOR w) * FNV_PRIME mod 2**64``, starting at
   ``FNV_OFFSET``;
3. the result is the same step over the 257 words ``h[0], ..., h[255], n``, starting
   at ``FNV_OFFSET`` (``n`` tells trailing zeros from padding).

It is not byte-compatible with FNV-1a 64 of the bytes; it is as sensitive to a changed
byte (every byte reaches exactly one lane, the multiplication spreads it) and equal on
every machine. With numpy the lanes are one array: a Python step per 2 KiB row, none
per byte. Without numpy the same definition runs per 8-byte word (slow; said once).

Buffers: anything with the buffer protocol (bytes, bytearray, array, numpy), ``__dlpack__``
host tensors (through numpy), and device buffers exposing ``__cuda_array_interface__``
(CuPy, PyTorch, Numba): those are copied to the host with ``cuMemcpyDtoH`` through
cuda-python after their stream is synchronised. That copy and sync are the cost: a
checksum is a debugging tool, off unless called.

Example::

    with bs.kernel("attn_fwd", grid=g, block=b):
        launch(out)
        bs.checksum(out)         # on this kernel's span: brickscope.output.checksum
"""

from __future__ import annotations

import array
import logging
import sys
from typing import Any

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
LANES = 256
_MASK = (1 << 64) - 1
_ROW_BYTES = 8 * LANES

logger = logging.getLogger(__name__)
_warned: set[str] = set()


def fnv1a64_lanes(data: Any) -> int:
    """The lane-parallel FNV-1a 64 of a C-contiguous bytes-like object (module docstring)."""
    view = memoryview(data).cast("B")
    n = view.nbytes
    try:
        import numpy as np
    except ImportError:
        return _lanes_python(view, n)
    padded = -n % _ROW_BYTES
    buffer = np.frombuffer(view, dtype=np.uint8)
    if padded:
        buffer = np.concatenate((buffer, np.zeros(padded, dtype=np.uint8)))
    rows = buffer.view("<u8").reshape(-1, LANES)
    lanes = np.full(LANES, FNV_OFFSET, dtype=np.uint64)
    prime = np.uint64(FNV_PRIME)
    with np.errstate(over="ignore"):
        for row in rows:  # one numpy step per 2 KiB: the lanes are the vector
            np.bitwise_xor(lanes, row, out=lanes)
            np.multiply(lanes, prime, out=lanes)
    return _fold([int(h) for h in lanes.tolist()], n)


def _lanes_python(view: memoryview, n: int) -> int:
    if "numpy" not in _warned:
        _warned.add("numpy")
        logger.warning("brickscope: checksums without numpy run word by word in Python (pip install numpy)")
    padded = bytes(view) + bytes(-n % _ROW_BYTES)
    words = array.array("Q", padded)
    if sys.byteorder != "little":
        words.byteswap()
    lanes = [FNV_OFFSET] * LANES
    for index, word in enumerate(words):
        lane = index % LANES
        lanes[lane] = ((lanes[lane] ^ word) * FNV_PRIME) & _MASK
    return _fold(lanes, n)


def _fold(lanes: list[int], n: int) -> int:
    h = FNV_OFFSET
    for word in (*lanes, n):
        h = ((h ^ word) * FNV_PRIME) & _MASK
    return h


def combine(first: int, second: int) -> int:
    """Two checksums of one scope (several outputs), folded in call order."""
    return _fold([first, second], 16)


def host_bytes(output: Any, stream: Any = None) -> Any:
    """The bytes of ``output`` on the host: a memoryview for host buffers, a copy for device ones.

    Raises:
        TypeError: ``output`` is neither a buffer, a host DLPack tensor nor a CUDA array.
        ValueError: a non-contiguous CUDA array.
        RuntimeError: the CUDA copy failed (the driver's error name in the message).
    """
    interface = getattr(output, "__cuda_array_interface__", None)
    if interface is not None:
        return _device_bytes(interface, stream)
    try:
        view = memoryview(output)
    except TypeError:
        if hasattr(output, "__dlpack__"):
            import numpy as np

            return np.ascontiguousarray(np.from_dlpack(output)).data
        raise TypeError(
            f"brickscope: cannot checksum a {type(output).__name__}: expected a buffer, a host DLPack tensor "
            "or an object with __cuda_array_interface__"
        ) from None
    return view if view.c_contiguous else memoryview(view.tobytes())


def _device_bytes(interface: dict[str, Any], stream: Any) -> bytearray:
    shape = tuple(interface.get("shape", ()))
    itemsize = int(str(interface["typestr"])[2:])
    count = 1
    for extent in shape:
        count *= int(extent)
    strides = interface.get("strides")
    if strides is not None and tuple(strides) != _c_strides(shape, itemsize):
        raise ValueError("brickscope: cannot checksum a non-contiguous CUDA array (make it contiguous first)")
    pointer = int(interface["data"][0])
    out = bytearray(count * itemsize)
    if not out:
        return out
    from cuda.bindings import driver

    pushed = False
    err, context = driver.cuCtxGetCurrent()
    if _failed(err) or not int(context):
        _check(driver.cuCtxPushCurrent(_ok(driver.cuDevicePrimaryCtxRetain(0))))
        pushed = True
    try:
        handle = stream if stream is not None else interface.get("stream")
        if handle is not None:  # the array's work may be on a non-blocking stream: wait for it
            from brickscope._gpu._streams import stream_handle

            _check(driver.cuStreamSynchronize(stream_handle(handle)))
        _check(driver.cuMemcpyDtoH(out, pointer, len(out)))
    finally:
        if pushed:
            driver.cuCtxPopCurrent()
    return out


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= int(extent)
    return tuple(reversed(strides))


def _failed(err: Any) -> bool:
    return int(err) != 0


def _check(result: Any) -> None:
    err = result[0] if isinstance(result, tuple) else result
    if _failed(err):
        raise RuntimeError(f"brickscope: checksum copy failed: {getattr(err, 'name', err)}")


def _ok(result: tuple[Any, ...]) -> Any:
    _check(result)
    return result[1]


def checksum(output: Any, *, stream: Any = None) -> int | None:
    """Checksum ``output`` and put it on the current scope's span; returns the checksum.

    The current scope is the innermost open brickscope scope of this thread or task;
    its span gets ``brickscope.output.checksum`` (16 hex digits) and
    ``brickscope.output.checksum_bytes``. Several calls in one scope fold their
    checksums in call order. ``stream``: the stream the output was written on, to
    wait for before copying a device buffer (default: the array's own ``stream``
    entry, else the legacy default stream's ordering).

    Does nothing (returns None) while brickscope is off, outside any scope, or in an
    unsampled one. A failure (an unsupported object, a CUDA error) logs one warning,
    counts in ``stats()["scope_data_dropped"]`` and returns None: never an exception.

    .. versionadded:: 0.2.0
    """
    from brickscope import _record, _scope_data, _state
    from brickscope.trace.attributes import OUTPUT_CHECKSUM, OUTPUT_CHECKSUM_BYTES

    recorder = _state.recorder
    if recorder is None:
        return None
    rec = _scope_data.innermost_open(_record.TOP.get())
    if rec is None:
        recorder.count("scope_data_dropped")
        _warn_once("outside", "brickscope: checksum() outside any scope; nothing recorded (counted)")
        return None
    if not rec.sampled:
        return None
    try:
        data = host_bytes(output, stream)
        value = fnv1a64_lanes(data)
        size = memoryview(data).nbytes
    except Exception as exc:  # never into the user's loop
        recorder.count("scope_data_dropped")
        _warn_once(type(exc).__name__, "brickscope: checksum failed: %s", exc)
        return None
    notes = rec.notes
    earlier = notes.attributes.get(OUTPUT_CHECKSUM) if notes is not None else None
    if earlier is not None:
        value = combine(int(earlier, 16), value)
        size += notes.attributes.get(OUTPUT_CHECKSUM_BYTES, 0)
    _scope_data.set_attribute(rec, OUTPUT_CHECKSUM, f"{value:016x}")
    _scope_data.set_attribute(rec, OUTPUT_CHECKSUM_BYTES, size)
    return value


def _warn_once(key: str, message: str, *args: Any) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(message, *args)
