"""Attention and Transformer layers (``nn.MultiheadAttention``, ``nn.TransformerEncoderLayer``,
``nn.TransformerEncoder``) rewritten in the traced graph as the ops they compute, so the lowering makes kernels of
them: an attention is one GEMM per projection (q, k, v: row blocks of ``in_proj_weight``), a batched GEMM of the
scores per head with the 1/sqrt(head_dim) scale in its epilogue, a softmax row kernel, a batched GEMM with v and
the output projection; the head split and merge are views and transposes. An encoder layer calls its attention,
Linears and LayerNorms (each then rewritten or lowered in its own right); an encoder calls its layers.

A call the rewrite does not take (a mask, ``is_causal``, dropout in training mode, ``bias_k`` / ``add_zero_attn``,
an unbatched input) stays one ``module`` step; ``kept_whole`` says why."""

from __future__ import annotations

import math
from typing import Any

from dsl_compiler.frontend.module_rewrites import Call, Rule, users_beyond_first

# forward() arguments that must be absent (None / False) for a call to be rewritten, by module
_MASKS = {
    "MultiheadAttention": (("key_padding_mask", 3, None), ("attn_mask", 5, None), ("is_causal", 7, False)),
    "TransformerEncoderLayer": (("src_mask", 1, None), ("src_key_padding_mask", 2, None), ("is_causal", 3, False)),
    "TransformerEncoder": (("mask", 1, None), ("src_key_padding_mask", 2, None), ("is_causal", 3, None)),
}


def _given(node: Any, name: str, index: int, absent: Any) -> bool:
    value = node.args[index] if len(node.args) > index else node.kwargs.get(name, absent)
    return value is not absent and value is not None and value is not False


def _common(module: Any, node: Any, kind: str) -> str | None:
    for name, index, absent in _MASKS[kind]:
        if _given(node, name, index, absent):
            return f"a call with {name} is not rewritten"
    x = node.args[0] if node.args else None
    meta = getattr(x, "meta", {}).get("tensor_meta")
    if not hasattr(meta, "shape") or len(meta.shape) != 3:
        return "an input that is not one batched (3-D) tensor"
    return None


def _dropout_reason(module: Any, p: float) -> str | None:
    if module.training and p > 0:
        return "dropout in training mode draws random masks a program cannot reproduce"
    return None


def attention_kept_whole(module: Any, node: Any) -> str | None:
    if module.bias_k is not None or module.add_zero_attn:
        return "bias_k / bias_v or add_zero_attn are not rewritten"
    for arg in node.args[1:3]:
        meta = getattr(arg, "meta", {}).get("tensor_meta")
        if not hasattr(meta, "shape") or len(meta.shape) != 3:
            return "a key or value that is not one batched (3-D) tensor"
    return _common(module, node, "MultiheadAttention") or _dropout_reason(module, module.dropout)


def encoder_layer_kept_whole(module: Any, node: Any) -> str | None:
    return _common(module, node, "TransformerEncoderLayer") or _dropout_reason(module, module.dropout.p)


def encoder_kept_whole(module: Any, node: Any) -> str | None:
    return _common(module, node, "TransformerEncoder")


def attention(call: Call) -> tuple:
    """``(output, weights)`` of ``module(query, key, value)``: weights averaged over heads (or per head), None
    when ``need_weights`` is False."""
    import torch
    import torch.nn.functional as F

    m = call.module
    q_in, k_in, v_in = call.arg(0, "query"), call.arg(1, "key"), call.arg(2, "value")
    need_weights = call.arg(4, "need_weights", True)
    average = call.arg(6, "average_attn_weights", True)
    embed, heads = m.embed_dim, m.num_heads
    head_dim = embed // heads
    if m._qkv_same_embed_dim:
        w = call.param("in_proj_weight")
        weights = [w[i * embed:(i + 1) * embed] for i in range(3)]
    else:
        weights = [call.param(f"{n}_proj_weight") for n in ("q", "k", "v")]
    b = call.param("in_proj_bias") if m.in_proj_bias is not None else None
    biases = [b[i * embed:(i + 1) * embed] if b is not None else None for i in range(3)]

    def heads_of(x, i):
        shape = call.shape(x)
        y = F.linear(x, weights[i], biases[i]).reshape(*shape[:2], heads, head_dim)
        return y.transpose(1, 2) if m.batch_first else y.permute(1, 2, 0, 3)  # [batch, heads, length, head_dim]

    q, k, v = heads_of(q_in, 0), heads_of(k_in, 1), heads_of(v_in, 2)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))
    probabilities = torch.softmax(scores, dim=-1)
    merged = torch.matmul(probabilities, v)  # [batch, heads, L, head_dim]
    batch, length = call.shape(q_in)[:2] if m.batch_first else call.shape(q_in)[1::-1]
    merged = (merged.transpose(1, 2).reshape(batch, length, embed) if m.batch_first
              else merged.permute(2, 0, 1, 3).reshape(length, batch, embed))
    output = F.linear(merged, call.param("out_proj.weight"), call.param("out_proj.bias")
                      if m.out_proj.bias is not None else None)
    if need_weights is False or not users_beyond_first(call.node):
        return output, None
    return output, probabilities.mean(dim=1) if average is not False else probabilities


def encoder_layer(call: Call) -> Any:
    """``TransformerEncoderLayer.forward(src)``: attention and feed-forward blocks, each with its residual and
    LayerNorm (before the block with ``norm_first``, after it otherwise)."""
    import torch.nn as nn

    m = call.module
    x = call.arg(0, "src")

    def self_attention(y):
        return call.child("self_attn", y, y, y, need_weights=False)[0]

    def feed_forward(y):
        hidden = call.child("linear1", y)
        hidden = call.child("activation", hidden) if isinstance(m.activation, nn.Module) else m.activation(hidden)
        return call.child("linear2", hidden)

    if m.norm_first:
        x = x + self_attention(call.child("norm1", x))
        return x + feed_forward(call.child("norm2", x))
    x = call.child("norm1", x + self_attention(x))
    return call.child("norm2", x + feed_forward(x))


def encoder(call: Call) -> Any:
    """``TransformerEncoder.forward(src)``: its layers in turn, then its norm."""
    x = call.arg(0, "src")
    for i in range(len(call.module.layers)):
        x = call.child(f"layers.{i}", x)
    return call.child("norm", x) if call.module.norm is not None else x


def _classes(name: str):
    def classes() -> tuple:
        import torch.nn as nn

        return (getattr(nn, name),)
    return classes


RULES = (
    Rule("attention", _classes("MultiheadAttention"), attention_kept_whole, attention),
    Rule("encoder_layer", _classes("TransformerEncoderLayer"), encoder_layer_kept_whole, encoder_layer),
    Rule("encoder", _classes("TransformerEncoder"), encoder_kept_whole, encoder),
)
