"""GEMM with both operands stored transposed: C = A.T @ B.T."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

M, N, K = 3072, 2048, 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A.T, B.T)


def get_inputs():
    return [torch.rand(K, M), torch.rand(N, K)]


def get_init_inputs():
    return []
