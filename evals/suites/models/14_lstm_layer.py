"""One LSTM layer over a sequence, written out step by step (gates i, f, g, o; initial state h0, c0 given): input
512, hidden 512, sequence 64, batch 10; returns the hidden state of every step."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, seq_len, input_size, hidden_size = 10, 64, 512, 512


class Model(nn.Module):
    def __init__(self, seq_len, input_size, hidden_size):
        super().__init__()
        self.seq_len = seq_len
        self.hidden_size = hidden_size
        self.input_proj = nn.Linear(input_size, 4 * hidden_size)
        self.recurrent = nn.Linear(hidden_size, 4 * hidden_size, bias=False)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        gates_x = self.input_proj(x)  # every step's input projection at once
        outputs = []
        for t in range(self.seq_len):
            gates = gates_x[:, t] + self.recurrent(h)
            i, f, g, o = gates.chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs, dim=1)


def get_inputs():
    return [torch.rand(batch_size, seq_len, input_size), torch.rand(batch_size, hidden_size),
            torch.rand(batch_size, hidden_size)]


def get_init_inputs():
    return [seq_len, input_size, hidden_size]
