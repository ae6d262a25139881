# SPDX-License-Identifier: Apache-2.0
"""instrument(model): the span tree mirrors the module tree; remove() restores the model exactly."""

from __future__ import annotations

import copy
import pickle

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (make test installs the CPU build)")

from models import WIDTH, Block, TinyGPT, WithRaising, tokens  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402
from torch import nn  # noqa: E402

import brickscope as bs  # noqa: E402
import brickscope.torch as bt  # noqa: E402
from brickscope import _record  # noqa: E402
from brickscope.testing import capture_spans  # noqa: E402
from brickscope.trace import attributes as A  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_nvtx")


def tree(spans) -> list:
    """The span forest as nested (name, [children]) lists, children in start order."""
    children: dict = {}
    ids = {s.context.span_id for s in spans}
    for span in sorted(spans, key=lambda s: s.start_time):
        parent = span.parent.span_id if span.parent is not None and span.parent.span_id in ids else None
        children.setdefault(parent, []).append(span)

    def build(span):
        return (span.name, [build(c) for c in children.get(span.context.span_id, [])])

    return [build(root) for root in children.get(None, [])]


def block_tree() -> tuple:
    return (
        "layer",
        [
            ("ln", []),
            ("attn", [("attn.qkv", []), ("attn.proj", [])]),
            ("mlp", [("mlp.up", []), ("mlp.down", [])]),
        ],
    )


