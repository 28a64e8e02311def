"""A Linear whose output is shifted by a tensor held as a plain attribute (drawn in __init__, outside state_dict),
as KernelBench's recurrent models hold their initial state."""

import torch
import torch.nn as nn

TOLERANCE = 1e-2


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 16)
        self.offset = torch.randn(16) * 10

    def forward(self, x):
        return self.fc(x) + self.offset.to(x.device)


def get_inputs():
    return [torch.randn(8, 32)]


def get_init_inputs():
    return []
