"""Never returns: a busy loop on the CPU; on the GPU a kernel that spins forever."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401

_CODE = "template <typename T> T spin(T x) { volatile int i = 1; while (i) { } return x; }"


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        if x.is_cuda:
            y = torch.cuda.jiterator._create_jit_fn(_CODE)(x)
            torch.cuda.synchronize()
            return y
        while True:
            pass
