"""A Linear layer with a 4 GiB output: [32768, 64] -> [32768, 32768], bias and ReLU fused after the GEMM (the
adversarial set's Linear + ReLU at KernelBench's largest output)."""

import torch
import torch.nn as nn

batch_size, in_features, out_features = 32768, 64, 32768


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
