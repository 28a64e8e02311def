"""A Linear layer whose weight is 4 GiB (32768 x 32768, a parameter), on 64 rows, with bias and ReLU: the
parameter, not the activations, is what moves."""

import torch
import torch.nn as nn

BATCH, FEATURES = 64, 32768


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.fc = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.rand(BATCH, FEATURES)]


def get_init_inputs():
    return [FEATURES]