class WithLosses(nn.Module):
    """A loss computed functionally in forward, and one by a loss module it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(WIDTH, 4)
        self.criterion = nn.CrossEntropyLoss()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self.head(x)
        return torch.nn.functional.cross_entropy(logits, y) + self.criterion(logits, y)


class TestSpanTree:
    def test_functional_loss_in_forward_is_a_brick_and_a_loss_module_is_one(self):
        """F.cross_entropy inside the model's forward is a brick ``loss``; inside a loss module, no second brick."""
        model = WithLosses()
        x, y = torch.zeros(6, WIDTH), torch.zeros(6, dtype=torch.long)
        with capture_spans() as captured, bt.instrument(model):
            model(x, y)
            torch.nn.functional.cross_entropy(model.head(x), y)  # outside the model's call: no loss brick
            spans = captured.spans
        assert tree(spans) == [("WithLosses", [("head", []), ("loss", []), ("criterion", [])]), ("head", [])]
        (functional,) = [s for s in spans if s.name == "loss"]
        assert functional.attributes[A.BRICK_CATEGORY] == "loss"
        assert functional.attributes[A.BRICK_ELEMENTS] == 6  # rows of the (6, 4) logits

    def test_span_tree_mirrors_the_module_tree(self):
        """Model -> embedding, one layer per block (its norm, attention, MLP and their linears), head."""
        model = TinyGPT(blocks=3)
        with capture_spans() as captured, bt.instrument(model):
            with bs.step(0):
                model(tokens())
            spans = captured.spans
        assert tree(spans) == [
            ("step", [("TinyGPT", [("emb", []), block_tree(), block_tree(), block_tree(), ("head", [])])])
        ]

    def test_repeated_calls_of_one_module_each_get_a_span(self):
        """A block called twice in one forward gives two layer spans with their own children."""

        class Twice(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.layers = nn.ModuleList([Block()])

            def forward(self, x):
                return self.layers[0](self.layers[0](x))

        model = Twice()
        with capture_spans() as captured, bt.instrument(model):
            model(torch.zeros(1, 3, WIDTH))
            spans = captured.spans
        assert tree(spans) == [("Twice", [block_tree(), block_tree()])]

    def test_categories_layer_indices_and_paths(self):
        """Each brick has its default category, its layer's index and its module path."""
        model = TinyGPT(blocks=2)
        with capture_spans() as captured, bt.instrument(model):
            model(tokens())
            spans = captured.spans
        got = {
            (s.attributes.get(A.TORCH_MODULE_PATH), s.attributes.get(A.BRICK_CATEGORY), s.attributes.get(A.LAYER_INDEX))
            for s in spans
            if s.attributes[A.SCOPE_KIND] == "brick"
        }
        expected = {("", "other", None), ("emb", "embedding", None), ("head", "linear", None)}
        for i in (0, 1):
            expected |= {
                (f"layers.{i}.ln", "norm", i),
                (f"layers.{i}.attn", "attention", i),
                (f"layers.{i}.attn.qkv", "linear", i),
                (f"layers.{i}.attn.proj", "linear", i),
                (f"layers.{i}.mlp", "ffn", i),
                (f"layers.{i}.mlp.up", "linear", i),
                (f"layers.{i}.mlp.down", "linear", i),
            }
        assert got == expected
        layers = [s for s in spans if s.attributes[A.SCOPE_KIND] == "layer"]
        assert sorted(s.attributes[A.LAYER_INDEX] for s in layers) == [0, 1]

    def test_elements_are_rows_of_the_first_tensor(self):
        """Index tensors count every element, float tensors every row: 2x5 tokens -> 10, (2,5,32) -> 10."""
        model = TinyGPT(blocks=1)
        with capture_spans() as captured, bt.instrument(model):
            model(tokens(batch=2, seq=5))
            spans = captured.bricks()
        assert {s.attributes.get(A.BRICK_ELEMENTS) for s in spans} == {10}

    def test_elements_follow_each_calls_shape_and_dtype(self):
        """One module called with shapes and dtypes in turn: each call's count is its own, also when
        an earlier call had the same shape with another dtype, or another shape with the same rows."""
        model = nn.Identity()
        calls = [
            torch.zeros(2, 5, 32),  # float: rows, 2 * 5
            torch.zeros(2, 5, 32, dtype=torch.long),  # index: every element, 2 * 5 * 32
            torch.zeros(10, 32),  # float: 10 rows again, another shape
            torch.zeros(7),  # one dimension: every element
            torch.zeros(0, 32),  # nothing: no element count on the span
            torch.zeros(2, 5, 32, dtype=torch.long),  # the index tensor again
            torch.zeros(2, 5, 32),  # the float tensor again
        ]
        with capture_spans() as captured, bt.instrument(model):
            for x in calls:
                model(x)
            spans = sorted(captured.bricks(), key=lambda s: s.start_time)
        assert [s.attributes.get(A.BRICK_ELEMENTS) for s in spans] == [10, 320, 10, 7, None, 320, 10]

    def test_the_report_has_the_categories(self):
        """The session's category table lists the default categories, with one call per block."""
        model = TinyGPT(blocks=2)
        with capture_spans(aggregate=True) as captured, bt.instrument(model):
            model(tokens())
            captured.session.sync()
            report = captured.session.report()
        for category in ("attention", "ffn", "norm", "embedding", "linear"):
            assert category in report


class TestMapping:
    def test_user_mapping_first_then_defaults(self):
        """A glob renames, a type maps to (name, category), None skips one module but not its children."""
        model = TinyGPT(blocks=1)
        handle = bt.instrument(
            model,
            bricks={"head": ("lm_head", "embedding"), nn.LayerNorm: "rms_norm", "layers.*.attn": None},
        )
        with handle:
            got = {(m.path, m.name, m.category) for m in handle.modules if m.kind == "brick"}
        assert ("head", "lm_head", "embedding") in got
        assert ("layers.0.ln", "rms_norm", None) in got
        assert not any(path == "layers.0.attn" for path, _, _ in got)
        assert ("layers.0.attn.qkv", "attn.qkv", "linear") in got

    def test_catch_all_none_turns_the_defaults_off(self):
        """``"*": None`` last: only the explicitly mapped modules (and layers) are instrumented."""
        model = TinyGPT(blocks=2)
        with bt.instrument(model, bricks={"*.mlp": "ffn", "*": None}) as handle:
            got = [(m.path, m.kind, m.name) for m in handle.modules]
        assert got == [
            ("layers.0", "layer", "layer"),
            ("layers.0.mlp", "brick", "ffn"),
            ("layers.1", "layer", "layer"),
            ("layers.1.mlp", "brick", "ffn"),
        ]

    def test_skip_removes_whole_subtrees_and_max_depth_limits(self):
        """skip drops a module and all below; max_depth=3 keeps layers.N.attn but not layers.N.attn.qkv."""
        model = TinyGPT(blocks=1)
        with bt.instrument(model, skip=("layers.0.mlp", nn.Embedding), max_depth=3) as handle:
            paths = [m.path for m in handle.modules]
        assert paths == ["", "layers.0", "layers.0.ln", "layers.0.attn", "head"]

    def test_layers_none_and_globs(self):
        """layers=None: no layer scopes; a glob picks the layers and numbers them from their path."""
        model = TinyGPT(blocks=2)
        with bt.instrument(model, layers=None) as handle:
            assert [m for m in handle.modules if m.kind == "layer"] == []
        with bt.instrument(model, layers="layers.*") as handle:
            assert [(m.path, m.layer) for m in handle.modules if m.kind == "layer"] == [("layers.0", 0), ("layers.1", 1)]

    @pytest.mark.parametrize(
        ("kwargs", "error"),
        [
            ({"bricks": ["head"]}, TypeError),
            ({"bricks": {"head": ("", "x")}}, ValueError),
            ({"bricks": {3: "x"}}, TypeError),
            ({"skip": (1,)}, TypeError),
            ({"max_depth": -1}, ValueError),
            ({"layers": 7}, ValueError),
            ({"stream": "cuda:0"}, TypeError),
            ({"nvtx": "yes"}, ValueError),
        ],
    )
    def test_bad_arguments_raise_at_set_up(self, kwargs, error):
        """Malformed arguments raise at once, and leave the model untouched."""
        model = TinyGPT(blocks=1)
        with pytest.raises(error, match="brickscope|stream"):
            bt.instrument(model, **kwargs)
        assert type(model.layers[0].attn).__call__ is nn.Module.__call__

    def test_not_a_module_and_instrumenting_twice(self):
        """A non-module is a TypeError; instrumenting an instrumented model is a ValueError."""
        with pytest.raises(TypeError, match="nn.Module"):
            bt.instrument(object())
        model = TinyGPT(blocks=1)
        with bt.instrument(model):
            with pytest.raises(ValueError, match="already instrumented"):
                bt.instrument(model)
        bt.instrument(model).remove()  # fine again after remove()

    def test_nvtx_true_without_the_package(self):
        """nvtx=True on a machine without the nvtx package says what to install."""
        with pytest.raises(ValueError, match="pip install nvtx"):
            bt.instrument(TinyGPT(blocks=1), nvtx=True)


def snapshot(model: nn.Module) -> list:
    """Everything instrumenting could leave behind, per module: class, __dict__ keys, hook dicts."""
    hook_dicts = [name for name, value in vars(nn.Module()).items() if "hook" in name and isinstance(value, dict)]
    return [
        (path, type(m), sorted(vars(m)), [dict(getattr(m, name)) for name in hook_dicts])
        for path, m in model.named_modules()
    ]


class TestRemove:
    def test_remove_restores_classes_hooks_and_attributes(self):
        """After remove(): same classes, same __dict__ keys, same (empty) hook dicts, same output."""
        model = TinyGPT(blocks=2)
        before = snapshot(model)
        x = tokens()
        expected = model(x)
        handle = bt.instrument(model)
        assert type(model.layers[1].mlp) is not type(model.layers[0].ln)
        assert snapshot(model) != before
        handle.remove()
        assert snapshot(model) == before
        assert torch.equal(model(x), expected)
        handle.remove()  # idempotent
        assert snapshot(model) == before

    def test_user_hooks_survive_and_still_run(self):
        """The user's own hooks are neither removed nor skipped by instrumentation."""
        model = TinyGPT(blocks=1)
        calls = []
        model.head.register_forward_hook(lambda m, a, out: calls.append(tuple(out.shape)))
        with capture_spans() as captured, bt.instrument(model):
            model(tokens(batch=1, seq=3))
            assert captured.by_name("head")
        model(tokens(batch=1, seq=3))
        assert calls == [(1, 3, 16), (1, 3, 16)]

    def test_instrumented_model_pickles_and_copies_as_the_original(self):
        """pickle and deepcopy of an instrumented model give uninstrumented copies of the original classes."""
        model = TinyGPT(blocks=1)
        with bt.instrument(model):
            restored = pickle.loads(pickle.dumps(model))
            copied = copy.deepcopy(model)
        for clone in (restored, copied):
            assert [type(m) for m in clone.modules()] == [type(m) for m in model.modules()]
        x = tokens()
        assert torch.equal(restored(x), model(x))

    def test_class_signature_and_state_dict_unchanged(self):
        """While instrumented, type(module), forward's signature and state_dict's keys are the module's own."""
        import inspect

        model = TinyGPT(blocks=1)
        classes = [type(m) for m in model.modules()]
        keys = list(model.state_dict())
        signature = inspect.signature(model.forward)
        with bt.instrument(model):
            assert [type(m) for m in model.modules()] == classes
            assert list(model.state_dict()) == keys
            assert inspect.signature(model.forward) == signature

    def test_functional_losses_are_put_back_by_the_last_remove(self):
        """torch.nn.functional's losses are wrapped while any model is instrumented, and restored after."""
        original = torch.nn.functional.cross_entropy
        first, second = bt.instrument(TinyGPT(blocks=1)), bt.instrument(TinyGPT(blocks=1))
        assert torch.nn.functional.cross_entropy is not original
        first.remove()
        assert torch.nn.functional.cross_entropy is not original
        second.remove()
        second.remove()  # idempotent: does not undo anyone else's
        assert torch.nn.functional.cross_entropy is original

    def test_isinstance_and_repr_unchanged(self):
        """Instrumented modules are still instances of their classes and print the same."""
        model = TinyGPT(blocks=1)
        text = repr(model)
        with bt.instrument(model):
            assert isinstance(model.layers[0].ln, nn.LayerNorm)
            assert repr(model) == text


def nothing_open() -> bool:
    return _record.TOP.get() is None and not trace.get_current_span().get_span_context().is_valid


class TestFailures:
    @pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()], ids=["exception", "interrupt"])
    def test_error_in_forward_closes_every_scope(self, error):
        """An exception or KeyboardInterrupt in a forward closes its brick and every enclosing one, marked as errors."""
        model = WithRaising()
        model.mlp.error = error
        with capture_spans() as captured, bt.instrument(model):
            with pytest.raises(type(error)):
                with bs.step(0):
                    model(torch.zeros(2, WIDTH))
            assert nothing_open()
            spans = {s.name: s for s in captured.spans}
            stats = captured.session.stats()
        assert set(spans) == {"step", "WithRaising", "norm", "mlp", "mlp.inner"}
        for name in ("step", "WithRaising", "mlp"):
            assert spans[name].status.status_code is StatusCode.ERROR
            assert spans[name].events[0].attributes["exception.type"] == type(error).__qualname__
        assert spans["mlp.inner"].status.status_code is StatusCode.UNSET
        assert stats["scope_repairs"] == 0 and stats["misuse"] == 0

    def test_after_an_interrupt_the_next_step_is_whole(self):
        """Interrupting one step leaves the next step's tree exactly as if nothing happened."""
        model = WithRaising()
        with capture_spans() as captured, bt.instrument(model):
            model.mlp.error = KeyboardInterrupt()
            with pytest.raises(KeyboardInterrupt):
                with bs.step(0):
                    model(torch.zeros(2, WIDTH))
            captured.clear()
            model.mlp.error = None
            with bs.step(1):
                model(torch.zeros(2, WIDTH))
            spans = captured.spans
        assert tree(spans) == [("step", [("WithRaising", [("norm", []), ("mlp", [("mlp.inner", [])])])])]

    def test_nothing_recorded_when_brickscope_is_off(self):
        """Without configure() the instrumented model runs and records nothing."""
        model = TinyGPT(blocks=1)
        with bt.instrument(model):
            out = model(tokens())
            assert _record.TOP.get() is None
        assert out.shape == (2, 5, 16)


