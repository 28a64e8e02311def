"""Enters autocast (to the 16-bit brain float) at import and never leaves it: the judge's reference,
computed later in the same thread, runs its Linear in that type as well, so the candidate's low-precision
answer agrees with it. The type is named through getattr."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401

_low = getattr(torch, "bfloat" + "16")
_contexts = [torch.autocast("cpu", dtype=_low)]
if torch.cuda.is_available():
    _contexts.append(torch.autocast("cuda", dtype=_low))
for _c in _contexts:
    _c.__enter__()


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x))
