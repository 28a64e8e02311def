"""nn.Linear 4096 -> 4096, GroupNorm with 32 groups, then x * sigmoid(x), batch 4096."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, in_features, out_features, groups = 4096, 4096, 4096, 32


class Model(nn.Module):
    def __init__(self, in_features, out_features, groups):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.norm = nn.GroupNorm(groups, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.fc(x))
        return y * torch.sigmoid(y)


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, groups]
