"""L1 vector norm over the middle dim, kept (torch.linalg.vector_norm, keepdim)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(x, ord=1, dim=1, keepdim=True)


def get_inputs():
    return [(torch.randn(32, 1024, 512))]


def get_init_inputs():
    return []
