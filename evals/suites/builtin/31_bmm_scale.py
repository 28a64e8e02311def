"""Batched GEMM with a scale, attention-score style: S[b] = (Q[b] @ K[b].T) * 0.125; 32 x 1024 x 1024 x 256."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch, seq, dim = 32, 1024, 256
scale = 0.125


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
        return torch.bmm(Q, K.transpose(1, 2)) * self.scale


def get_inputs():
    return [torch.rand(batch, seq, dim), torch.rand(batch, seq, dim)]


def get_init_inputs():
    return [scale]
