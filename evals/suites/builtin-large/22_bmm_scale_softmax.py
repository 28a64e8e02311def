"""Attention scores: softmax(Q @ K^T * 0.088) over 64 heads of 1024 x 1024, head dim 128."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch, seq, dim = 64, 1024, 128
scale = 0.088


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
        return torch.softmax(torch.bmm(Q, K.transpose(1, 2)) * self.scale, dim=-1)


def get_inputs():
    return [torch.rand(batch, seq, dim), torch.rand(batch, seq, dim)]


def get_init_inputs():
    return [scale]
