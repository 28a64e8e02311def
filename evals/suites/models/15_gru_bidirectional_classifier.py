"""A sequence classifier: a 2-layer bidirectional nn.GRU (batch first, no initial state) and a Linear over the last
layer's final hidden states of both directions; input 128, hidden 256, sequence 24, batch 8, 10 classes."""

import torch
import torch.nn as nn

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, seq_len, input_size, hidden_size, num_classes = 8, 24, 128, 256, 10


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, num_classes):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden_size, num_layers=2, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden_size, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h_n = self.gru(x)  # [num_layers * 2, batch, hidden]: layer-major, direction-minor
        return self.fc(torch.cat([h_n[-2], h_n[-1]], dim=1))


def get_inputs():
    return [torch.randn(batch_size, seq_len, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, num_classes]
