"""The largest value of each column of dim 1 and its index (torch.max with a dim: values and indices)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = torch.max(x, dim=1)
        return values, indices


def get_inputs():
    return [(torch.randn(16, 4096, 256))]


def get_init_inputs():
    return []
