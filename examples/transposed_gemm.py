"""Matrix multiplication with both operands transposed (KernelBench format)."""
import torch
import torch.nn as nn

M = 128
K = 64
N = 96


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A.T, B.T)


def get_inputs():
    return [torch.rand(K, M), torch.rand(N, K)]


def get_init_inputs():
    return []
