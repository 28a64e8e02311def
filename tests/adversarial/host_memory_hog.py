"""Containment: touches __HOG_BYTES__ bytes of host memory (more than the judge allows) and hides it
in builtins, where dropping the candidate's module does not free it. The output is right."""
import builtins

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401

_kept = []
_CHUNK = 256 << 20
for _ in range(max(1, int("__HOG_BYTES__") // _CHUNK)):
    block = bytearray(_CHUNK)
    block[::4096] = b"\x01" * len(block[::4096])  # touch every page
    _kept.append(block)
setattr(builtins, "_kept_host_" + str(id(_kept)), _kept)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x))
