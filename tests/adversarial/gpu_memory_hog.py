"""Correct, and leaves the GPU full: all but 1 GB of the free device memory is allocated at import and
hidden in builtins, where dropping the candidate's module does not free it. The next attempt (or the
reference's timing) runs out of memory."""
import builtins

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401

if torch.cuda.is_available():
    free, _ = torch.cuda.mem_get_info()
    keep = max(free - (1 << 30), 0)
    setattr(builtins, "_kept_" + str(id(builtins)), torch.empty(keep // 4, device="cuda"))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x))
