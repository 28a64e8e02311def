"""A gated Linear read as two column halves by basic slicing: relu(y[:, :N]) * sigmoid(y[:, N:])."""

import torch
import torch.nn as nn

TOLERANCE = 1e-2

BATCH, IN_FEATURES, HALF = 512, 1024, 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(IN_FEATURES, 2 * HALF)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return torch.relu(y[:, :HALF]) * torch.sigmoid(y[:, HALF:])


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return []
