# SPDX-License-Identifier: Apache-2.0
"""brickscope._gpu._driver: result tuples to values or CudaError, and context switching."""

from __future__ import annotations

from typing import Any

import pytest

from brickscope._gpu import CudaError, _driver

pytestmark = pytest.mark.gpu


@pytest.fixture
def drv(simdriver: Any) -> Any:
    """The driver module, initialised, with device 0's primary context current."""
    driver = _driver.init()
    driver.cuCtxSetCurrent(driver.cuDevicePrimaryCtxRetain(0)[1])
    return driver


class TestCheck:
    def test_unwraps_values(self, drv: Any) -> None:
        """check returns None, the single value, or the tuple of values of a successful call."""
        assert _driver.check(drv.cuInit(0)) is None
        assert _driver.check(drv.cuDeviceGetCount()) == 2
        flags, active = _driver.check(drv.cuDevicePrimaryCtxGetState(0))
        assert (int(flags), bool(active)) == (0, True)

    def error_of(self, result: tuple[Any, ...]) -> CudaError:
        with pytest.raises(CudaError) as exc:
            _driver.check(result)
        return exc.value

    def test_unrecorded_event(self, drv: Any) -> None:
        """Elapsed time with a never-recorded event raises CudaError CUDA_ERROR_INVALID_HANDLE."""
        recorded, unrecorded = _driver.check(drv.cuEventCreate(0)), _driver.check(drv.cuEventCreate(0))
        drv.cuEventRecord(recorded, 0)
        error = self.error_of(drv.cuEventElapsedTime(recorded, unrecorded))
        assert error.code_name == "CUDA_ERROR_INVALID_HANDLE"
        assert error.message == "invalid resource handle"

    def test_incomplete_event(self, drv: Any, simdriver: Any) -> None:
        """Elapsed time with an incomplete event raises CudaError CUDA_ERROR_NOT_READY."""
        start, end = _driver.check(drv.cuEventCreate(0)), _driver.check(drv.cuEventCreate(0))
        drv.cuEventRecord(start, 0)
        simdriver.enqueue_kernel(0, 50_000_000)
        drv.cuEventRecord(end, 0)
        assert self.error_of(drv.cuEventElapsedTime(start, end)).code_name == "CUDA_ERROR_NOT_READY"

    def test_destroyed_event(self, drv: Any) -> None:
        """Elapsed time with a destroyed event raises CudaError CUDA_ERROR_INVALID_HANDLE."""
        start, end = _driver.check(drv.cuEventCreate(0)), _driver.check(drv.cuEventCreate(0))
        drv.cuEventRecord(start, 0)
        drv.cuEventRecord(end, 0)
        _driver.check(drv.cuEventDestroy(start))
        assert self.error_of(drv.cuEventElapsedTime(start, end)).code_name == "CUDA_ERROR_INVALID_HANDLE"

    def test_disable_timing_event(self, drv: Any) -> None:
        """Elapsed time with a CU_EVENT_DISABLE_TIMING event raises CudaError CUDA_ERROR_INVALID_HANDLE."""
        start, end = _driver.check(drv.cuEventCreate(0)), _driver.check(drv.cuEventCreate(0x2))
        drv.cuEventRecord(start, 0)
        drv.cuEventRecord(end, 0)
        assert self.error_of(drv.cuEventElapsedTime(start, end)).code_name == "CUDA_ERROR_INVALID_HANDLE"

    def test_sticky_launch_failure(self, drv: Any, simdriver: Any) -> None:
        """A call after a sticky launch failure raises CudaError CUDA_ERROR_LAUNCH_FAILED with its message."""
        simdriver.inject_launch_failure(0)
        error = self.error_of(drv.cuEventCreate(0))
        assert (error.code_name, error.message) == ("CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure")
        assert str(error) == "CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure"


class TestInContext:
    def test_pushes_a_differing_context_and_restores(self, drv: Any) -> None:
        """in_context runs the call in the given context and leaves the caller's context current."""
        ctx0 = drv.cuCtxGetCurrent()[1]
        ctx1 = drv.cuDevicePrimaryCtxRetain(1)[1]
        device = _driver.in_context(drv, ctx1, lambda: _driver.check(drv.cuCtxGetDevice()))
        assert int(device) == 1
        assert drv.cuCtxGetCurrent()[1] == ctx0

    def test_restores_after_an_exception(self, drv: Any) -> None:
        """in_context pops its context even when the call raises."""
        ctx0 = drv.cuCtxGetCurrent()[1]
        ctx1 = drv.cuDevicePrimaryCtxRetain(1)[1]

        def fail() -> None:
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            _driver.in_context(drv, ctx1, fail)
        assert drv.cuCtxGetCurrent()[1] == ctx0

    def test_no_push_when_already_current(self, drv: Any, simdriver: Any) -> None:
        """in_context does not push when the context is already current (the hot-path case)."""
        before = simdriver.calls("cuCtxPushCurrent")
        _driver.in_context(drv, drv.cuCtxGetCurrent()[1], drv.cuDeviceGetCount)
        assert simdriver.calls("cuCtxPushCurrent") == before
