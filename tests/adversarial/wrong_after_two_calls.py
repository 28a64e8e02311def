"""Right on the first two calls of each instance (a judge that calls twice to compare them sees two
right answers), noise from the third call on, which is where timing loops live."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401


def _noise(x, n):
    """Wrong, but repeatable and input-dependent: two calls on one input agree, new inputs change it."""
    g = torch.Generator(device=x.device).manual_seed(1234)
    w = torch.rand(x.shape[-1], n, generator=g, device=x.device)
    return torch.sin(x @ w * 997.0).abs()


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls <= 2:
            return torch.relu(self.fc(x))
        return _noise(x, self.fc.out_features)
