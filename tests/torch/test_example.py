# SPDX-License-Identifier: Apache-2.0
"""examples/torch_gpt.py runs as a user would run it, and its trace mirrors the model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed (make test installs the CPU build)")
perfetto = pytest.importorskip("brickscope.exporter.perfetto")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "torch_gpt.py"
BLOCKS, STEPS = 4, 2


def block() -> tuple:
    return (
        "layer",
        [
            ("ln_1", []),
            ("attn", [("attn.c_attn", []), ("attn.c_proj", [])]),
            ("ln_2", []),
            ("mlp", [("mlp.c_fc", []), ("mlp.c_proj", [])]),
        ],
    )


def step_tree() -> tuple:
    model = ("GPT", [("tok_emb", []), ("pos_emb", []), *[block() for _ in range(BLOCKS)], ("ln_f", []), ("lm_head", []), ("loss", [])])
    return ("step", [model, ("backward", []), ("optimizer_step", [])])


def tree(spans) -> list:
    children: dict = {}
    for span in sorted(spans, key=lambda s: (s.start_time, -s.end_time)):
        children.setdefault(span.parent.span_id if span.parent else None, []).append(span)

    def build(span):
        return (span.name, [build(c) for c in children.get(span.context.span_id, [])])

    return [build(root) for root in children.get(None, [])]


class TestTorchGptExample:
    def test_trace_mirrors_the_model_and_the_report_has_its_categories(self, tmp_path):
        """Each step's span tree is GPT's module tree (4 layers), then backward and the optimizer."""
        result = subprocess.run(
            [sys.executable, str(EXAMPLE), "--out", str(tmp_path), "--steps", str(STEPS), "--clock", "host"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        assert [line.split(":")[0] for line in result.stdout.splitlines() if line.startswith("step ")] == [
            "step 0",
            "step 1",
        ]
        for category in ("attention", "ffn", "norm", "embedding", "linear", "loss", "backward", "optimizer"):
            assert f"\n{category} " in result.stdout
        spans = list(perfetto.read_spans(str(tmp_path / "gpt.pftrace")))
        assert tree(spans) == [step_tree()] * STEPS
        # step, GPT, 2 embeddings, 4 x (layer + 8 bricks), ln_f, lm_head, loss, backward, optimizer_step
        assert len(spans) == STEPS * (1 + 1 + 2 + BLOCKS * 9 + 3 + 2)
        assert f"spans emitted: {STEPS * 45}, scope repairs: 0" in result.stdout
        folded = (tmp_path / "gpt.folded").read_text().splitlines()
        assert "brickscope-torch-gpt;step;GPT;layer;attn;attn.c_attn" in {line.rsplit(" ", 1)[0] for line in folded}
        assert (tmp_path / "gpt.speedscope.json").stat().st_size > 0
