"""3x3x3 convolution with a 4 GiB output: [16, 4, 64, 128, 128] -> [16, 64, 64, 128, 128], padding 1."""

import torch
import torch.nn as nn

N, C_IN, C_OUT, D, HW = 16, 4, 64, 64, 128


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv3d(c_in, c_out, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.rand(N, C_IN, D, HW, HW)]


def get_init_inputs():
    return [C_IN, C_OUT]
