"""A 4-D tensor times a matrix over its last dim: out[b, i, j, k] = sum_l A[b, i, j, l] * B[l, k], 1 GiB in and a
3 GiB output (KernelBench Level 1's 4-D tensor-matrix product)."""

import torch
import torch.nn as nn

B_, I, J, L, K = 8, 256, 512, 256, 768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bijl,lk->bijk", A, B)


def get_inputs():
    return [torch.rand(B_, I, J, L), torch.rand(L, K)]


def get_init_inputs():
    return []
