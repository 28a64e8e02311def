"""A language model's recurrent body and head: a 2-layer nn.LSTM over embedded tokens (time major, initial state
(h0, c0) given) and a Linear to the vocabulary at every step; embedding 256, hidden 512, vocabulary 2000,
sequence 32, batch 8."""

import torch
import torch.nn as nn

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, seq_len, embed_size, hidden_size, vocab_size, num_layers = 8, 32, 256, 512, 2000, 2


class Model(nn.Module):
    def __init__(self, embed_size, hidden_size, vocab_size, num_layers):
        super().__init__()
        self.lstm = nn.LSTM(embed_size, hidden_size, num_layers=num_layers)
        self.head = nn.Linear(hidden_size, vocab_size)

    def forward(self, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x, (h0, c0))  # [seq, batch, hidden]
        return self.head(out)  # logits of every step


def get_inputs():
    return [torch.randn(seq_len, batch_size, embed_size), torch.randn(num_layers, batch_size, hidden_size),
            torch.randn(num_layers, batch_size, hidden_size)]


def get_init_inputs():
    return [embed_size, hidden_size, vocab_size, num_layers]
