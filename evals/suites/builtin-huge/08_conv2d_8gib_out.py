"""A 3-channel image batch into an 8 GiB output: [128, 3, 512, 512] -> [128, 64, 512, 512], 3x3, padding 1, bias
and ReLU (the first layer of a CNN at a large batch)."""

import torch
import torch.nn as nn

N, C_IN, C_OUT, HW = 128, 3, 64, 512


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.rand(N, C_IN, HW, HW)]


def get_init_inputs():
    return [C_IN, C_OUT]
