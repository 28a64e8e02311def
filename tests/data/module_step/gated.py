"""Two submodules torch.fx cannot follow (a branch on a value, a loop over rows) between two Linear layers; the
gate's weights are drawn from the OS, not from the seed, so only the reference's own parameters reproduce it."""

import os

import torch
import torch.nn as nn


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32)
        generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
        with torch.no_grad():
            self.fc.weight.copy_(torch.randn(32, 32, generator=generator) / 8)

    def forward(self, x):
        if x.mean() > 0:
            return torch.relu(self.fc(x))
        return self.fc(x) - 1.0


class Rows(nn.Module):
    def forward(self, x):
        return torch.stack([row * 2.0 if row.max() > 0.5 else row for row in x])


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.pre = nn.Linear(32, hidden)
        self.gate = Gate()
        self.rows = Rows()
        self.post = nn.Linear(hidden, 64)

    def forward(self, x):
        return self.post(self.rows(self.gate(self.pre(x))))


def get_inputs():
    return [torch.randn(8, 32)]


def get_init_inputs():
    return [32]
