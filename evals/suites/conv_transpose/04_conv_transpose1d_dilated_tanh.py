"""ConvTranspose1d of width 5, dilation 2, padding 4 (64 -> 64 channels, bias) then tanh on 32 x 64 x 4096."""

import torch
import torch.nn as nn

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, in_channels, out_channels, length = 32, 64, 64, 4096


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv_t = nn.ConvTranspose1d(in_channels, out_channels, 5, padding=4, dilation=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.conv_t(x))


def get_inputs():
    return [torch.rand(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels]
