import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2


raise RuntimeError("this problem file is broken on purpose")


def get_inputs():
    return [torch.rand(4, 4)]


def get_init_inputs():
    return []
