"""A 200-layer residual MLP, x = relu(fc(x)) + x: deep enough that a recursive lowering would overflow the stack."""

import torch
import torch.nn as nn

TOLERANCE = 1e-2

BATCH, WIDTH, DEPTH = 64, 256, 200


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(WIDTH, WIDTH) for _ in range(DEPTH)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x)) + x
        return x


def get_inputs():
    return [torch.randn(BATCH, WIDTH)]


def get_init_inputs():
    return []
