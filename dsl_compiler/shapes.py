"""Shapes, dtypes and layouts of every named tensor of a program, and the GEMM view of each kernel.

Kernel outputs follow from the op alone (no torch needed); torch-step outputs are found by running
the step on meta tensors, so torch is imported only when a program has torch steps.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from dsl_compiler import ir, row_ops
from dsl_compiler.tensor_types import ShapeError, TensorType


class GemmDims(NamedTuple):
    """The GEMM problem of a kernel: batch l, and m x n x k (for conv: the implicit-GEMM view)."""

    l: int  # noqa: E741 - CUTLASS's name for the batch mode
    m: int
    n: int
    k: int


def conv_output_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """PyTorch's output extent of one spatial dim."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def conv_transpose_output_size(size: int, kernel: int, stride: int, padding: int, dilation: int,
                               output_padding: int) -> int:
    """PyTorch's output extent of one spatial dim of a transposed convolution."""
    return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def operand_shape(t: TensorType, operand: ir.Operand) -> tuple[int, ...]:
    """The shape an op sees: a transposed read swaps the last two dims."""
    shape = t.shape
    if operand.transpose and len(shape) >= 2:
        shape = shape[:-2] + (shape[-1], shape[-2])
    return shape


def _need(types: dict[str, TensorType], operand: ir.Operand, kernel: ir.Kernel) -> TensorType:
    t = types.get(operand.name)
    if t is None:
        raise ShapeError(f"'{operand.name}' is not defined before kernel '{kernel.name}'", operand.span or kernel.span,
                         found=operand.name, expected="an input, a param, or a tensor stored or computed earlier",
                         hint=f"declare '{operand.name}' or compute it in an earlier step", code="undefined-name")
    return t


