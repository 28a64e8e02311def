"""nn.Linear followed by four elementwise ops: mish, clamp(-1, 1), multiply by 1.5, add 0.25."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, in_features, out_features = 2048, 4096, 4096


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.mish(self.fc(x))
        y = torch.clamp(y, -1.0, 1.0)
        return y * 1.5 + 0.25


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
