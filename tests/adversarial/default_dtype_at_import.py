"""Changes a framework default at import: every float tensor created afterwards, the reference's
parameters and inputs included, is a 16-bit brain float. The reference then computes in it too and
the candidate's low-precision answer matches it exactly. The dtype is named through getattr."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401

torch.set_default_dtype(getattr(torch, "bfloat" + "16"))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x.to(self.fc.weight.dtype)))
