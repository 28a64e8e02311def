"""Depthwise 3x3 convolution, stride 2 (KernelBench format)."""
import torch
import torch.nn as nn

batch_size = 2
channels = 16
height = width = 16


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, stride=2, padding=1, groups=channels, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.rand(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
