"""ConvTranspose2d 3x3 (64 -> 32 channels, stride 2, padding 1, output_padding 1, bias) then ReLU: a 2x decoder
upsampling of 16 x 64 x 64 x 64 to 16 x 32 x 128 x 128."""

import torch
import torch.nn as nn

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, in_channels, out_channels, height, width = 16, 64, 32, 64, 64


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.up = nn.ConvTranspose2d(in_channels, out_channels, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.up(x))


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
