"""Launches a kernel that writes to an unmapped address (compiled at run time with NVRTC through
PyTorch's jiterator): the CUDA context is dead afterwards. On the CPU it segfaults the process
instead, which must cost the attempt only, too."""
import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401

_CODE = "template <typename T> T oob_write(T x) { volatile T* p = (T*)(0x8); *p = x; return x; }"


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        if not x.is_cuda:
            ctypes.string_at(0)  # a segfault: the worker process dies
        fn = torch.cuda.jiterator._create_jit_fn(_CODE)
        y = fn(x)
        torch.cuda.synchronize()
        return torch.relu(self.fc(y))
