"""Pure PyTorch whose GEMM is spelled with an operator the FLOP counter has no formula for: one
addmv (matrix times vector, plus bias) per row of the input. Every FLOP runs in ATen (or cuBLAS's
gemv on a GPU); none is counted, so it looks like the candidate's own work."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        w, b = self.fc.weight, self.fc.bias
        return torch.relu(torch.stack([torch.addmv(b, w, row) for row in x.unbind(0)]))
