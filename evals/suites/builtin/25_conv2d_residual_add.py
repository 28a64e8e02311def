"""Conv2d 3x3 (128 -> 128, padding 1) plus a residual input, then ReLU: y = relu(conv(x) + r)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, channels, height, width = 16, 128, 64, 64


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x) + r)


def get_inputs():
    return [torch.rand(batch_size, channels, height, width), torch.rand(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
