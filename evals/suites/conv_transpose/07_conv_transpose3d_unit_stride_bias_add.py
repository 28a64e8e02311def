"""ConvTranspose3d 3x3x3 at stride 1 (64 -> 32 channels, padding 1, bias) plus a per-channel bias parameter,
then ReLU, on 4 x 64 x 16 x 32 x 32."""

import torch
import torch.nn as nn

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, in_channels, out_channels, depth, height, width = 4, 64, 32, 16, 32, 32


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv_t = nn.ConvTranspose3d(in_channels, out_channels, 3, padding=1)
        self.shift = nn.Parameter(torch.randn(out_channels, 1, 1, 1) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv_t(x) + self.shift)


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
