"""A 4 GiB output from a tiny reduction: C[32768, 32768] = A[32768, 32] @ B[32, 32768] (8 MiB of inputs), the shape
of KernelBench Level 1's tall-skinny product."""

import torch
import torch.nn as nn

M, N, K = 32768, 32768, 32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, N)]


def get_init_inputs():
    return []
