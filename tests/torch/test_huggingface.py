# SPDX-License-Identifier: Apache-2.0
"""HuggingFace transformers models as they are (GPT-2, BERT, Llama from small configs, random
weights, nothing downloaded): the brick tree per block, the loss computed inside ``forward``,
backward bricks in their layers, and torch.profiler run at the same time."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (make test installs the CPU build)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed (the test extra pins it)")

from torch.profiler import ProfilerActivity, profile  # noqa: E402

import brickscope as bs  # noqa: E402
import brickscope.torch as bt  # noqa: E402
from brickscope.testing import capture_spans  # noqa: E402
from brickscope.trace import attributes as A  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_nvtx")

WIDTH, LAYERS, VOCAB, POSITIONS = 32, 2, 64, 16


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def gpt2() -> torch.nn.Module:
    config = transformers.GPT2Config(n_layer=LAYERS, n_embd=WIDTH, n_head=2, vocab_size=VOCAB, n_positions=POSITIONS,
                                     bos_token_id=0, eos_token_id=0)  # fmt: skip
    return transformers.GPT2LMHeadModel(config)


def bert() -> torch.nn.Module:
    config = transformers.BertConfig(num_hidden_layers=LAYERS, hidden_size=WIDTH, num_attention_heads=2,
                                     intermediate_size=2 * WIDTH, vocab_size=VOCAB,
                                     max_position_embeddings=POSITIONS, num_labels=3)  # fmt: skip
    return transformers.BertForSequenceClassification(config)


def llama() -> torch.nn.Module:
    config = transformers.LlamaConfig(num_hidden_layers=LAYERS, hidden_size=WIDTH, num_attention_heads=2,
                                      num_key_value_heads=1, intermediate_size=2 * WIDTH, vocab_size=VOCAB,
                                      max_position_embeddings=POSITIONS)  # fmt: skip
    return transformers.LlamaForCausalLM(config)


def ids(batch: int = 2, seq: int = 5) -> torch.Tensor:
    return torch.arange(batch * seq).reshape(batch, seq) % VOCAB


def tree(spans) -> list:
    """The span forest as nested (name, [children]) lists, children in start order."""
    children: dict = {}
    known = {s.context.span_id for s in spans}
    for span in sorted(spans, key=lambda s: s.start_time):
        parent = span.parent.span_id if span.parent is not None and span.parent.span_id in known else None
        children.setdefault(parent, []).append(span)

    def build(span):
        return (span.name, [build(c) for c in children.get(span.context.span_id, [])])

    return [build(root) for root in children.get(None, [])]


def run(model: torch.nn.Module, labels: torch.Tensor, backward: bool = True) -> tuple[list, list]:
    """One training step's forward and backward, instrumented (``backward`` bricks or not):
    (forward tree, backward tree). Any warning fails the test."""
    torch.manual_seed(0)
    with capture_spans() as captured, bt.instrument(model, backward=backward), warnings.catch_warnings():
        warnings.simplefilter("error")
        with bs.brick("forward"):
            out = model(ids(), labels=labels)
        with bs.brick("backward"):
            out.loss.backward()
        spans = captured.spans
    (forward,) = [t for t in tree(spans) if t[0] == "forward"]
    (backward,) = [t for t in tree(spans) if t[0] == "backward"]
    return forward[1], backward[1]


def categories(model: torch.nn.Module) -> dict[str, str]:
    """brick name -> category, from the plan."""
    with bt.instrument(model) as handle:
        return {m.name: m.category for m in handle.modules if m.kind == "brick"}


class TestGpt2:
    def test_block_tree_with_conv1d_projections_and_the_loss(self):
        """GPT-2: Conv1D projections are linear bricks; the labels' cross-entropy is a loss brick under the model."""
        forward, backward = run(gpt2(), labels=ids())
        block = ("layer", [("ln_1", []), ("attn", [("attn.c_attn", []), ("attn.c_proj", [])]),
                           ("ln_2", []), ("mlp", [("mlp.c_fc", []), ("mlp.c_proj", [])])])  # fmt: skip
        assert forward == [
            ("GPT2LMHeadModel", [("transformer.wte", []), ("transformer.wpe", []), block, block,
                                 ("transformer.ln_f", []), ("lm_head", []), ("loss", [])])  # fmt: skip
        ]
        # Backward runs the block in reverse; the model and the embeddings have no backward brick.
        back_block = ("layer", [("mlp.backward", [("mlp.c_proj.backward", []), ("mlp.c_fc.backward", [])]),
                                ("ln_2.backward", []),
                                ("attn.backward", [("attn.c_proj.backward", []), ("attn.c_attn.backward", [])]),
                                ("ln_1.backward", [])])  # fmt: skip
        assert backward == [("lm_head.backward", []), ("transformer.ln_f.backward", []), back_block, back_block]

    def test_categories(self):
        """GPT-2's modules by category: Conv1D is linear, the model itself other."""
        found = categories(gpt2())
        assert found["attn.c_attn"] == found["mlp.c_fc"] == found["lm_head"] == "linear"
        assert (found["attn"], found["mlp"], found["ln_1"]) == ("attention", "ffn", "norm")
        assert found["GPT2LMHeadModel"] == "other"