def op_output(kernel: ir.Kernel, types: dict[str, TensorType]) -> tuple[tuple[int, ...], GemmDims, ir.Layout]:
    """The full output shape of a kernel's op, its GEMM view, and the output layout."""
    op = kernel.op
    if isinstance(op, ir.GemmOp):
        ta, tb = _need(types, op.a, kernel), _need(types, op.b, kernel)
        a, b = operand_shape(ta, op.a), operand_shape(tb, op.b)
        if len(a) not in (2, 3) or len(b) not in (2, 3):
            bad = op.a if len(a) not in (2, 3) else op.b
            raise ShapeError(f"gemm needs rank-2 or rank-3 operands; '{bad.name}' has rank {len(types[bad.name].shape)}",
                             bad.span or op.span, found=str(list(types[bad.name].shape)),
                             expected="[M, K] / [K, N], or [L, M, K] / [L, K, N] for a batched gemm",
                             hint="reshape it with a torch step first (reshape / flatten)")
        if len(a) == 2 and len(b) == 3:
            raise ShapeError("a rank-2 A with a rank-3 B is not a gemm", op.span, found=f"{list(a)} @ {list(b)}",
                             expected="batched A [L, M, K] with B [L, K, N] or a shared B [K, N]",
                             hint="give A a batch dim, or write the product the other way round")
        if a[-1] != b[-2]:
            raise ShapeError(f"gemm inner dims disagree: A gives K={a[-1]}, B gives K={b[-2]}", op.span,
                             found=f"A {list(a)} @ B {list(b)}", expected="A [..., M, K] @ B [..., K, N]",
                             hint="a nn.Linear weight [N, K] is read transposed: write w^T")
        if len(a) == 3 and len(b) == 3 and a[0] != b[0]:
            raise ShapeError(f"batch sizes disagree: {a[0]} and {b[0]}", op.span, found=f"{list(a)} @ {list(b)}",
                             expected="the same L on both operands", hint="check the batch dim of both operands")
        l = a[0] if len(a) == 3 else 1
        out = (a[0], a[1], b[-1]) if len(a) == 3 else (a[0], b[-1])
        return out, GemmDims(l, a[-2], b[-1], a[-1]), "contiguous"
    if isinstance(op, ir.GroupedGemmOp):
        ta, tb = _need(types, op.a, kernel), _need(types, op.b, kernel)
        a, b = operand_shape(ta, op.a), operand_shape(tb, op.b)
        if len(a) != 2 or len(b) != 3:
            raise ShapeError("grouped_gemm needs A [sum(group_sizes), K] and B [G, K, N] (or b^T for [G, N, K])",
                             op.span, found=f"A {list(ta.shape)}, B {list(tb.shape)}",
                             expected="A rank 2, B rank 3", hint="stack the experts' weights into one [G, K, N] param")
        if op.a.transpose:
            raise ShapeError("grouped_gemm reads A as stored", op.a.span or op.span, found=f"{op.a.name}^T",
                             expected=op.a.name, hint="transpose A with a torch step first", code="unsupported")
        if sum(op.group_sizes) != a[0]:
            raise ShapeError(f"group_sizes sum to {sum(op.group_sizes)} but A has {a[0]} rows", op.span,
                             found=str(op.group_sizes), expected=f"sizes summing to {a[0]}",
                             hint="give the row count of each group")
        if len(op.group_sizes) != b[0]:
            raise ShapeError(f"{len(op.group_sizes)} groups but B has {b[0]} matrices", op.span,
                             found=f"{len(op.group_sizes)} group sizes", expected=f"{b[0]} group sizes",
                             hint="one group size per matrix of B")
        if a[1] != b[1]:
            raise ShapeError(f"grouped_gemm inner dims disagree: A gives K={a[1]}, B gives K={b[1]}", op.span,
                             found=f"A {list(a)}, B {list(b)}", expected="A [M, K], B [G, K, N]",
                             hint="B stored as [G, N, K] is read transposed: write b^T")
        return (a[0], b[2]), GemmDims(len(op.group_sizes), max(op.group_sizes), b[2], a[1]), "contiguous"
    # convolution
    tx, tw = _need(types, op.x, kernel), _need(types, op.w, kernel)
    rank = op.spatial_dims + 2
    w_shape = "w [C, K/groups, *filter]" if isinstance(op, ir.ConvTransposeOp) else "w [K, C/groups, *filter]"
    for operand, t, what in ((op.x, tx, "x [N, C, *spatial]"), (op.w, tw, w_shape)):
        if operand.transpose:
            raise ShapeError(f"conv reads '{operand.name}' as declared; ^T does not apply", operand.span or op.span,
                             found=f"{operand.name}^T", expected=operand.name, hint="remove ^T", code="unsupported")
        if len(t.shape) != rank:
            raise ShapeError(f"{op.fn} needs rank-{rank} tensors; '{operand.name}' has rank "
                             f"{len(t.shape)}", operand.span or op.span, found=str(list(t.shape)),
                             expected=what, hint=f"use {op.fn[:-2]}{len(t.shape) - 2}d or reshape with a torch step"
                             if len(t.shape) in (3, 4, 5) else "reshape with a torch step")
    if isinstance(op, ir.ConvTransposeOp):
        return _conv_transpose_output(op, tx, tw)
    n, c, *spatial = tx.shape
    k, cg, *filt = tw.shape
    g = op.groups
    if c % g or k % g:
        raise ShapeError(f"groups={g} must divide in channels {c} and out channels {k}", op.span,
                         found=f"C={c}, K={k}, groups={g}", expected="C and K multiples of groups",
                         hint="depthwise is groups = C with K a multiple of C")
    if cg != c // g:
        raise ShapeError(f"the filter has {cg} input channels, the input gives C/groups = {c // g}", op.span,
                         found=f"w {list(tw.shape)}", expected=f"w [K, {c // g}, *filter]",
                         hint="check groups and the weight's dim 1")
    out_spatial = tuple(
        conv_output_size(s, f, st, p, d) for s, f, st, p, d in zip(spatial, filt, op.stride, op.padding, op.dilation)
    )
    _need_output(op, out_spatial)
    m = n * math.prod(out_spatial)
    kk = c // g * math.prod(filt)
    return (n, k, *out_spatial), GemmDims(1, m, k, kk), "channels_last" if tx.reads_channels_last else tx.layout


