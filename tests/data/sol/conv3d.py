import torch
import torch.nn as nn

batch_size, in_channels, out_channels = 2, 8, 16
depth, height, width = 16, 32, 32
kernel_size = (3, 5, 5)
padding = (1, 2, 2)


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, padding):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=padding, bias=True)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding]
