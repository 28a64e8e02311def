"""A matrix-vector product with an 8 GiB matrix: y[2048, 1] = A[2048, 1048576] @ x[1048576, 1] (memory-bound: the
matrix is read once)."""

import torch
import torch.nn as nn

M, K = 2048, 1 << 20


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, x)


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, 1)]


def get_init_inputs():
    return []
