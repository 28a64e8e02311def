"""ConvTranspose2d with a 3x5 filter, stride (2, 3), padding (1, 2), output_padding (1, 2) (32 -> 64 channels, no
bias) then leaky_relu(0.2) and a scale of 0.5 on 16 x 32 x 48 x 48."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, in_channels, out_channels, height, width = 16, 32, 64, 48, 48


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv_t = nn.ConvTranspose2d(in_channels, out_channels, (3, 5), stride=(2, 3), padding=(1, 2),
                                         output_padding=(1, 2), bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(self.conv_t(x), 0.2) * 0.5


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
