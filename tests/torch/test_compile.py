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


class TestScopesInCompiledCode:
    """A user's own scopes inside a compiled function: no graph break, nothing recorded inside."""

    def test_with_brick_decorator_and_tokens_compile_with_fullgraph(self):
        """with bs.brick, a @bs.brick function and enter_scope/exit_scope all compile with fullgraph=True."""

        @bs.brick("activation")
        def act(x):
            return torch.relu(x)

        def f(x):
            with bs.layer(0), bs.brick("rms_norm", elements=4):
                y = x * 2
            token = bs.enter_scope(bs.brick("ffn_up"))
            y = act(y + 1)
            bs.exit_scope(token)
            return y

        x = torch.ones(4)
        with capture_spans() as captured:
            compiled = torch.compile(f, fullgraph=True, backend="eager")
            with bs.step(0):
                assert torch.equal(compiled(x), torch.full((4,), 3.0))
            assert [s.name for s in captured.spans] == ["step"]
            captured.clear()
            with bs.step(1):
                f(x)  # the same function, eagerly: every scope recorded
            names = sorted(s.name for s in captured.spans)
        assert names == ["activation", "ffn_up", "layer", "rms_norm", "step"]

    def test_configure_installs_the_guard_when_torch_is_imported(self):
        """Without importing brickscope.torch, configure() after `import torch` guards every scope."""
        code = (
            "import torch, brickscope as bs\n"
            "from brickscope import _state\n"
            "assert _state.compiling is None\n"
            "bs.configure(clock='host')\n"
            "assert _state.compiling is torch.compiler.is_compiling\n"
            "def f(x):\n"
            "    with bs.brick('rms_norm'):\n"
            "        return x + 1\n"
            "print(torch.compile(f, fullgraph=True, backend='eager')(torch.zeros(2)).tolist())\n"
        )
        import subprocess
        import sys

        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "[1.0, 1.0]"

    def test_module_compile_in_place_compiles_the_bricks_away(self):
        """model.compile() compiles the instrumented forward with the model: it runs, and records no brick."""
        model = TinyGPT(blocks=1)
        x = tokens()
        expected = model(x)
        with capture_spans() as captured, bt.instrument(model):
            model.compile(fullgraph=True, backend="eager")
            with bs.step(0):
                out = model(x)
                model(x)
            names = sorted(s.name for s in captured.spans)
        assert names == ["step"]  # torch.compile(model) keeps the model's brick (test above)
        assert torch.equal(out, expected)


class TestFx:
    def test_symbolic_trace_sees_the_same_module_calls(self):
        """torch.fx traces an instrumented model into the same graph as the uninstrumented one."""
        model = TinyGPT(blocks=1)
        plain = [(n.op, str(n.target)) for n in torch.fx.symbolic_trace(model).graph.nodes]
        with capture_spans(), bt.instrument(model):
            traced = torch.fx.symbolic_trace(model)
        assert [(n.op, str(n.target)) for n in traced.graph.nodes] == plain
        assert torch.equal(traced(tokens()), model(tokens()))


class TestCompilingAsked:
    def test_an_instrumented_call_asks_is_compiling_once_and_records_its_brick(self, monkeypatch):
        """The module call asks torch.compiler.is_compiling() itself and the scope it opens
        does not ask again: one question a call (the step asks its own), and the brick is
        still recorded."""
        from brickscope import _state
        from brickscope.torch import _calls

        asked = []

        def is_compiling() -> bool:
            asked.append(1)
            return False

        linear = torch.nn.Linear(4, 4)
        with capture_spans() as captured, bt.instrument(linear):
            monkeypatch.setattr(_calls, "_is_compiling", is_compiling)
            monkeypatch.setattr(_state, "compiling", is_compiling)
            with bs.step(0):
                before = len(asked)
                linear(torch.ones(2, 4))
                during = len(asked) - before
            captured.session.sync()
            names = sorted(s.name for s in captured.spans)
        assert during == 1
        assert len(names) == 2 and "step" in names


class TestIsCompilingProbe:
    """The module call asks ``torch.compiler.is_compiling()`` through a C twin that reads the
    flag the function returns (a private global of torch.compiler): checked against the
    function itself, and torch's own function kept where the probe does not recognise it."""

    def test_the_twin_answers_as_torch_does_with_the_flag_either_way(self, monkeypatch):
        from brickscope._record import hotpath
        from brickscope.torch import _calls

        if hotpath is None:
            assert _calls._is_compiling is torch.compiler.is_compiling  # pure Python: torch's own
            return
        assert _calls._is_compiling is hotpath.torch_compiling
        for flag in (False, True, False):
            monkeypatch.setattr(torch.compiler, "_is_compiling_flag", flag)
            assert _calls._is_compiling() is torch.compiler.is_compiling() is flag

    def test_a_function_without_the_flag_is_kept(self):
        from brickscope.torch._calls import compiling_probe

        def is_compiling() -> bool:  # a future torch that asks something else
            return False

        assert compiling_probe(is_compiling) is is_compiling
        assert compiling_probe(len) is len  # not a Python function at all
