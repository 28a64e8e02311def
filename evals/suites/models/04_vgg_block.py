"""A VGG block on 224x224 images: conv 3x3 (64 -> 128) + ReLU, conv 3x3 (128 -> 128) + ReLU, max pool 2x2; batch 4."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, in_channels, out_channels, image_size = 4, 64, 128, 224


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(out_channels, out_channels, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=2, stride=2),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


def get_inputs():
    return [torch.rand(batch_size, in_channels, image_size, image_size)]


def get_init_inputs():
    return [in_channels, out_channels]
