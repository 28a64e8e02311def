"""C[32768, 32768] = A[32768, 64] @ B[64, 32768]: a 4 GiB output, K = 64 (KernelBench Level 1's small-K product at its
largest)."""

import torch
import torch.nn as nn

M, N, K = 32768, 32768, 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, N)]


def get_init_inputs():
    return []
