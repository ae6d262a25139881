# SPDX-License-Identifier: Apache-2.0
"""An instrumented module's call, as both implementations run it (the C ``module_call`` where
the accelerator is built, the Python ``call`` otherwise): the scope each call opens, errors,
torch.compile, and which implementation is in use."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (make test installs the CPU build)")

from models import WIDTH, TinyGPT, WithRaising, tokens  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402
from torch import nn  # noqa: E402

import brickscope as bs  # noqa: E402
import brickscope.torch as bt  # noqa: E402
from brickscope import _record, native  # noqa: E402
from brickscope.testing import capture_spans  # noqa: E402
from brickscope.torch import _calls  # noqa: E402
from brickscope.trace import attributes as A  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_nvtx")


class Kwargs(nn.Module):
    """A module whose forward takes anything, returning what it was given."""

    def forward(self, *args, **kwargs):
        return args, kwargs


@pytest.fixture
def choices(monkeypatch: pytest.MonkeyPatch) -> list[_calls.Choice]:
    """The Choice instrument() makes for each module, in plan order (then the functional losses')."""
    made: list[_calls.Choice] = []
    original = _calls.scope_choice

    def record(*args, **kwargs):
        made.append(original(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(_calls, "scope_choice", record)
    return made


def elements(spans) -> list:
    return [s.attributes.get(A.BRICK_ELEMENTS) for s in sorted(spans, key=lambda s: s.start_time)]


class TestScopeChosen:
    def test_one_brick_per_shape_and_dtype_with_its_element_count(self, choices):
        """Each (shape, dtype) gets one brick, made at its first call and reused: rows of a float
        tensor, every element of an index tensor, every element of a one-dimensional one."""
        model = nn.Identity()
        calls = [
            torch.zeros(300, 2, 4),  # float: 300 * 2 rows = 600 (dimensions past 256 are not small ints)
            torch.zeros(300, 2, 4),
            torch.zeros(301, 2, 4),  # 602
            torch.zeros(300, 2, 4, dtype=torch.int64),  # index: 300 * 2 * 4 = 2400
            torch.zeros(300, 2, 4),  # 600 again, after two other keys
            torch.zeros(5),  # one dimension: 5
            torch.zeros(301, 2, 4),  # 602 again
        ]
        with capture_spans() as captured, bt.instrument(model):
            for x in calls:
                model(x)
            spans = captured.bricks()
        assert elements(spans) == [600, 600, 602, 2400, 600, 5, 602]
        choice = choices[0]  # (then the functional losses')
        keys = [(tuple(shape), dtype) for shape, dtype in choice.scopes]
        assert keys == [
            ((300, 2, 4), torch.float32),
            ((301, 2, 4), torch.float32),
            ((300, 2, 4), torch.int64),
            ((5,), torch.float32),
        ]
        assert [choice.scopes[k]._elements for k in choice.scopes] == [600, 602, 2400, 5]

    def test_no_tensor_first_opens_the_plain_brick_and_arguments_pass_through(self, choices):
        """No positional argument, a non-tensor first one, or a tensor only as a keyword: the
        module's plain brick (no element count); the arguments reach forward unchanged."""
        model = Kwargs()
        x = torch.ones(3, 2)
        with capture_spans() as captured, bt.instrument(model, bricks={Kwargs: "kw"}):
            assert model() == ((), {})
            assert model(7, x, scale=2) == ((7, x), {"scale": 2})
            assert model(x=x) == ((), {"x": x})
            assert model(x, flag=True) == ((x,), {"flag": True})
            spans = captured.bricks()
        assert [s.name for s in spans] == ["kw"] * 4
        assert elements(spans) == [None, None, None, 3]
        assert len(choices[0].scopes) == 1

    def test_a_tensor_it_cannot_read_opens_the_plain_brick(self):
        """A tensor subclass whose shape raises an Exception: the call runs in the plain brick."""

        class Unreadable(torch.Tensor):
            @property
            def shape(self):
                raise RuntimeError("no shape here")

        model = nn.Identity()
        x = torch.ones(4, 2).as_subclass(Unreadable)
        with capture_spans() as captured, bt.instrument(model):
            assert model(x) is x
            spans = captured.bricks()
        assert elements(spans) == [None]

    def test_past_64_shapes_each_call_builds_its_own_brick(self, choices):
        """64 (shape, dtype) keys are cached; a 65th and 66th shape get a brick built per call,
        with the right count every time, also when the same uncached shape repeats."""
        model = nn.Identity()
        with capture_spans() as captured, bt.instrument(model):
            for rows in range(1, 67):
                model(torch.zeros(rows, 3))  # rows elements
            model(torch.zeros(65, 3))
            model(torch.zeros(65, 3))
            model(torch.zeros(64, 3))  # the last cached one
            spans = captured.bricks()
        assert elements(spans) == list(range(1, 67)) + [65, 65, 64]
        scopes = choices[0].scopes
        assert len(scopes) == 64
        assert [shape[0] for shape, _ in scopes] == list(range(1, 65))

    def test_where_cuda_can_occur_the_stream_following_chooser_picks_the_brick(self, choices, monkeypatch):
        """With CUDA available (stream="current"), the brick is keyed by (shape, dtype, stream);
        a CPU tensor has no stream (None) and gets the same counts."""
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        model = nn.Identity()
        with capture_spans() as captured, bt.instrument(model):
            for x in (torch.zeros(4, 3), torch.zeros(4, 3), torch.zeros(6, dtype=torch.int64), "no tensor"):
                model(x)
            spans = captured.bricks()
        assert elements(spans) == [4, 4, 6, None]
        assert choices[0].follow_stream
        assert [(tuple(shape), dtype, stream) for shape, dtype, stream in choices[0].scopes] == [
            ((4, 3), torch.float32, None),
            ((6,), torch.int64, None),
        ]

    def test_a_layer_opens_its_one_scope(self):
        """A numbered block is a layer whatever it is called with."""
        model = TinyGPT(blocks=2)
        with capture_spans() as captured, bt.instrument(model):
            model(tokens())
            model(tokens(batch=1, seq=3))
            layers = captured.of_kind("layer")
        assert sorted(s.attributes[A.LAYER_INDEX] for s in layers) == [0, 0, 1, 1]


class TestErrors:
    @pytest.mark.parametrize("error", [ValueError("bad input"), KeyboardInterrupt()], ids=["exception", "interrupt"])
    def test_the_error_propagates_and_the_scope_closes_once(self, error):
        """The very exception the forward raised reaches the caller; its brick closed once, as an error."""
        model = WithRaising()
        model.mlp.error = error
        with capture_spans() as captured, bt.instrument(model):
            with pytest.raises(type(error)) as raised:
                model(torch.zeros(2, WIDTH))
            assert raised.value is error
            assert _record.TOP.get() is None
            spans = {s.name: s for s in captured.spans}
            stats = captured.session.stats()
        assert sorted(spans) == ["WithRaising", "mlp", "mlp.inner", "norm"]
        assert spans["mlp"].status.status_code is StatusCode.ERROR
        assert spans["WithRaising"].status.status_code is StatusCode.ERROR
        assert stats["misuse"] == 0 and stats["scope_repairs"] == 0

    def test_off_runs_the_plain_forward(self):
        """brickscope disabled: the call returns the forward's result and opens nothing."""
        model = nn.Identity()
        x = torch.ones(2)
        with capture_spans() as captured, bt.instrument(model):
            bs.disable()
            assert model(x) is x
            assert _record.TOP.get() is None
            bs.enable()
            model(x)
            assert len(captured.bricks()) == 1


class TestCompiled:
    def test_compiled_instrumented_model_records_nothing_and_does_not_break_the_graph(self):
        """torch.compile(fullgraph=True) of an instrumented model: no graph break counted, one
        graph, the same output, and only the step recorded; eager calls afterwards record again."""
        from torch._dynamo.utils import counters

        torch._dynamo.reset()
        counters.clear()
        model = TinyGPT(blocks=1)
        x = tokens()
        expected = model(x)
        with capture_spans() as captured, bt.instrument(model):
            compiled = torch.compile(model, fullgraph=True, backend="eager")
            with bs.step(0):
                assert torch.equal(compiled(x), expected)
            assert [s.name for s in captured.spans] == ["step"]
            captured.clear()
            model(x)
            eager = len(captured.bricks())
        torch._dynamo.reset()
        assert not counters["graph_break"]
        assert counters["stats"]["unique_graphs"] == 1
        assert eager == len([m for m in bt.instrument(TinyGPT(blocks=1)).modules if m.kind == "brick"])


class TestImplementation:
    def test_the_c_call_is_in_use_when_native_is_required(self):
        """With the accelerator, an instrumented forward wraps brickscope._hotpath.module_call;
        under BRICKSCOPE_PURE_PYTHON the Python call; implementations() says which."""
        model = nn.Linear(2, 2)
        with bt.instrument(model):
            wrapper = model.__dict__["forward"]
            part = native.implementations()["brickscope._hotpath.ModuleCall"]
            if native.PURE_PYTHON:
                assert part == native.Implementation("python", "BRICKSCOPE_PURE_PYTHON is set")
                assert isinstance(wrapper.func, types.FunctionType)
            elif native.REQUIRE_NATIVE:
                assert part == native.Implementation("c", None)
                assert wrapper.func is _record.hotpath.module_call
                assert type(wrapper.args[1]) is _record.hotpath.ModuleCall
            assert wrapper.__wrapped__ == model.forward.__wrapped__

    def test_a_build_without_it_is_refused_with_the_reason(self, monkeypatch, caplog):
        """A build of the accelerator that lacks module_call: the Python call runs, and implementations() says why."""
        monkeypatch.setitem(native._parts, _calls._MODULE_CALL, native.implementations().get(_calls._MODULE_CALL))
        monkeypatch.setattr(_calls, "hotpath", types.SimpleNamespace())
        assert _calls._load_module_call() is None
        assert native.implementations()[_calls._MODULE_CALL] == native.Implementation(
            "python", "this build of brickscope._hotpath has no module_call (rebuild it)"
        )


class Boom(ValueError):
    """An exception that can be weakly referenced (built-in ones cannot)."""


class Echo(nn.Module):
    """Returns its first argument; raises ``error()`` when given one."""

    def forward(self, x=None, *args, error=None, **kwargs):
        if error is not None:
            raise error("boom")
        return x


class TestReferences:
    def test_calls_leave_every_object_with_the_references_it_had(self, choices):
        """A thousand calls of each kind (a cached brick, another shape, keywords, no tensor, no
        argument, an error) leave their arguments, results, dtypes, bricks and the module with
        the reference counts they had, and every exception raised freed: a reference the call
        kept or dropped once a call would be off by a thousand."""
        import gc
        import sys
        import weakref

        model = Echo()
        x, y, value = torch.zeros(300, 4), torch.zeros(2, 3, dtype=torch.int64), object()
        raised = []
        with capture_spans() as captured, bt.instrument(model):
            brick = choices[0].plain

            def calls() -> None:
                assert model(x) is x
                assert model(y, 1) is y
                assert model(x, key=value) is x
                assert model(value) is value
                assert model() is None
                try:
                    model(x, error=Boom)
                except Boom as exc:
                    raised.append(weakref.ref(exc))

            calls()  # the bricks of both shapes made and cached
            captured.clear()
            watched = (x, y, value, torch.float32, torch.int64, brick, model, *choices[0].scopes.values())
            gc.collect()
            before = [sys.getrefcount(o) for o in watched]
            for _ in range(1000):
                calls()
            assert len(captured.bricks()) == 6000
            captured.clear()
            gc.collect()
            after = [sys.getrefcount(o) for o in watched]
        assert after == before
        assert all(ref() is None for ref in raised)
