"""A tiny batched GEMM with a scale: (A[b] @ B[b]) * 0.5, 4 x 16 x 24 x 8."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch, M, N, K = 4, 16, 24, 8


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B) * 0.5


def get_inputs():
    return [torch.rand(batch, M, K), torch.rand(batch, K, N)]


def get_init_inputs():
    return []
