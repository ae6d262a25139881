# SPDX-License-Identifier: Apache-2.0
"""torch.compile: instrumentation never breaks the graph; what compiled code records."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (make test installs the CPU build)")

from models import TinyGPT, tokens  # noqa: E402

import brickscope as bs  # noqa: E402
import brickscope.torch as bt  # noqa: E402
from brickscope.testing import capture_spans  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_nvtx")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class TestCompile:
    def test_fullgraph_compiles_the_instrumented_model(self):
        """fullgraph=True (which fails on any graph break) compiles the instrumented model; same output."""
        model = TinyGPT(blocks=2)
        x = tokens()
        expected = model(x)
        with capture_spans(), bt.instrument(model):
            compiled = torch.compile(model, fullgraph=True, backend="eager")
            with bs.step(0):
                assert torch.allclose(compiled(x), expected)

    def test_instrument_then_compile_records_nothing_inside(self):
        """Module calls inside the compiled graph record no brick; the step around the call does."""
        model = TinyGPT(blocks=1)
        with capture_spans() as captured, bt.instrument(model):
            compiled = torch.compile(model, fullgraph=True, backend="eager")
            with bs.step(0):
                compiled(tokens())
            names = [s.name for s in captured.spans]
        assert names == ["step"]

    def test_compile_then_instrument_gives_one_brick_per_compiled_call(self):
        """instrument(torch.compile(model)): one brick, named after the model, for each compiled call."""
        model = TinyGPT(blocks=1)
        compiled = torch.compile(model, fullgraph=True, backend="eager")
        with capture_spans() as captured, bt.instrument(compiled) as handle:
            assert handle.modules[0].name == "TinyGPT"
            assert "layers.0.attn" in [m.path for m in handle.modules]  # paths read as the model's own
            for n in range(2):
                with bs.step(n):
                    compiled(tokens())
            names = sorted(s.name for s in captured.spans)
        assert names == ["TinyGPT", "TinyGPT", "step", "step"]