class TestBert:
    def test_block_tree_and_the_classification_loss(self):
        """BERT: BertIntermediate is the ffn brick; the classifier's cross-entropy is a loss brick."""
        forward, backward = run(bert(), labels=torch.tensor([0, 2]))
        block = ("layer", [("attention", [("attention.self", [("attention.self.query", []), ("attention.self.key", []),
                                                               ("attention.self.value", [])]),
                                          ("attention.output.dense", []), ("attention.output.LayerNorm", [])]),
                           ("intermediate", [("intermediate.dense", [])]),
                           ("output.dense", []), ("output.LayerNorm", [])])  # fmt: skip
        assert forward == [
            ("BertForSequenceClassification", [
                ("bert.embeddings.word_embeddings", []), ("bert.embeddings.token_type_embeddings", []),
                ("bert.embeddings.position_embeddings", []), ("bert.embeddings.LayerNorm", []),
                block, block, ("bert.pooler.dense", []), ("classifier", []), ("loss", [])])  # fmt: skip
        ]
        assert categories(bert())["intermediate"] == "ffn"
        back_block = ("layer", [("output.LayerNorm.backward", []), ("output.dense.backward", []),
                                ("intermediate.backward", [("intermediate.dense.backward", [])]),
                                ("attention.backward", [("attention.output.LayerNorm.backward", []),
                                                        ("attention.output.dense.backward", []),
                                                        ("attention.self.backward", [
                                                            ("attention.self.value.backward", []),
                                                            ("attention.self.key.backward", []),
                                                            ("attention.self.query.backward", [])])])])  # fmt: skip
        assert backward[:2] == [("classifier.backward", []), ("bert.pooler.dense.backward", [])]
        assert backward[2:4] == [back_block, back_block]
        assert backward[4:] == [("bert.embeddings.LayerNorm.backward", [])]


class TestLlama:
    def test_block_tree_and_the_causal_lm_loss(self):
        """Llama: RMSNorm, attention and MLP bricks with their projections; the loss brick last."""
        # backward=False: Llama passes the attention its input by keyword, which full backward
        # hooks do not see (docs/torch.md, Backward bricks).
        forward, backward = run(llama(), labels=ids(), backward=False)
        assert backward == []
        block = ("layer", [("input_layernorm", []),
                           ("self_attn", [("self_attn.q_proj", []), ("self_attn.k_proj", []), ("self_attn.v_proj", []),
                                          ("self_attn.o_proj", [])]),
                           ("post_attention_layernorm", []),
                           ("mlp", [("mlp.gate_proj", []), ("mlp.up_proj", []), ("mlp.down_proj", [])])])  # fmt: skip
        assert forward == [
            ("LlamaForCausalLM", [("model.embed_tokens", []), block, block, ("model.norm", []), ("lm_head", []),
                                  ("loss", [])])  # fmt: skip
        ]

    def test_loss_brick_attributes_and_no_loss_without_labels(self):
        """The loss brick: category loss, rows of the logits, the function's path; no labels, no loss brick."""
        model = llama()
        with capture_spans() as captured, bt.instrument(model):
            model(ids(batch=2, seq=5), labels=ids(batch=2, seq=5))
            (loss,) = captured.by_name("loss")
            captured.clear()
            model(ids())
            assert captured.by_name("loss") == []
        assert loss.attributes[A.BRICK_CATEGORY] == "loss"
        assert loss.attributes[A.TORCH_MODULE_PATH] == "torch.nn.functional.cross_entropy"
        assert loss.attributes[A.BRICK_ELEMENTS] == 2 * 5  # logits flattened to (batch * seq, vocab) rows
        assert torch.nn.functional.cross_entropy.__module__ == "torch.nn.functional"  # put back by remove()


class TestTorchProfilerAlongside:
    def test_profiler_sees_the_original_classes_and_the_same_modules(self):
        """torch.profiler(with_stack=True) and instrument() at once: the profiler numbers each instance of
        the original classes, and its nn.Module events and the module bricks name the same modules."""
        model = gpt2()
        with capture_spans() as captured, bt.instrument(model):
            with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
                model(ids())
            spans = captured.spans
        profiled = sorted({e.name for e in prof.events() if e.name.startswith("nn.Module: ")})
        for cls, count in (("GPT2Attention", 2), ("GPT2Block", 2), ("LayerNorm", 5), ("Conv1D", 8), ("GPT2MLP", 2)):
            assert [n for n in profiled if n.startswith(f"nn.Module: {cls}_")] == [
                f"nn.Module: {cls}_{i}" for i in range(count)
            ], cls
        # Per class, the profiler's instances and brickscope's module bricks are the same modules.
        bricks = [s for s in spans if s.name != "layer"]
        for cls, count in (("GPT2Attention", 2), ("LayerNorm", 5), ("Conv1D", 8), ("Embedding", 2), ("Linear", 1)):
            paths = {s.attributes[A.TORCH_MODULE_PATH] for s in bricks}
            of_class = {p for p in paths if type(model.get_submodule(p)).__name__ == cls}
            assert len(of_class) == count, cls
        assert type(model.transformer.h[0].attn) is transformers.models.gpt2.modeling_gpt2.GPT2Attention
