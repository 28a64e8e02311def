"""A MobileNetV2 inverted residual on 224x224 feature maps: 1x1 expand (32 -> 192) + BatchNorm + ReLU6,
depthwise 3x3 + BatchNorm + ReLU6, 1x1 project (192 -> 32) + BatchNorm, plus the input (BatchNorm in
training mode); batch 2."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, channels, expand_ratio, image_size = 2, 32, 6, 224


class Model(nn.Module):
    def __init__(self, channels, expand_ratio):
        super().__init__()
        hidden = channels * expand_ratio
        self.block = nn.Sequential(
            nn.Conv2d(channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, channels, 1, bias=False), nn.BatchNorm2d(channels),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x)


def get_inputs():
    return [torch.rand(batch_size, channels, image_size, image_size)]


def get_init_inputs():
    return [channels, expand_ratio]
