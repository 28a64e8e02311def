"""ConvTranspose2d 4x4 in 4 groups (64 -> 64 channels, stride 2, padding 1, bias) then hardtanh on
16 x 64 x 64 x 64: a grouped transposed conv, which sm_90 dgrad does not take (a PyTorch step)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, in_channels, out_channels, height, width, groups = 16, 64, 64, 64, 64, 4


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, groups):
        super().__init__()
        self.conv_t = nn.ConvTranspose2d(in_channels, out_channels, 4, stride=2, padding=1, groups=groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.hardtanh(self.conv_t(x), -1.0, 1.0)


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, groups]
