"""Batched GEMM: C[b] = A[b] @ B[b] over 128 batches of [512, 1024] @ [1024, 512]."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch, M, N, K = 128, 512, 512, 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


def get_inputs():
    return [torch.rand(batch, M, K), torch.rand(batch, K, N)]


def get_init_inputs():
    return []
