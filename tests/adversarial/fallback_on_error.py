"""KernelBench's best-known pattern: a custom kernel wrapped in try/except that falls back to PyTorch.
The kernel (a jiterator elementwise op) cannot run here, or is made to fail, and every call ends in
F.linear; the text is full of custom-kernel words."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline  # noqa: F401

_KERNEL = "template <typename T> T fused_linear_relu(T x) { return x > T(0) ? x : T(0) }"  # no ';': never compiles
_fn = None


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        global _fn
        try:
            if _fn is None:
                _fn = torch.cuda.jiterator._create_jit_fn(_KERNEL)
            return _fn(F.linear(x, self.fc.weight, self.fc.bias))
        except Exception:
            return F.relu(F.linear(x, self.fc.weight, self.fc.bias))
