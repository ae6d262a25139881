# SPDX-License-Identifier: Apache-2.0
"""brickscope.torch: a small GPT trained for a few steps on the CPU, instrumented in one line.

The model (token and position embeddings, a few pre-norm transformer blocks of
causal self-attention and an MLP, a final norm, the LM head and the loss) is not
edited: ``brickscope.torch.instrument(model)`` makes every attention, MLP, norm,
embedding, linear and loss module call a brick and every block a layer, so the
trace's span tree is the module tree. The backward pass and the optimizer step
are two hand-written bricks around them.

Run it with the torch extra installed (the CPU build is enough)::

    pip install torch==2.13.0 --only-binary=:all:
    python examples/torch_gpt.py --out out --steps 5

It prints the loss per step and the category table, and writes ``out/gpt.pftrace``
(https://ui.perfetto.dev), ``out/gpt.folded`` (flamegraph.pl, inferno) and
``out/gpt.speedscope.json`` (https://speedscope.app).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from torch import nn
from torch.nn import functional as F

import brickscope as bs
import brickscope.torch

TEXT = (
    b"brickscope puts measured per-op GPU time into the OpenTelemetry traces you already run, "
    b"at a cost low enough to leave on, and the same data into Perfetto and flamegraphs. "
)


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.c_attn(x).split(dim, dim=2)
        q, k, v = (t.view(batch, seq, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(batch, seq, dim))


class MLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Byte-level GPT: ``forward(idx, targets)`` returns the mean cross-entropy loss."""

    def __init__(self, vocab: int = 256, context: int = 32, dim: int = 64, heads: int = 4, blocks: int = 4) -> None:
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, dim)
        self.pos_emb = nn.Embedding(context, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(blocks)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return self.loss(logits.flatten(0, 1), targets.flatten())


def batches(batch: int, context: int, seed: int = 0):
    """Endless (input, target) byte windows of TEXT."""
    data = torch.tensor(list(TEXT * 4), dtype=torch.long)
    generator = torch.Generator().manual_seed(seed)
    while True:
        starts = torch.randint(0, len(data) - context - 1, (batch,), generator=generator)
        x = torch.stack([data[s : s + context] for s in starts])
        y = torch.stack([data[s + 1 : s + context + 1] for s in starts])
        yield x, y


def train_step(model: GPT, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    with bs.brick("backward", category="backward"):
        loss.backward()
    with bs.brick("optimizer_step", category="optimizer"):
        optimizer.step()
    return loss.item()


def add_exporters(provider: TracerProvider, out: Path) -> list[str]:
    """Perfetto and flamegraph exporters (installed with brickscope's exporters); what they write."""
    from brickscope.exporter.flamegraph import FlamegraphSpanExporter
    from brickscope.exporter.perfetto import PerfettoSpanExporter

    trace_path, folded, speedscope = out / "gpt.pftrace", out / "gpt.folded", out / "gpt.speedscope.json"
    provider.add_span_processor(BatchSpanProcessor(PerfettoSpanExporter(trace_path, overwrite=True)))
    provider.add_span_processor(
        BatchSpanProcessor(FlamegraphSpanExporter(folded, weight="host", speedscope_path=speedscope, overwrite=True))
    )
    return [
        f"{trace_path}  (open in https://ui.perfetto.dev)",
        f"{folded}  (flamegraph.pl / inferno-flamegraph)",
        f"{speedscope}  (https://speedscope.app)",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out"), help="directory for the trace files")
    parser.add_argument("--steps", type=int, default=5, help="training steps")
    parser.add_argument("--clock", default="auto", choices=("auto", "cuda", "host"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # opentelemetry-instrument sets one up
        provider = TracerProvider(resource=Resource.create({"service.name": "brickscope-torch-gpt"}))
    written = add_exporters(provider, args.out)
    session = bs.configure(provider, clock=args.clock)

    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = batches(batch=8, context=32)
    with brickscope.torch.instrument(model):  # the one line
        for step in range(args.steps):
            x, y = next(data)
            with bs.step(step):
                loss = train_step(model, optimizer, x, y)
            print(f"step {step}: loss {loss:.3f}")

    print()
    print(session.report())
    stats = session.stats()
    session.shutdown()
    provider.shutdown()
    print()
    print(f"spans emitted: {stats['spans_emitted']}, scope repairs: {stats['scope_repairs']}")
    for line in written:
        print(f"wrote {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
