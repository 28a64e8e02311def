"""masked_fill by a comparison of a float tensor with a number (a causal attention's `bias[:, :, :T, :T] == 0`) is
folded at tracing into one fill_where step (a program carries no bool tensors, so the comparison alone had no
form and took the whole model with it); the attention around it lowers to kernels, and the program matches the
model on the interpreter, -inf and all. An infinite bound in an epilogue (clamp(max=inf)) is a number too, and
triu / tril are steps."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from test_trace_recurrent import traced_and_checked

from dsl_compiler.printer import format_expr


class CausalAttention(nn.Module):
    """minGPT's causal self-attention as KernelBench Level 3 writes it (sizes read from x and k, a buffer mask
    longer than the sequence, sliced by the traced length)."""

    def __init__(self, embed=32, heads=4, max_len=12, written="bias == 0"):
        super().__init__()
        self.c_attn = nn.Linear(embed, 3 * embed)
        self.c_proj = nn.Linear(embed, embed)
        self.register_buffer("bias", torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len))
        self.heads, self.embed, self.written = heads, embed, written

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.embed, dim=2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = self.bias[:, :, :T, :T]
        if self.written == "bias == 0":
            att = att.masked_fill(mask == 0, float("-inf"))
        else:  # the comparison the other way round, and a finite fill
            att = att.masked_fill(0.5 > mask, -1e9)
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


@pytest.mark.parametrize("written", ["bias == 0", "0.5 > bias"])
def test_a_causal_attention_is_kernels_around_one_fill_where_step(written):
    torch.manual_seed(3)
    result = traced_and_checked(lambda: CausalAttention(written=written), [torch.randn(2, 8, 32)], name="causal")
    program = result.program
    fills = [s for s in program.torch_steps if s.fn == "fill_where"]
    assert len(fills) == 1
    literals = [a.value for a in fills[0].args if a.kind == "literal"]
    assert literals == ([-math.inf, "eq", 0.0] if written == "bias == 0" else [-1e9, "lt", 0.5])
    assert [k.op.fn for k in program.row_kernels] == ["softmax"] and len(program.kernels) == 4
    assert not any(s.fn == "module" for s in program.torch_steps)
    # the scale, 1 / sqrt(k.size(-1)) computed from a traced size, is a number in the scores' epilogue
    assert any("* 0.353553" in format_expr(st.expr) for k in program.kernels for st in k.stores)


def test_a_fill_with_a_tensor_the_comparison_does_not_read_stays_a_comparison():
    """Only a comparison with a number is folded: two tensors compared keep the masked_fill (whose bool operand has
    no form), so the model is one step, saying why."""
    from dsl_compiler.frontend import trace_problem
    from test_trace_recurrent import problem

    class TwoTensors(nn.Module):
        def forward(self, x, y):
            return x.masked_fill(x > y, 0.0)

    result = trace_problem(problem(TwoTensors, [torch.randn(4, 8), torch.randn(4, 8)], "two"))
    assert any("not in the torch-step whitelist" in r.reason for r in result.coverage)


def test_an_infinite_clamp_bound_is_an_epilogue_number():
    class Clamped(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 16)

        def forward(self, x):
            return torch.clamp(self.fc(x), min=-1.0, max=float("inf")) * 2.0

    result = traced_and_checked(Clamped, [torch.randn(4, 16)], name="clamped")
    assert len(result.program.kernels) == 1 and not result.program.torch_steps


@pytest.mark.parametrize("fn, diagonal", [(torch.triu, 1), (torch.tril, 0), (torch.tril, -1)])
def test_a_triangle_is_a_step_and_the_gemm_after_it_a_kernel(fn, diagonal):
    class Triangle(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 16)

        def forward(self, x):
            return self.fc(fn(x, diagonal))

    torch.manual_seed(5)
    result = traced_and_checked(Triangle, [torch.randn(16, 16)], name="triangle")
    (step,) = result.program.torch_steps
    assert step.fn == fn.__name__ and len(result.program.kernels) == 1
