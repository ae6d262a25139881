# SPDX-License-Identifier: Apache-2.0
"""TorchInstrumentor in process: discovery of model roots, and an explicit instrument() winning over it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (make test installs the CPU build)")
pytest.importorskip("opentelemetry.instrumentation", reason="opentelemetry-instrumentation is not installed")

from models import TinyGPT, tokens  # noqa: E402
from torch import nn  # noqa: E402

import brickscope.torch as bt  # noqa: E402
from brickscope.instrumentation.torch import TorchInstrumentor  # noqa: E402
from brickscope.testing import capture_spans  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_nvtx")


@pytest.fixture(name="instrumentor")
def _instrumentor():
    instrumentor = TorchInstrumentor()
    instrumentor.instrument()
    yield instrumentor
    instrumentor.uninstrument()


class TestTorchInstrumentor:
    def test_first_call_is_whole_and_uninstrument_restores_torch(self, instrumentor):
        """The first call of a new model is already instrumented; uninstrument() restores Module.__call__ and classes."""
        original_call = nn.Module._wrapped_call_impl
        model = TinyGPT(blocks=1)
        with capture_spans() as captured:
            model(tokens())
            assert len(captured.bricks()) == 10  # model, emb, head; ln; attn + 2 linears; mlp + 2 linears
        assert nn.Module.__call__ is not original_call
        instrumentor.uninstrument()
        assert nn.Module.__call__ is original_call
        assert all(type(m) is type(n) for m, n in zip(model.modules(), TinyGPT(1).modules()))

    def test_an_explicit_instrument_replaces_the_automatic_one(self, instrumentor):
        """instrument(model) after the instrumentor took the model: the program's settings win, no error."""
        model = TinyGPT(blocks=1)
        with capture_spans() as captured:
            model(tokens())
            captured.clear()
            with bt.instrument(model, bricks={"head": "lm_head", "*": None}, layers=None):
                model(tokens())
                assert [s.name for s in captured.spans] == ["lm_head"]
            captured.clear()
            model(tokens())  # the explicit instrumentation removed: the model is not rediscovered
            assert captured.spans == ()

    def test_compiled_models_compile_with_fullgraph_and_give_one_brick(self, instrumentor):
        """Under the instrumentor a torch.compile'd model (fullgraph) compiles, one brick per call; eager calls give its modules."""
        import brickscope as bs

        torch._dynamo.reset()
        model = TinyGPT(blocks=1)
        compiled = torch.compile(model, fullgraph=True, backend="eager")
        with capture_spans() as captured:
            with bs.step(0):
                compiled(tokens())
            assert sorted(s.name for s in captured.spans) == ["TinyGPT", "step"]
            captured.clear()
            model(tokens())  # the same model, eagerly: every module but the model itself,
            assert len(captured.bricks()) == 9  # for which the compiled wrapper's brick stands
        torch._dynamo.reset()
