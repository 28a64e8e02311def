"""A GoogLeNet inception module (3a) on 224x224 feature maps, 192 -> 256 channels: 1x1 (64); 1x1 (96) -> 3x3 (128);
1x1 (16) -> 5x5 (32); 3x3 max pool -> 1x1 (32); branches concatenated along channels; batch 2."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, in_channels, image_size = 2, 192, 224
out_1x1, reduce_3x3, out_3x3, reduce_5x5, out_5x5, pool_proj = 64, 96, 128, 16, 32, 32


class Model(nn.Module):
    def __init__(self, in_channels, out_1x1, reduce_3x3, out_3x3, reduce_5x5, out_5x5, pool_proj):
        super().__init__()
        self.branch1x1 = nn.Conv2d(in_channels, out_1x1, kernel_size=1)
        self.branch3x3 = nn.Sequential(nn.Conv2d(in_channels, reduce_3x3, kernel_size=1),
                                       nn.Conv2d(reduce_3x3, out_3x3, kernel_size=3, padding=1))
        self.branch5x5 = nn.Sequential(nn.Conv2d(in_channels, reduce_5x5, kernel_size=1),
                                       nn.Conv2d(reduce_5x5, out_5x5, kernel_size=5, padding=2))
        self.branch_pool = nn.Sequential(nn.MaxPool2d(kernel_size=3, stride=1, padding=1),
                                         nn.Conv2d(in_channels, pool_proj, kernel_size=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1x1(x), self.branch3x3(x), self.branch5x5(x), self.branch_pool(x)], 1)


def get_inputs():
    return [torch.rand(batch_size, in_channels, image_size, image_size)]


def get_init_inputs():
    return [in_channels, out_1x1, reduce_3x3, out_3x3, reduce_5x5, out_5x5, pool_proj]
