"""Two-layer MLP 4096 -> 8192 -> 4096 with GELU between, batch 1024 (two GEMM kernels in a pipeline)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, d_model, d_hidden = 1024, 4096, 8192


class Model(nn.Module):
    def __init__(self, d_model, d_hidden):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


def get_inputs():
    return [torch.rand(batch_size, d_model)]


def get_init_inputs():
    return [d_model, d_hidden]
