"""An EfficientNet MBConv block with squeeze-excitation on 112x112 feature maps: 1x1 expand (32 -> 192) +
BatchNorm + SiLU, depthwise 3x3 + BatchNorm + SiLU, squeeze-excitation (global average pool, 1x1 192 -> 8,
SiLU, 1x1 8 -> 192, sigmoid, scale), 1x1 project (192 -> 32) + BatchNorm, plus the input (BatchNorm in
training mode); batch 4."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, channels, expand_ratio, se_channels, image_size = 4, 32, 6, 8, 112


class Model(nn.Module):
    def __init__(self, channels, expand_ratio, se_channels):
        super().__init__()
        hidden = channels * expand_ratio
        self.expand = nn.Sequential(nn.Conv2d(channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.SiLU())
        self.depthwise = nn.Sequential(nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False),
                                       nn.BatchNorm2d(hidden), nn.SiLU())
        self.se_reduce = nn.Conv2d(hidden, se_channels, 1)
        self.se_expand = nn.Conv2d(se_channels, hidden, 1)
        self.project = nn.Sequential(nn.Conv2d(hidden, channels, 1, bias=False), nn.BatchNorm2d(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.depthwise(self.expand(x))
        s = F.adaptive_avg_pool2d(h, 1)
        s = torch.sigmoid(self.se_expand(F.silu(self.se_reduce(s))))
        return x + self.project(h * s)


def get_inputs():
    return [torch.rand(batch_size, channels, image_size, image_size)]


def get_init_inputs():
    return [channels, expand_ratio, se_channels]
