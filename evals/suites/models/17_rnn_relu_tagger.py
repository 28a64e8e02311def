"""A sequence tagger: a 1-layer nn.RNN with ReLU (batch first, initial state given) and a Linear to the tags at
every step; input 256, hidden 512, 32 tags, sequence 48, batch 8."""

import torch
import torch.nn as nn

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, seq_len, input_size, hidden_size, num_tags = 8, 48, 256, 512, 32


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, num_tags):
        super().__init__()
        self.rnn = nn.RNN(input_size, hidden_size, nonlinearity="relu", batch_first=True)
        self.tags = nn.Linear(hidden_size, num_tags)

    def forward(self, x: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x, h0)  # [batch, seq, hidden]
        return self.tags(out)


def get_inputs():
    return [torch.randn(batch_size, seq_len, input_size), torch.randn(1, batch_size, hidden_size)]


def get_init_inputs():
    return [input_size, hidden_size, num_tags]
