"""Prefix sum from the end along a middle dim, written as flip, cumsum, flip (KernelBench 91)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flip(1).cumsum(1).flip(1)


def get_inputs():
    return [torch.randn(32, 1024, 256)]


def get_init_inputs():
    return []
