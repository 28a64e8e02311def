"""nn.Linear 4096 -> 2048 on unnormalised features (values up to 1e5, beyond f16's range), then LayerNorm: f16 overflows, and after the norm bf16's 8-bit mantissa misses 1e-2; TF32 holds both."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, in_features, out_features = 4096, 4096, 2048
feature_scale = 1.0e5


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.fc(x))


def get_inputs():
    return [torch.rand(batch_size, in_features) * feature_scale]


def get_init_inputs():
    return [in_features, out_features]
