"""A three-layer MLP classifier: Linear 1024 -> 2048 -> 2048 -> 1000 with ReLU between; batch 8."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, input_size, hidden, num_classes = 8, 1024, 2048, 1000


class Model(nn.Module):
    def __init__(self, input_size, hidden, num_classes):
        super().__init__()
        self.network = nn.Sequential(
            nn.Linear(input_size, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x)


def get_inputs():
    return [torch.rand(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden, num_classes]
