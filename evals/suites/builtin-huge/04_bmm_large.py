"""Batched GEMM with 1.9 GB of operands: C[128, 512, 2048] = A[128, 512, 1024] @ B[128, 1024, 2048]."""

import torch
import torch.nn as nn

BATCH, M, K, N = 128, 512, 1024, 2048


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


def get_inputs():
    return [torch.rand(BATCH, M, K), torch.rand(BATCH, K, N)]


def get_init_inputs():
    return []
