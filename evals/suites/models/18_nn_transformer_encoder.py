"""A library Transformer encoder: nn.TransformerEncoder of 2 nn.TransformerEncoderLayer (batch first, post-norm,
GELU, no dropout) with a final LayerNorm, then a Linear classifier on the first token; d_model 256, 8 heads,
feed-forward 1024, batch 8, sequence 128."""

import torch
import torch.nn as nn

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, seq_len, d_model, num_heads, d_ff, num_layers, num_classes = 8, 128, 256, 8, 1024, 2, 10


class Model(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, num_layers, num_classes):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model, num_heads, d_ff, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, norm=nn.LayerNorm(d_model), enable_nested_tensor=False)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x)[:, 0])


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, num_heads, d_ff, num_layers, num_classes]
