"""A correct candidate (the control): every check passes except the PyTorch-only flag, which the
load_inline import keeps quiet, as for the others."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x))
