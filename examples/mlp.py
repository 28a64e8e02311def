"""Two-layer MLP: Linear -> ReLU -> Linear (KernelBench format)."""
import torch
import torch.nn as nn

batch_size = 64
in_features = 128
hidden = 256
out_features = 64


class Model(nn.Module):
    def __init__(self, in_features, hidden, out_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, out_features)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden, out_features]