def _need_output(op: ir.ConvOp, out_spatial: tuple[int, ...]) -> None:
    if any(o <= 0 for o in out_spatial):
        raise ShapeError("the convolution's output is empty", op.span, found=f"output spatial {list(out_spatial)}",
                         expected="every output extent at least 1", hint="reduce padding, stride or dilation, or check the filter size")


def _conv_transpose_output(op: ir.ConvTransposeOp, tx: TensorType,
                           tw: TensorType) -> tuple[tuple[int, ...], GemmDims, ir.Layout]:
    """A transposed conv's output [N, K, *out] and its dgrad GEMM: m = N·out pixels, n = K, k = C/groups·taps."""
    n, c, *spatial = tx.shape
    cw, kg, *filt = tw.shape
    g = op.groups
    if c % g:
        raise ShapeError(f"groups={g} must divide in channels {c}", op.span, found=f"C={c}, groups={g}",
                         expected="C a multiple of groups", hint="groups divides both channel counts")
    if cw != c:
        raise ShapeError(f"the filter has {cw} input channels, the input has C = {c}", op.span,
                         found=f"w {list(tw.shape)}", expected=f"w [{c}, K/groups, *filter]",
                         hint="a transposed conv's weight is [in channels, out channels / groups, *filter]")
    for i, (op_, st, d) in enumerate(zip(op.output_padding, op.stride, op.dilation)):
        if op_ >= st and op_ >= d:
            # PyTorch's rule: output padding must be smaller than either stride or dilation
            raise ShapeError(f"output_padding {op_} of dim {i} is not smaller than its stride {st} or dilation {d}",
                             op.span, found=f"output_padding={op.output_padding}",
                             expected=f"output_padding < stride or < dilation in every dim",
                             hint="output_padding picks one of the stride's possible output sizes: use 0..stride-1")
    out_spatial = tuple(
        conv_transpose_output_size(s, f, st, p, d, o)
        for s, f, st, p, d, o in zip(spatial, filt, op.stride, op.padding, op.dilation, op.output_padding)
    )
    _need_output(op, out_spatial)
    k = kg * g
    m = n * math.prod(out_spatial)
    return ((n, k, *out_spatial), GemmDims(1, m, k, c // g * math.prod(filt)),
            "channels_last" if tx.reads_channels_last else tx.layout)


def gemm_dims(program: ir.Program, kernel: ir.Kernel, types: dict[str, TensorType] | None = None) -> GemmDims:
    """GemmDims(l, m, n, k) of a kernel; for conv the implicit GEMM: m = N*P*Q(*Z), n = K, k = C/groups*R*S(*T).
    For grouped_gemm, l is the group count and m the largest group."""
    types = types if types is not None else infer(program, upto=kernel)
    return op_output(kernel, types)[1]


def store_type(kernel: ir.Kernel, store: ir.Store, out_shape: tuple[int, ...], dims: GemmDims,
               layout: ir.Layout) -> TensorType:
    """The tensor a store writes: the full output, or a reduction vector."""
    if isinstance(store.expr, ir.Reduce):
        batched = isinstance(kernel.op, ir.GemmOp) and len(out_shape) == 3
        if store.expr.fn.startswith("row_"):
            shape = (dims.l, dims.m) if batched else (out_shape[0],) if isinstance(kernel.op, ir.GroupedGemmOp) else (dims.m,)
        else:
            shape = (dims.l, dims.n) if batched else (dims.n,)
        return TensorType(dtype=store.dtype, shape=shape, layout="contiguous")
    return TensorType(dtype=store.dtype, shape=out_shape, layout=layout)


def slice_totals(program: ir.Program) -> dict[str, int]:
    """Name -> channel count of every tensor filled by slice stores (``store y[a:b]``): the largest end."""
    totals: dict[str, int] = {}
    for name, (_, end), _ in slice_writes(program):
        totals[name] = max(totals.get(name, 0), end)
    return totals


def slice_writes(program: ir.Program) -> list[tuple[str, tuple[int, int], ir.Span | None]]:
    """(tensor, channels, where) of every slice store and torch step writing into a slice, in program order."""
    writes = []
    for step in program.steps:
        if isinstance(step, ir.Kernel | ir.RowKernel):
            writes += [(s.name, s.channels, s.span) for s in step.stores if s.channels is not None]
        elif step.channels is not None:
            writes.append((step.outputs[0], step.channels, step.span))
    return writes


def channel_dim(t: TensorType) -> int:
    """The dim a channel slice ``y[a:b]`` cuts: dim 1 of a channels-last tensor, else the last."""
    return 1 if t.layout == "channels_last" and len(t.shape) >= 3 else len(t.shape) - 1


def sliced_type(t: TensorType, total: int, conv: bool) -> TensorType:
    """The tensor a slice store writes into: the writer's output ``t`` with ``total`` channels (a conv's dim 1,
    a GEMM's last dim)."""
    shape = list(t.shape)
    shape[1 if conv else -1] = total
    return TensorType(dtype=t.dtype, shape=tuple(shape), layout=t.layout)


def output_rows(kernel: ir.Kernel, out_shape: tuple[int, ...]) -> int:
    """The rows of a kernel's output as its epilogue sees them: M (times L), or N·P·Q for a conv."""
    if isinstance(kernel.op, ir.ConvOp):
        return math.prod(out_shape) // out_shape[1]
    return math.prod(out_shape) // out_shape[-1]


def declared_types(program: ir.Program) -> dict[str, TensorType]:
    """The type of every declared input and param."""
    return {d.name: TensorType(dtype=d.dtype, shape=d.shape, layout=d.layout) for d in program.decls}


def torch_step_types(step: ir.TorchStep, types: dict[str, TensorType],
                     totals: dict[str, int] | None = None) -> dict[str, TensorType]:
    """The types of a torch step's outputs (raises ShapeError when the step fails on its inputs). A step writing
    into channels of a tensor (``torch y[a:b] = ...``) gives y's type: its first writer's with ``totals[y]`` channels."""
    from dsl_compiler import torch_steps  # torch is only needed for torch steps

    inferred = dict(zip(step.outputs, torch_steps.infer(step, types)))
    if step.channels is None:
        return inferred
    name = step.outputs[0]
    t = inferred[name]
    width = t.shape[channel_dim(t)] if t.shape else 0
    if width != step.channels[1] - step.channels[0]:
        raise ShapeError(f"torch {name}[{step.channels[0]}:{step.channels[1]}] names {step.channels[1] - step.channels[0]} "
                         f"channels; {step.fn} gives {width}", step.span, found=str(list(t.shape)),
                         expected=f"{step.channels[1] - step.channels[0]} channels in dim {channel_dim(t)}",
                         hint="a slice holds all of the step's channels", code="shape-mismatch")
    if name in types:
        return {name: types[name]}
    total = (totals or {}).get(name, step.channels[1])
    return {name: sliced_type(t, total, conv=channel_dim(t) == 1)}


def infer(program: ir.Program, upto: ir.Kernel | ir.TorchStep | None = None) -> dict[str, TensorType]:
    """The type of every declared tensor, every store and every torch-step output, in program order.

    Raises ShapeError at the first step whose shapes do not work out (``checks`` turns it into a
    Diagnostic). ``upto`` stops before that step (and includes what it can see)."""
    types = declared_types(program)
    totals = slice_totals(program)
    for step in program.steps:
        if upto is not None and step is upto:
            break
        if isinstance(step, ir.RowKernel):
            types.update(row_ops.store_types(step, types))
        elif isinstance(step, ir.Kernel):
            out_shape, dims, layout = op_output(step, types)
            for store in step.stores:
                t = store_type(step, store, out_shape, dims, layout)
                if store.channels is not None:  # the first writer gives the shape; later ones fill their channels
                    t = types.get(store.name) or sliced_type(t, totals[store.name], isinstance(step.op, ir.ConvOp))
                types[store.name] = t
        else:
            types.update(torch_step_types(step, types, totals))
    return types
