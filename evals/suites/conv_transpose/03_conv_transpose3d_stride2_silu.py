"""ConvTranspose3d 3x3x3 (32 -> 16 channels, stride 2, padding 1, output_padding 1, bias) then x * sigmoid(x), on
8 x 32 x 16 x 32 x 32 (to 8 x 16 x 32 x 64 x 64)."""

import torch
import torch.nn as nn

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, in_channels, out_channels, depth, height, width = 8, 32, 16, 16, 32, 32


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv_t = nn.ConvTranspose3d(in_channels, out_channels, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv_t(x)
        return y * torch.sigmoid(y)


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
