"""nn.Linear followed by hardtanh(-0.5, 0.5) and leaky ReLU (slope 0.1)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, in_features, out_features = 4096, 2048, 4096


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.hardtanh(self.fc(x), min_val=-0.5, max_val=0.5)
        return F.leaky_relu(y, negative_slope=0.1)


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
