# SPDX-License-Identifier: Apache-2.0
"""The one module that imports ``cuda.bindings.driver``; CUDA errors as exceptions.

Example::

    from brickscope._gpu import _driver

    drv = _driver.init()                       # CudaUnavailable if no cuda-python/driver/device
    count = _driver.check(drv.cuDeviceGetCount())
    _driver.check(drv.cuEventQuery(event))     # CudaError("CUDA_ERROR_NOT_READY", ...) etc.

The import is lazy so ``import brickscope`` works without cuda-python. Without a
driver library, ``cuda.bindings`` still imports and the *first driver call* raises
(cuda-pathfinder's ``DynamicLibNotFoundError``); ``init()`` turns that and every
other set-up failure into :class:`CudaUnavailable`.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

__all__ = ["CudaError", "CudaUnavailable", "check", "error_name", "in_context", "init", "load"]

_lock = threading.Lock()
_drv: ModuleType | None = None


class CudaUnavailable(RuntimeError):
    """CUDA timing cannot be set up here: no cuda-python, no driver, no device, ...

    Attributes:
        reason: One sentence saying what is missing, for the fallback warning.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CudaError(RuntimeError):
    """A CUDA driver call failed.

    Attributes:
        code_name: The ``CUresult`` name, e.g. ``"CUDA_ERROR_LAUNCH_FAILED"``.
        message: The driver's description of the error.
    """

    def __init__(self, code_name: str, message: str) -> None:
        super().__init__(f"{code_name}: {message}")
        self.code_name = code_name
        self.message = message


def load() -> ModuleType:
    """Import ``cuda.bindings.driver`` once.

    Raises:
        CudaUnavailable: cuda-python (the ``cuda-bindings`` distribution) is not installed.
    """
    global _drv
    if _drv is not None:
        return _drv
    with _lock:
        if _drv is None:
            try:
                from cuda.bindings import driver
            except ImportError as exc:
                raise CudaUnavailable(
                    f"cuda-python is not installed ({exc}); install brickscope[cuda] for GPU timing"
                ) from exc
            _drv = driver
    return _drv


def error_name(err: Any) -> str:
    """The ``CUresult`` name of an error code (``"CUDA_ERROR_..."``)."""
    name = getattr(err, "name", None)
    return name if isinstance(name, str) else f"CUresult({int(err)})"


def _message(err: Any) -> str:
    try:
        res, text = load().cuGetErrorString(err)
        if int(res) == 0 and text:
            return text.decode() if isinstance(text, bytes) else str(text)
    except Exception:  # a message is best effort; the name is what matters
        pass
    return "unknown CUDA error"


def check(result: tuple[Any, ...]) -> Any:
    """Unwrap a cuda-bindings result tuple ``(CUresult, *values)``.

    Returns:
        None for ``(err,)``, the value for ``(err, value)``, else the tuple of values.

    Raises:
        CudaError: ``err`` is not ``CUDA_SUCCESS``.
    """
    err = result[0]
    if int(err) != 0:
        raise CudaError(error_name(err), _message(err))
    if len(result) == 1:
        return None
    if len(result) == 2:
        return result[1]
    return result[1:]


def init() -> ModuleType:
    """Load the bindings and initialise the driver (``cuInit``); idempotent.

    Raises:
        CudaUnavailable: no cuda-python, no driver library, no device, or
            ``cuInit`` failed (e.g. in a process forked after CUDA was initialised).
    """
    drv = load()
    try:
        err = drv.cuInit(0)[0]
    except Exception as exc:  # DynamicLibNotFoundError, FunctionNotFoundError, ...
        raise CudaUnavailable(f"CUDA driver library not usable: {type(exc).__name__}: {exc}") from exc
    if int(err) != 0:
        name = error_name(err)
        if name == "CUDA_ERROR_NO_DEVICE":
            raise CudaUnavailable("no CUDA device (cuInit returned CUDA_ERROR_NO_DEVICE)")
        if name == "CUDA_ERROR_NOT_INITIALIZED":
            raise CudaUnavailable(
                "cuInit returned CUDA_ERROR_NOT_INITIALIZED (a process forked after CUDA was initialised?)"
            )
        raise CudaUnavailable(f"cuInit failed: {name}: {_message(err)}")
    return drv


def in_context(drv: ModuleType, ctx: Any, fn: Any, *args: Any) -> Any:
    """Call ``fn(*args)`` with ``ctx`` current on this thread, then restore the caller's.

    Events and streams belong to a context; making ours current must not change
    the one the program (PyTorch, CuPy) has current on this thread, so a differing
    context is pushed and popped rather than set.
    """
    if drv.cuCtxGetCurrent()[1] == ctx:
        return fn(*args)
    check(drv.cuCtxPushCurrent(ctx))
    try:
        return fn(*args)
    finally:
        drv.cuCtxPopCurrent()
