"""A ResNet basic block on 224x224 feature maps: conv 3x3 + BatchNorm + ReLU, conv 3x3 + BatchNorm, plus the
identity, ReLU (64 channels; BatchNorm in training mode, as KernelBench runs it); batch 2."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, channels, image_size = 2, 64, 224


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + x)


def get_inputs():
    return [torch.rand(batch_size, channels, image_size, image_size)]


def get_init_inputs():
    return [channels]
