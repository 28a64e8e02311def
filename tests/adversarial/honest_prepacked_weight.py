"""Control: transposes the weight once, when the first call comes, and keeps it (a cached
transformation of its own parameters, the same numbers in another layout); every call after that
reads the packed copy. Its first call takes another path than the rest, with the same numerics."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.packed = None

    def forward(self, x):
        if self.packed is None or self.packed.device != x.device:
            self.packed = self.fc.weight.detach().t().contiguous()
            return torch.relu(self.fc(x))
        return torch.relu(torch.addmm(self.fc.bias, x, self.packed))
