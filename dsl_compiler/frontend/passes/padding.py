"""The padding pass: how much a kernel's operands grow so that every contiguous extent TMA reads is a multiple of
16 bytes (with ``TraceOptions.pad``). Zeros in a GEMM's K or a conv's input channels add nothing to any sum; the
padded M rows, N columns and output channels are sliced off after the kernel. A param grows once, when bound; any
other tensor by a ``pad`` step per call."""

from __future__ import annotations

import math
from dataclasses import dataclass

from dsl_compiler.frontend.graph import KernelGroup, LoweringSettings, OpGraph
from dsl_compiler.frontend.normalize import Op
from dsl_compiler.frontend.passes.precision import half_math

TMA_BYTES = 16  # every TMA operand's contiguous extent (last dim; channels for channels-last) is a multiple of this


@dataclass(frozen=True)
class KernelPadding:
    """Elements a kernel grows by: GEMM M, N, K; conv input and output channels."""

    d_m: int = 0
    d_n: int = 0
    d_k: int = 0
    d_c: int = 0
    d_kc: int = 0


def element_bytes(dtype: str | None) -> int:
    return 2 if dtype in ("f16", "bf16") else 4


def padded(n: int, align: int) -> int:
    return -(-n // align) * align


def pad_spec(extra: tuple[int, ...]) -> tuple[int, ...]:
    """``F.pad``'s argument for growing (or, negative, cutting) each dim at its end by ``extra``:
    pairs from the last dim backwards, leading dims that do not change left out."""
    spec: list[int] = []
    for d in reversed(range(len(extra))):
        spec += [0, int(extra[d])]
    while len(spec) > 2 and spec[-1] == 0 and spec[-2] == 0:
        spec = spec[:-2]
    return tuple(spec)


def alignment(half: str | None, dtype: str | None) -> int:
    """Elements per TMA_BYTES of what a kernel reads: its 16-bit math over fp32, else the storage type."""
    return TMA_BYTES // element_bytes(half if half is not None and dtype == "f32" else dtype)


def gemm_shapes(graph: OpGraph, op: Op) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The stored shapes of a GEMM's operands as the kernel reads them (rank > 3 flattened)."""
    sa, sb = graph.shape_of(op.operands[0]), graph.shape_of(op.operands[1])
    if sa is None or sb is None:
        return None
    if op.flatten_a:
        sa = (math.prod(sa[:-1]), sa[-1])
    if op.flatten_batch:
        sa, sb = (math.prod(sa[:-2]),) + tuple(sa[-2:]), (math.prod(sb[:-2]),) + tuple(sb[-2:])
    return tuple(sa), tuple(sb)


def gemm_padding(graph: OpGraph, settings: LoweringSettings, op: Op, kmajor: bool = False) -> tuple[int, int, int]:
    """(dM, dN, dK): how much the kernel's M, N and K grow so that every contiguous extent (A's and
    B's last dims as read, after a K-major copy when ``kmajor``, and the output's N) is a multiple of
    16 bytes."""
    shapes = gemm_shapes(graph, op) if settings.options.pad else None
    if shapes is None:
        return 0, 0, 0
    (sa, sb), a_t, b_t = shapes, op.a_t, op.b_t
    m, k = (sa[-1], sa[-2]) if a_t else (sa[-2], sa[-1])
    n = sb[-2] if b_t else sb[-1]
    if kmajor:
        a_t, b_t = False, True
    align = alignment(half_math(graph, settings, op), graph.dtype_of(op.operands[0]))
    d_m = padded(m, align) - m if a_t else 0
    d_k = padded(k, align) - k if (not a_t or b_t) else 0
    return d_m, padded(n, align) - n, d_k


def conv_padding(graph: OpGraph, settings: LoweringSettings, op: Op) -> tuple[int, int]:
    """(dC, dK): input and output channels grown to 16 bytes (channels are the contiguous extent of
    NHWC activations, KRSC filters and the NHWC output). Grouped and depthwise convs keep theirs."""
    sx, sw = graph.shape_of(op.operands[0]), graph.shape_of(op.operands[1])
    if not settings.options.pad or sx is None or sw is None or int(op.conv.get("groups", 1)) != 1:
        return 0, 0
    align = alignment(half_math(graph, settings, op), graph.dtype_of(op.operands[0]))
    out_channels = sw[1] if op.conv.get("transposed") else sw[0]  # a transposed conv's filter is [C, K, *filter]
    return padded(sx[1], align) - sx[1], padded(out_channels, align) - out_channels


def plan_padding(graph: OpGraph, settings: LoweringSettings, group: KernelGroup, kmajor: bool) -> KernelPadding:
    """A group's padding: a GEMM's (as its operands are read, ``kmajor``: after transposing copies), a conv's."""
    op = graph.ops[group.anchor]
    if op.kind == "gemm":
        return KernelPadding(*gemm_padding(graph, settings, op, kmajor))
    d_c, d_kc = conv_padding(graph, settings, op)
    return KernelPadding(d_c=d_c, d_kc=d_kc)


def epilogue_padding(graph: OpGraph, group: KernelGroup, r, index: str | None, d_rows: int,
                     d_cols: int) -> tuple[int, ...] | None:
    """How much an epilogue tensor grows with its kernel's padded output: a column vector by the
    padded columns (conv: output channels), a row vector by the padded rows, a full tensor by both."""
    shape = graph.shape_of(r)
    if not (d_rows or d_cols) or shape is None or index in (None, "scalar"):
        return None
    extra = [0] * len(shape)
    conv = graph.ops[group.anchor].kind == "conv"
    if conv:
        spatial = len(graph.shape_of(group.anchor)) - 2
        if index == "full":
            extra[1] = d_cols
        elif index == "col":
            extra[max(0, len(shape) - 1 - spatial)] = d_cols
    elif index == "col":
        extra[-1] = d_cols
    elif index == "row":
        extra[-2 if len(shape) >= 2 and shape[-1] == 1 else -1] = d_rows
    elif index == "full":
        extra[-2:] = [d_rows, d_cols]
    return tuple(extra) if any(extra) else None
