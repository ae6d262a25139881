# SPDX-License-Identifier: Apache-2.0
"""The simulated CUDA driver for tests: build it, load it, drive its test hooks.

Example::

    from simdriver import SimDriver, build_simdriver
    sim = SimDriver.preload(build_simdriver(tmp_dir))  # before cuda.bindings calls the driver
    from cuda.bindings import driver
    driver.cuInit(0)
    start_ns, end_ns = sim.enqueue_kernel(stream_handle, 2_000_000)

Loading. cuda-bindings finds the driver through cuda-pathfinder, which first asks
the dynamic loader whether a library with SONAME ``libcuda.so.1`` is already loaded
(``dlopen(..., RTLD_NOLOAD)``) and otherwise dlopens ``libcuda.so.1`` by name. So
either pre-load the simulator in-process with ``RTLD_GLOBAL`` (``SimDriver.preload``)
before anything calls a driver function, or start a subprocess with
``LD_LIBRARY_PATH`` pointing at its directory (``subprocess_env``). Setting
``LD_LIBRARY_PATH`` inside a running process has no effect: the loader reads it at
start-up.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from .build import LIBNAME, build_simdriver

__all__ = ["LIBNAME", "SimDriver", "build_simdriver", "subprocess_env"]

#: Counter indices of ``simcuda_counter`` (see simcuda.c).
_COUNTERS = {
    "live_events": 0,
    "events_created": 1,
    "blocking_calls": 2,
    "blocked_ns": 3,
    "live_streams": 4,
    "active_contexts": 5,
}


class SimCudaError(RuntimeError):
    """A test hook of the simulator returned a CUDA error code."""

    def __init__(self, hook: str, code: int) -> None:
        super().__init__(f"{hook} returned CUresult {code}")
        self.code = code


def subprocess_env(lib_path: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a subprocess that should load the simulator as its driver.

    Args:
        lib_path: The built ``libcuda.so.1``.
        base: Environment to extend (default: a copy of ``os.environ``).
    """
    env = dict(os.environ if base is None else base)
    parts = [str(Path(lib_path).parent)] + [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
    env["LD_LIBRARY_PATH"] = ":".join(parts)
    return env


class SimDriver:
    """ctypes access to the simulator's test hooks (exported ``simcuda_*`` functions).

    The hooks run in the same library instance as the driver entry points that
    cuda-bindings resolved, so they see (and act on) the same state, including the
    calling thread's current context for the legacy default stream (handle 0).
    """

    def __init__(self, lib_path: Path, mode: int = os.RTLD_GLOBAL) -> None:
        """Open the library (a second open of a loaded library shares its state)."""
        self.path = Path(lib_path)
        lib = ctypes.CDLL(str(self.path), mode=mode)
        u64p = ctypes.POINTER(ctypes.c_uint64)
        lib.simcuda_enqueue_kernel.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, u64p, u64p]
        lib.simcuda_enqueue_kernel.restype = ctypes.c_int
        lib.simcuda_inject_launch_failure.argtypes = [ctypes.c_int]
        lib.simcuda_inject_launch_failure.restype = ctypes.c_int
        lib.simcuda_inject_invalid_handle.argtypes = [ctypes.c_long]
        lib.simcuda_inject_invalid_handle.restype = None
        lib.simcuda_inject_event_oom.argtypes = [ctypes.c_long]
        lib.simcuda_inject_event_oom.restype = None
        lib.simcuda_set_device_count.argtypes = [ctypes.c_int]
        lib.simcuda_set_device_count.restype = None
        lib.simcuda_counter.argtypes = [ctypes.c_int]
        lib.simcuda_counter.restype = ctypes.c_uint64
        lib.simcuda_call_count.argtypes = [ctypes.c_char_p]
        lib.simcuda_call_count.restype = ctypes.c_int64
        lib.simcuda_requested_version.argtypes = [ctypes.c_char_p]
        lib.simcuda_requested_version.restype = ctypes.c_int
        lib.simcuda_event_time_ns.argtypes = [ctypes.c_void_p, u64p]
        lib.simcuda_event_time_ns.restype = ctypes.c_int
        lib.simcuda_reset.argtypes = []
        lib.simcuda_reset.restype = None
        self._lib = lib

    @classmethod
    def preload(cls, lib_path: Path) -> SimDriver:
        """Load the simulator with RTLD_GLOBAL so cuda-bindings picks it up by SONAME.

        Must run before anything in the process loads another ``libcuda.so.1``.
        """
        return cls(lib_path, mode=os.RTLD_GLOBAL)

    def enqueue_kernel(self, stream: int, duration_ns: int, host_cost_ns: int = 0) -> tuple[int, int]:
        """Schedule simulated work on a stream; returns its (start, end) in CLOCK_MONOTONIC ns.

        Args:
            stream: Stream handle (0 = legacy default stream of this thread's context).
            duration_ns: How long the work occupies the stream.
            host_cost_ns: Host time to spin first, as a real launch costs.
        """
        start, end = ctypes.c_uint64(), ctypes.c_uint64()
        rc = self._lib.simcuda_enqueue_kernel(int(stream), duration_ns, host_cost_ns, start, end)
        if rc != 0:
            raise SimCudaError("simcuda_enqueue_kernel", rc)
        return start.value, end.value

    def inject_launch_failure(self, device: int = 0) -> None:
        """Make the device's primary context fail every later call with CUDA_ERROR_LAUNCH_FAILED."""
        rc = self._lib.simcuda_inject_launch_failure(device)
        if rc != 0:
            raise SimCudaError("simcuda_inject_launch_failure", rc)

    def inject_invalid_handle(self, calls: int) -> None:
        """Fail the next ``calls`` event record/query/synchronize/elapsed calls with INVALID_HANDLE."""
        self._lib.simcuda_inject_invalid_handle(calls)

    def inject_event_oom(self, after: int) -> None:
        """After ``after`` more event creations, fail each with OUT_OF_MEMORY (negative clears)."""
        self._lib.simcuda_inject_event_oom(after)

    def set_device_count(self, count: int) -> None:
        """Devices reported from now on; 0 makes cuInit fail with CUDA_ERROR_NO_DEVICE.

        Ignored while a primary context is active (call ``reset()`` first).
        """
        self._lib.simcuda_set_device_count(count)

    def event_time_ns(self, event: object) -> int:
        """True completion time (CLOCK_MONOTONIC ns, unquantized) of an event's last record."""
        out = ctypes.c_uint64()
        rc = self._lib.simcuda_event_time_ns(int(event), out)
        if rc != 0:
            raise SimCudaError("simcuda_event_time_ns", rc)
        return out.value

    def requested_version(self, entry_point: str) -> int:
        """The CUDA version cuGetProcAddress was last asked for ``entry_point`` at (0: never)."""
        v = self._lib.simcuda_requested_version(entry_point.encode())
        if v < 0:
            raise KeyError(entry_point)
        return v

    def calls(self, entry_point: str) -> int:
        """How often an entry point was called since the last reset (``_v2`` counts under the base name)."""
        n = self._lib.simcuda_call_count(entry_point.encode())
        if n < 0:
            raise KeyError(entry_point)
        return n

    def counters(self) -> dict[str, int]:
        """live_events, events_created, blocking_calls, blocked_ns, live_streams, active_contexts."""
        return {name: self._lib.simcuda_counter(i) for name, i in _COUNTERS.items()}

    def reset(self) -> None:
        """Forget all contexts, streams and events; clear faults and counters; restore the device count.

        The driver stays initialized if ``cuInit`` ever succeeded in this process.
        """
        self._lib.simcuda_reset()