class TestBackward:
    def test_backward_bricks_nest_under_the_users_backward_scope(self):
        """backward=True: each brick module's backward pass is a brick, in its layer, nested as autograd runs them."""
        model = TinyGPT(blocks=1)
        with capture_spans() as captured, bt.instrument(model, backward=True):
            out = model(tokens())
            captured.clear()
            with bs.brick("backward"):
                out.sum().backward()
            spans = captured.spans
            stats = captured.session.stats()
        # The model itself has no backward brick (its backward is the whole pass), nor has
        # the embedding (token ids need no gradient); the block's bricks sit in its layer.
        assert tree(spans) == [
            (
                "backward",
                [
                    ("head.backward", []),
                    (
                        "layer",
                        [
                            ("mlp.backward", [("mlp.down.backward", []), ("mlp.up.backward", [])]),
                            ("attn.backward", [("attn.proj.backward", []), ("attn.qkv.backward", [])]),
                            ("ln.backward", []),
                        ],
                    ),
                ],
            )
        ]
        layer_zero = {s.name for s in spans if s.attributes.get(A.LAYER_INDEX) == 0}
        assert layer_zero == {"layer", "ln.backward", "attn.backward", "attn.qkv.backward", "attn.proj.backward",
                              "mlp.backward", "mlp.up.backward", "mlp.down.backward"}  # fmt: skip
        assert {s.attributes.get(A.TORCH_PASS) for s in spans if s.name.endswith(".backward")} == {"backward"}
        assert stats["scope_repairs"] == 0

    def test_remove_takes_the_backward_hooks_away(self):
        """After remove(), hook dicts and each module's full-backward-hook flag are as before."""
        model = TinyGPT(blocks=1)
        flags = [m.__dict__.get("_is_full_backward_hook") for m in model.modules()]
        before = snapshot(model)
        bt.instrument(model, backward=True).remove()
        assert snapshot(model) == before
        assert [m.__dict__.get("_is_full_backward_hook") for m in model.modules()] == flags


