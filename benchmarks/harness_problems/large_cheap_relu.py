"""The tensor sizes of builtin/11_linear_relu (a 2048 x 4096 input and output, a 4096 x 4096 weight) with
math a CPU does in milliseconds: the harness's own cost on a large problem, measured without a GPU."""

import torch
import torch.nn as nn

TOLERANCE = 1e-4

batch_size, features = 2048, 4096


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(features, features).uniform_(-1.0, 1.0))
        self.bias = nn.Parameter(torch.empty(features).uniform_(-1.0, 1.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * self.weight[0] + self.bias)


def get_inputs():
    return [torch.rand(batch_size, features)]


def get_init_inputs():
    return [features]
