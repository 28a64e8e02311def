"""Control: computes the transposed product (W x^T + b), applies the ReLU in place and returns the
transpose, a strided view of memory written by this call (not of an input, not persistent)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        yt = torch.addmm(self.fc.bias.unsqueeze(1), self.fc.weight, x.t())
        return yt.relu_().t()
