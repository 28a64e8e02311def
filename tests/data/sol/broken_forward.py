import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.matmul(x, torch.ones(5, 7, device=x.device))  # shapes do not match


def get_inputs():
    return [torch.rand(4, 6)]


def get_init_inputs():
    return []
