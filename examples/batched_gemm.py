"""Batched matrix multiplication (KernelBench format)."""
import torch
import torch.nn as nn

batch_size = 8
m = 64
k = 96
n = 128


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b) * 0.5


def get_inputs():
    return [torch.rand(batch_size, m, k), torch.rand(batch_size, k, n)]


def get_init_inputs():
    return []
