# SPDX-License-Identifier: Apache-2.0
"""brickscope.torch on the CUDA clock (simulated driver): each brick on the current torch
stream; nothing recorded on the GPU while a CUDA graph is being captured.

The CPU build of torch has no CUDA tensors, so the test hands the model a tensor that says
it is on CUDA and stands in for torch's current-stream and capture queries; everything
from there on (events, elapsed times, spans) is brickscope on the simulated driver.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (make test installs the CPU build)")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from torch import nn  # noqa: E402

import brickscope as bs  # noqa: E402
import brickscope.torch as bt  # noqa: E402
from brickscope.torch import _calls  # noqa: E402
from brickscope.trace import attributes as A  # noqa: E402

pytestmark = pytest.mark.gpu


class OnCuda(torch.Tensor):
    """A CPU tensor that answers is_cuda=True, as a CUDA tensor would."""

    @property
    def is_cuda(self) -> bool:  # type: ignore[override]
        return True


def new_stream() -> int:
    from cuda.bindings import driver as drv

    drv.cuCtxPushCurrent(drv.cuDevicePrimaryCtxRetain(0)[1])
    stream = drv.cuStreamCreate(0x1)[1]
    drv.cuCtxPopCurrent()
    return int(stream)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4)
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(self.norm(x))


@pytest.fixture(name="spans")
def _spans(simdriver):
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    session = bs.configure(provider, clock="cuda", max_delay_millis=60_000)
    assert session.clock == "cuda"
    yield exporter
    bs.shutdown()


class TestTorchOnCuda:
    def test_bricks_are_timed_on_the_current_torch_stream(self, spans, simdriver, monkeypatch):
        """stream="current": each brick records its events on the stream torch says is current."""
        stream = new_stream()
        monkeypatch.setattr(_calls, "current_stream_handle", lambda tensor: stream)
        monkeypatch.setattr(_calls, "is_capturing", lambda: False)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # asked once, at instrument()
        model = Net()
        with bt.instrument(model, nvtx=False):
            model(torch.zeros(3, 4).as_subclass(OnCuda))
            bs.sync()
        bricks = {s.name: s.attributes for s in spans.get_finished_spans()}
        assert set(bricks) == {"Net", "norm", "proj"}
        for attributes in bricks.values():
            assert attributes[A.CLOCK] == A.CLOCK_CUDA
            assert attributes[A.GPU_STREAM_ID] == stream

    def test_nothing_is_recorded_on_the_gpu_during_graph_capture(self, spans, simdriver, monkeypatch):
        """While the stream captures a graph: no event recorded, host-timed bricks that say why."""
        stream = new_stream()
        monkeypatch.setattr(_calls, "current_stream_handle", lambda tensor: stream)
        monkeypatch.setattr(_calls, "is_capturing", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # asked once, at instrument()
        model = Net()
        with bt.instrument(model, nvtx=False):
            before = simdriver.calls("cuEventRecord")
            model(torch.zeros(3, 4).as_subclass(OnCuda))
            assert simdriver.calls("cuEventRecord") == before
            bs.sync()
        spans_ = spans.get_finished_spans()
        assert sorted(s.name for s in spans_) == ["Net", "norm", "proj"]
        for span in spans_:
            assert span.attributes[A.CLOCK] == A.CLOCK_HOST
            assert span.attributes[A.GPU_TIMING_SKIPPED] == "cuda_graph_capture"
            assert A.GPU_TIMING_ERROR not in span.attributes
            assert span.attributes[A.BRICK_ELEMENTS] == 3
