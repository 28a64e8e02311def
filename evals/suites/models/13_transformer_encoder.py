"""A transformer encoder block (post-norm): multi-head self-attention (QKV projection, softmax(QK^T / sqrt(d)) V
over 8 heads, output projection) + residual + LayerNorm, then a GELU MLP (512 -> 2048 -> 512) + residual +
LayerNorm; batch 8, sequence 256."""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOLERANCE = 1e-2
ALLOWED_PRECISIONS = ("f32", "tf32", "bf16", "f16")

batch_size, seq_len, d_model, num_heads, d_ff = 8, 256, 512, 8, 2048


class Model(nn.Module):
    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.ff2 = nn.Linear(d_ff, d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.reshape(b, s, self.num_heads, self.head_dim).transpose(1, 2)
        k = k.reshape(b, s, self.num_heads, self.head_dim).transpose(1, 2)
        v = v.reshape(b, s, self.num_heads, self.head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / (self.head_dim ** 0.5)
        attn = torch.matmul(torch.softmax(scores, dim=-1), v)
        attn = attn.transpose(1, 2).reshape(b, s, d)
        x = self.norm1(x + self.out(attn))
        return self.norm2(x + self.ff2(F.gelu(self.ff1(x))))


def get_inputs():
    return [torch.rand(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, num_heads, d_ff]
