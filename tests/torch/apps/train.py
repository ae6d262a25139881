# SPDX-License-Identifier: Apache-2.0
"""A training script that knows nothing of brickscope or OpenTelemetry (the zero-code tests run it).

Prints whether torch was imported and the final loss; ``--no-torch`` exits before importing it.
"""

import sys

if "--no-torch" in sys.argv:
    print("torch imported:", "torch" in sys.modules)
    sys.exit(0)

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.mlp = MLP()

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.layers = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(8, 16)

    def forward(self, idx):
        x = self.emb(idx)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)

torch.manual_seed(0)
model, loss_fn = Net(), nn.CrossEntropyLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
idx = torch.arange(10).reshape(2, 5) % 16
for _ in range(2):
    loss = loss_fn(model(idx).flatten(0, 1), idx.flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
print("ok", loss.item() > 0)
