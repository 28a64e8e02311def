"""Linear layer, scaling, then softmax over features (KernelBench format)."""
import torch
import torch.nn as nn

batch_size = 64
in_features = 128
out_features = 256
scale = 0.125


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        return torch.softmax(self.fc(x) * self.scale, dim=1)


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