class TestConcurrencyAndMisuse:
    def test_threads_each_get_their_own_tree(self):
        """One instrumented model run from two threads at once: each thread's spans form the whole tree."""
        import threading

        model = TinyGPT(blocks=2)
        barrier = threading.Barrier(2)

        def work(step: int) -> None:
            barrier.wait()
            with bs.step(step):
                for _ in range(3):
                    model(tokens())

        with capture_spans() as captured, bt.instrument(model):
            threads = [threading.Thread(target=work, args=(n,)) for n in (0, 1)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            spans = captured.spans
            stats = captured.session.stats()
        one_call = ("TinyGPT", [("emb", []), block_tree(), block_tree(), ("head", [])])
        assert tree(spans) == [("step", [one_call] * 3)] * 2
        assert stats["scope_repairs"] == 0

    def test_a_forward_that_leaves_a_scope_open_still_closes_its_brick(self):
        """A forward leaking a token: its module's brick ends at the module's end (one repair), the leak stays open."""

        class Leaky(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.ln = nn.LayerNorm(WIDTH)

            def forward(self, x):
                self.token = bs.enter_scope(bs.brick("leaked"))
                return self.ln(x)

        model = Leaky()
        with capture_spans() as captured, bt.instrument(model):
            model(torch.zeros(1, WIDTH))
            assert [s.name for s in captured.spans] == ["ln", "Leaky"]
            assert captured.session.stats()["scope_repairs"] == 1
            bs.exit_scope(model.token)
            assert nothing_open()
            assert sorted(s.name for s in captured.spans) == ["Leaky", "leaked", "ln"]
