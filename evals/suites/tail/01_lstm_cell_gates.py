"""An LSTM cell's step: one Linear to the four gates, chunked into i, f, g, o, then the element-wise cell update."""

import torch
import torch.nn as nn

TOLERANCE = 1e-2

BATCH, INPUT, HIDDEN = 256, 512, 512


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gates = nn.Linear(INPUT, 4 * HIDDEN)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        i, f, g, o = self.gates(x).chunk(4, 1)
        c_next = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h_next = torch.sigmoid(o) * torch.tanh(c_next)
        return h_next, c_next


def get_inputs():
    return [torch.randn(BATCH, INPUT), torch.randn(BATCH, HIDDEN)]


def get_init_inputs():
    return []
