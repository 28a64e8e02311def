"""The honest candidate for large_cheap_relu.py: the same parameters (same seed, same construction)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(features, features).uniform_(-1.0, 1.0))
        self.bias = nn.Parameter(torch.empty(features).uniform_(-1.0, 1.0))

    def forward(self, x):
        return torch.relu(x * self.weight[0] + self.bias)
