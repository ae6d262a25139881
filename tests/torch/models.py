# SPDX-License-Identifier: Apache-2.0
"""Small models for the torch tests: a GPT-like stack of repeated blocks, known shapes."""

from __future__ import annotations

import torch
from torch import nn

WIDTH, VOCAB = 8, 16


class CausalSelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self.proj(torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(WIDTH, 4 * WIDTH)
        self.act = nn.GELU()
        self.down = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(WIDTH)
        self.attn = CausalSelfAttention()
        self.mlp = MLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln(x))
        return x + self.mlp(x)


class TinyGPT(nn.Module):
    def __init__(self, blocks: int = 2) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.layers = nn.ModuleList([Block() for _ in range(blocks)])
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.emb(idx)
        for block in self.layers:
            x = block(x)
        return self.head(x)


class RaisingMLP(nn.Module):
    """Raises ``error`` from its forward when ``error`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(WIDTH, WIDTH)
        self.error: BaseException | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inner(x)
        if self.error is not None:
            raise self.error
        return x


class WithRaising(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.mlp = RaisingMLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.norm(x))


def tokens(batch: int = 2, seq: int = 5) -> torch.Tensor:
    return torch.arange(batch * seq).reshape(batch, seq) % VOCAB
