"""Depthwise Conv2d 3x3 (groups = channels = 256, padding 1) on 16 x 256 x 128 x 128 followed by ReLU6; memory-bound."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, channels, height, width = 16, 256, 128, 128


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.hardtanh(self.conv(x), 0.0, 6.0)


def get_inputs():
    return [torch.rand(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
