"""nn.MultiheadAttention, nn.TransformerEncoderLayer and nn.TransformerEncoder are rewritten at tracing into the ops
they compute (frontend.attention): projection GEMMs, a batched GEMM of the scores with the scale in its epilogue, a
softmax row kernel, a batched GEMM with v, the output projection; a layer's Linears and LayerNorms as kernels of
their own. The program on the interpreter gives the module's outputs (attention weights too, where read); a call
with a mask, is_causal or dropout in training mode stays one module step, saying why."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from test_trace_recurrent import module_steps, traced_and_checked

EMBED, HEADS = 16, 4


class Attention(nn.Module):
    def __init__(self, batch_first=True, weights=False, average=True, cross=False, **options):
        super().__init__()
        self.attn = nn.MultiheadAttention(EMBED, HEADS, batch_first=batch_first, **options)
        self.weights, self.average, self.cross = weights, average, cross

    def forward(self, x, memory):
        kv = memory if self.cross else x
        if self.weights:
            return self.attn(x, kv, kv, average_attn_weights=self.average)
        y, _ = self.attn(x, kv, kv)
        return y


def _inputs(batch_first, length=5, source=7, batch=3, embed=EMBED):
    torch.manual_seed(2)
    shape = (batch, length, EMBED) if batch_first else (length, batch, EMBED)
    memory = (batch, source, embed) if batch_first else (source, batch, embed)
    return [torch.randn(*shape), torch.randn(*memory)]


def kernel_fns(result):
    """The row kernels' functions, then "gemm" once per GEMM kernel."""
    program = result.program
    return [k.op.fn for k in program.row_kernels] + ["gemm"] * len(program.kernels)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_attention_is_gemms_and_a_softmax_and_gives_the_module_output(batch_first, cross, bias):
    result = traced_and_checked(lambda: Attention(batch_first, cross=cross, bias=bias), _inputs(batch_first),
                                name="attention")
    assert module_steps(result) == []
    fns = kernel_fns(result)
    assert fns.count("softmax") == 1 and fns.count("gemm") == 6  # q, k, v, scores, probabilities @ v, out
    assert not any(c.target == "nn.MultiheadAttention" for c in result.coverage)  # nothing of it left as a module


@pytest.mark.parametrize("average", [True, False])
def test_the_attention_weights_are_the_modules_where_they_are_read(average):
    traced_and_checked(lambda: Attention(True, weights=True, average=average), _inputs(True), name="attention")


def test_key_and_value_of_their_own_width():
    def make():
        return Attention(True, cross=True, kdim=6, vdim=6)

    result = traced_and_checked(make, _inputs(True, embed=6), name="attention")
    assert module_steps(result) == []


class Encoder(nn.Module):
    def __init__(self, layers=2, final_norm=False, **options):
        super().__init__()
        layer = nn.TransformerEncoderLayer(EMBED, HEADS, 32, dropout=0.0, **options)
        self.enc = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(EMBED) if final_norm else None,
                                         enable_nested_tensor=False)

    def forward(self, x):
        return self.enc(x)


@pytest.mark.parametrize("options", [dict(batch_first=True), dict(batch_first=False, norm_first=True),
                                     dict(batch_first=True, activation="gelu"),
                                     dict(batch_first=True, activation=nn.GELU(approximate="tanh"))],
                         ids=["post_norm", "pre_norm_seq_first", "gelu", "gelu_module"])
@pytest.mark.parametrize("final_norm", [False, True])
def test_an_encoder_is_its_layers_kernels_and_gives_the_module_output(options, final_norm):
    x = _inputs(options["batch_first"])[0]
    result = traced_and_checked(lambda: Encoder(final_norm=final_norm, **options), [x], name="encoder")
    assert module_steps(result) == []
    fns = kernel_fns(result)
    assert fns.count("softmax") == 2 and fns.count("layer_norm") == 4 + final_norm and fns.count("gemm") == 2 * 8


class MaskedAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(EMBED, HEADS, batch_first=True)

    def forward(self, x, mask):
        return self.attn(x, x, x, attn_mask=mask)[0]


def test_a_masked_call_is_kept_whole_saying_why():
    from dsl_compiler.frontend import trace_problem
    from test_trace_recurrent import problem

    x = _inputs(True)[0]
    result = trace_problem(problem(MaskedAttention, [x, torch.zeros(x.shape[1], x.shape[1])], "masked"))
    row = next(r for r in result.coverage if r.op == "attn")
    # kept whole: as a module step, or (a keyword tensor argument, which a module step does not take) unsupported
    assert row.placement in ("torch_step", "unsupported") and "a call with attn_mask is not rewritten" in row.reason


def test_dropout_in_training_mode_stays_one_module_step_saying_why():
    from dsl_compiler.frontend import trace_problem
    from test_trace_recurrent import problem

    def make():
        return Attention(True, dropout=0.1).train()

    result = trace_problem(problem(make, _inputs(True), "dropout"))
    row = next(r for r in result.coverage if r.op == "attn")
    assert row.placement == "torch_step" and "dropout in training mode" in row.reason
