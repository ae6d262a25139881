# SPDX-License-Identifier: Apache-2.0
"""Stream arguments: every accepted form resolves to the right stream, device and context."""

from __future__ import annotations

from typing import Any

import pytest

from brickscope._gpu import StreamRef, stream_handle

pytestmark = pytest.mark.gpu

MS = 1_000_000


class CudaStreamProtocol:
    """Like cuda.core / torch >= 2.10 streams: __cuda_stream__() -> (version, handle)."""

    def __init__(self, handle: int, version: int = 0) -> None:
        self.handle, self.version = handle, version

    def __cuda_stream__(self) -> tuple[int, int]:
        return (self.version, self.handle)


class TorchLike:
    def __init__(self, handle: int) -> None:
        self.cuda_stream = handle


class CupyLike:
    def __init__(self, handle: int) -> None:
        self.ptr = handle


class TestStreamHandle:
    @pytest.mark.parametrize(
        "make",
        [int, CudaStreamProtocol, TorchLike, CupyLike],
        ids=["int", "__cuda_stream__", "cuda_stream", "ptr"],
    )
    def test_forms_give_the_raw_handle(self, make: Any) -> None:
        """Each stream-like form yields its raw handle."""
        assert stream_handle(make(0x5E7A000000000007)) == 0x5E7A000000000007

    def test_none_is_the_legacy_default_stream(self) -> None:
        """None means handle 0, the legacy default stream."""
        assert stream_handle(None) == 0

    def test_cuda_bindings_stream(self) -> None:
        """A cuda.bindings CUstream gives its pointer value."""
        from cuda.bindings import driver

        assert stream_handle(driver.CUstream(0x1234)) == 0x1234

    def test_numpy_integer(self) -> None:
        """Integers with __index__ (numpy) are accepted."""
        np = pytest.importorskip("numpy")
        assert stream_handle(np.uint64(42)) == 42

    @pytest.mark.parametrize("bad", [True, "0x1", 1.5, object()], ids=["bool", "str", "float", "object"])
    def test_bad_types_raise_type_error(self, bad: object) -> None:
        """Anything not stream-like raises TypeError naming the accepted forms."""
        with pytest.raises(TypeError, match="CUDA stream"):
            stream_handle(bad)

    def test_unknown_protocol_version_raises_type_error(self) -> None:
        """A __cuda_stream__ version other than 0 is rejected."""
        with pytest.raises(TypeError, match="version"):
            stream_handle(CudaStreamProtocol(5, version=1))

    def test_negative_handle_raises_value_error(self) -> None:
        """A negative handle is rejected."""
        with pytest.raises(ValueError, match="negative"):
            stream_handle(-1)


class TestStreamRef:
    @pytest.fixture
    def user_stream(self, cuda_timer: Any) -> tuple[Any, int]:
        """A blocking stream created on device 1 by the 'program'."""
        from cuda.bindings import driver

        ctx = driver.cuDevicePrimaryCtxRetain(1)[1]
        driver.cuCtxSetCurrent(ctx)
        stream = driver.cuStreamCreate(0)[1]
        driver.cuCtxSetCurrent(None)
        return stream, int(stream)

    @pytest.mark.parametrize(
        "make",
        [
            lambda s, h: h,
            lambda s, h: s,
            lambda s, h: CudaStreamProtocol(h),
            lambda s, h: TorchLike(h),
            lambda s, h: CupyLike(h),
        ],
        ids=["int", "CUstream", "__cuda_stream__", "cuda_stream", "ptr"],
    )
    def test_every_form_resolves_to_the_same_ref(self, cuda_timer: Any, user_stream: Any, make: Any) -> None:
        """All forms of one stream give one cached StreamRef with the stream's device."""
        stream, handle = user_stream
        ref = cuda_timer.stream_ref(make(stream, handle))
        assert isinstance(ref, StreamRef)
        assert (ref.handle, ref.device) == (handle, 1)
        assert cuda_timer.stream_ref(handle) == ref

    def test_marks_land_on_the_given_stream(self, cuda_timer: Any, simdriver: Any, user_stream: Any) -> None:
        """A mark on a resolved stream completes after that stream's queued work."""
        stream, handle = user_stream
        ref = cuda_timer.stream_ref(CudaStreamProtocol(handle))
        from cuda.bindings import driver

        driver.cuCtxSetCurrent(driver.cuDevicePrimaryCtxRetain(1)[1])
        _, end = simdriver.enqueue_kernel(handle, 20 * MS)
        mark = cuda_timer.mark(ref)
        assert simdriver.event_time_ns(cuda_timer._marks[mark][0]) == end

    def test_none_without_current_context_is_device_0(self, cuda_timer: Any) -> None:
        """None with no current context means device 0's legacy default stream."""
        ref = cuda_timer.stream_ref(None)
        assert (ref.handle, ref.device) == (0, 0)

    def test_none_follows_the_current_device(self, cuda_timer: Any) -> None:
        """None with device 1's context current means device 1's legacy default stream."""
        from cuda.bindings import driver

        driver.cuCtxSetCurrent(driver.cuDevicePrimaryCtxRetain(1)[1])
        ref = cuda_timer.stream_ref(None)
        assert (ref.handle, ref.device) == (0, 1)
        assert cuda_timer.stream_ref(0) == ref
        driver.cuCtxSetCurrent(None)
        assert cuda_timer.stream_ref(None).device == 0

    def test_invalid_handle_raises_value_error(self, cuda_timer: Any) -> None:
        """A handle that names no stream raises ValueError at set-up time."""
        with pytest.raises(ValueError, match="not a valid CUDA stream"):
            cuda_timer.stream_ref(0x12345678)

    def test_bad_type_raises_type_error(self, cuda_timer: Any) -> None:
        """A non-stream argument raises TypeError at set-up time."""
        with pytest.raises(TypeError):
            cuda_timer.stream_ref("default")
