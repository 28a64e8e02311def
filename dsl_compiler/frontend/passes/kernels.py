"""Emitting a kernel group: its operands prepared as planned (math, padding, layout), the kernel with its epilogue
(the fused nodes as one expression per store; a value read more than once a ``let``), and its outputs shaped back
(padded rows and channels cut, flattened views reshaped, keepdim reductions unsqueezed)."""

from __future__ import annotations

import math
from typing import Any

from dsl_compiler.frontend.graph import KernelGroup
from dsl_compiler.frontend.normalize import TRANSPOSES, Op
from dsl_compiler.frontend.passes.emission import ProgramBuilder
from dsl_compiler.frontend.passes.folding import emit_folded_batch_norm
from dsl_compiler.frontend.passes.padding import TMA_BYTES, KernelPadding, alignment, element_bytes, epilogue_padding, gemm_shapes
from dsl_compiler.frontend.reference import ParamRef
from dsl_compiler.ir import (
    Acc, Binary, Const, ConvOp, ConvTransposeOp, GemmOp, Kernel, KernelConfig, Kwarg, Let, LiteralArg, Operand, ParamCall,
    Reduce, Ref, Store, TensorArg, TorchStep, Unary,
)

_REDUCE_FN = {"sum": "row_sum", "mean": "row_sum", "max": "row_max", "min": "row_min"}


def emit_group(b: ProgramBuilder, group: KernelGroup) -> None:
    """The group's kernel, with the steps that prepare its operands before it and shape its outputs after it."""
    if group.anchor in b.emitted:
        return
    b.emitted.add(group.anchor)
    b.emitted.update(group.members)
    anchor_op = b.graph.ops[group.anchor]
    gemm_1x1 = conv_as_gemm(b, group, group.plan.math.half)
    pad = KernelPadding() if gemm_1x1 else group.plan.padding
    if anchor_op.kind == "gemm":
        op_ir = _gemm_operands(b, group, anchor_op, pad)
    elif gemm_1x1:
        op_ir = conv_gemm_operands(b, anchor_op, group.plan.math.half, gemm_1x1)
    else:
        op_ir = _conv_operands(b, anchor_op, group.plan.math.half, pad)
    folded_bias = None
    if group.batch_norm is not None:
        op_ir, folded_bias = emit_folded_batch_norm(b, group, op_ir)
    externals = _epilogue_inputs(b, group, pad)
    bias_ref = folded_bias
    if anchor_op.bias is not None and folded_bias is None:
        bias_ref = _bias(b, group, anchor_op, gemm_1x1, pad)
        if bias_ref is None:
            return
    written = _epilogue(b, group, anchor_op, externals, bias_ref)
    if written is None:
        return
    lets, stores = written
    b.steps.append(Kernel(name=group.kernel_name, op=op_ir, config=KernelConfig(math=group.plan.math.math),
                          lets=tuple(lets), stores=tuple(stores)))
    _shape_outputs(b, group, anchor_op, stores, gemm_1x1, pad)
    _cover_group(b, group)


# ---------------------------------------------------------------------------------------------
# Operands


def _gemm_operands(b: ProgramBuilder, group: KernelGroup, anchor_op: Op, pad: KernelPadding) -> GemmOp:
    """A and B as the kernel reads them: 16-bit, zero-padded (a flattened operand after its reshape), and with
    ``kmajor`` transposing copies where the target's tf32 MMA wants them."""
    graph, half = b.graph, group.plan.math.half
    a, w = anchor_op.operands
    a_t, b_t = anchor_op.a_t, anchor_op.b_t
    d_m, d_n, d_k = pad.d_m, pad.d_n, pad.d_k
    shapes = gemm_shapes(graph, anchor_op)
    flat = anchor_op.flatten_a or anchor_op.flatten_batch
    a_extra = b_extra = None
    if shapes is not None and (d_m or d_n or d_k):
        sa, sb = shapes
        a_extra = (0,) * (len(sa) - 2) + ((d_k, d_m) if a_t else (d_m, d_k))
        b_extra = (0,) * (len(sb) - 2) + ((d_n, d_k) if b_t else (d_k, d_n))
    a_name = b.operand(a, half, extra=None if flat else a_extra)
    b_name = b.operand(w, half, extra=None if anchor_op.flatten_batch else b_extra)
    if a_name and anchor_op.flatten_a:
        a_name = b.reshape(a_name, f"{a_name}_2d", (-1, graph.shape_of(a)[-1]))
    if anchor_op.flatten_batch and a_name and b_name:
        a_name = b.reshape(a_name, f"{a_name}_3d", (-1,) + tuple(graph.shape_of(a)[-2:]))
        b_name = b.pad_step(b.reshape(b_name, f"{b_name}_3d", (-1,) + tuple(graph.shape_of(w)[-2:])), b_extra)
    if flat and a_name:
        a_name = b.pad_step(a_name, a_extra)
    if group.plan.math.kmajor:
        # the target's tf32 wgmma reads both operands K-major: A as [M, K], B as [N, K] (written b^T)
        if a_t and a_name:
            a_name, a_t = b.k_major_copy(a_name), False
        if not b_t and b_name:
            b_name, b_t = b.k_major_copy(b_name), True
    return GemmOp(a=Operand(name=a_name or "?", transpose=a_t), b=Operand(name=b_name or "?", transpose=b_t))


def _conv_operands(b: ProgramBuilder, anchor_op: Op, half: str | None, pad: KernelPadding) -> ConvOp:
    """The activation NHWC and the filter KRSC, in the kernel's type, their channels zero-padded."""
    if anchor_op.conv.get("transposed"):
        return _conv_transpose_operands(b, anchor_op, half, pad)
    x, w = anchor_op.operands
    d_c, d_kc = pad.d_c, pad.d_kc
    x_name = b.conv_input(x, half, d_c)
    w_extra = (d_kc, d_c) + (0,) * (len(b.graph.shape_of(w)) - 2) if (d_c or d_kc) else None
    w_name = b.operand(w, half, layout="channels_last", extra=w_extra)
    c = anchor_op.conv
    return ConvOp(spatial_dims=c["dims"], x=Operand(name=x_name or "?"), w=Operand(name=w_name or "?"),
                  stride=tuple(c["stride"]), padding=tuple(c["padding"]), dilation=tuple(c["dilation"]), groups=c["groups"])


def _conv_transpose_operands(b: ProgramBuilder, anchor_op: Op, half: str | None, pad: KernelPadding) -> ConvOp:
    """A transposed conv at unit stride over its zero-inserted input (sm_90's conv kernels walk their input at unit
    stride). 16-bit math runs dgrad over the filter as stored ([C, *filter, K] channels-last is CUTLASS's KRSC); tf32,
    whose MMA cannot read dgrad's filter (N-major), runs a forward conv over the flipped filter [K, C, *filter],
    made by one step per call, with padding dilation·(filter - 1) - padding: the same sums."""
    x, w = anchor_op.operands
    c = anchor_op.conv
    dims = c["dims"]
    x_name = b.conv_input(x, half, pad.d_c)
    w_extra = (pad.d_c, pad.d_kc) + (0,) * dims if (pad.d_c or pad.d_kc) else None
    if x_name and (any(s != 1 for s in c["stride"]) or any(c["output_padding"])):
        inserted = b.namer(f"{x_name}_zi")
        b.steps.append(TorchStep(outputs=(inserted,), fn="zero_insert", args=(TensorArg(name=x_name),), kwargs=(
            Kwarg(key="stride", value=tuple(c["stride"])), Kwarg(key="output_padding", value=tuple(c["output_padding"])))))
        b.cl_tensors.add(inserted)
        x_name = inserted
    unit = (1,) * dims
    if half is not None:
        w_name = b.operand(w, half, layout="channels_last", extra=w_extra)
        return ConvTransposeOp(spatial_dims=dims, x=Operand(name=x_name or "?"), w=Operand(name=w_name or "?"),
                               stride=unit, padding=tuple(c["padding"]), output_padding=(0,) * dims,
                               dilation=tuple(c["dilation"]))
    w_name = b.operand(w, half, extra=w_extra)
    forward = b.namer(f"{w_name}_fwd")
    b.steps.append(TorchStep(outputs=(forward,), fn="forward_filter", args=(TensorArg(name=w_name or "?"),)))
    padding = tuple(d * (f - 1) - p for d, f, p in zip(c["dilation"], b.graph.shape_of(w)[2:], c["padding"]))
    return ConvOp(spatial_dims=dims, x=Operand(name=x_name or "?"), w=Operand(name=forward), stride=unit,
                  padding=padding, dilation=tuple(c["dilation"]))


def conv_as_gemm(b: ProgramBuilder, group: KernelGroup, half: str | None) -> str | None:
    """"nchw" or "nhwc" when the group's conv is a 1x1 conv (stride 1, no padding, one group) that runs as a
    GEMM over its activation as stored: "nhwc" when a conv kernel wrote it channels-last (one GEMM over
    [N*H*W, C], K-major), else "nchw" (a batched GEMM over [N, C, H*W], read M-major). None otherwise,
    and where the epilogue reads more than the conv's bias and scalars or a padding would be needed."""
    graph = b.graph
    op = graph.ops[group.anchor]
    if (op.kind != "conv" or not b.settings.options.conv1x1_gemm or int(op.conv.get("groups", 1)) != 1
            or op.conv.get("transposed")):
        return None
    if getattr(group, "batch_norm", None) is not None:
        return None  # a folded BatchNorm's statistics pass reads the conv's [N, K, H, W] output
    x, w = op.operands
    sx, sw = graph.shape_of(x), graph.shape_of(w)
    if sx is None or sw is None or any(int(f) != 1 for f in sw[2:]):
        return None
    if any(int(v) != 1 for v in op.conv["stride"]) or any(int(v) != 0 for v in op.conv["padding"]):
        return None
    # 16 bytes: C as the filter's (and, NHWC, the activation's) contiguous extent, K as the output's
    align = alignment(half, graph.dtype_of(x))
    if graph.is_param(x) or sx[1] % align or sw[0] % (TMA_BYTES // element_bytes(graph.dtype_of(group.anchor))):
        return None
    if op.bias is not None and not (graph.is_param(op.bias) and graph.shape_of(op.bias) == (sw[0],)):
        return None
    if any(graph.bias_index(group, r) != "scalar" for r in graph.external_operands(group)):
        return None
    name = b.value(x)  # its producer first: a conv kernel writes it NHWC
    if name is not None and name in b.cl_tensors:
        return "nhwc"
    spatial = math.prod(sx[2:])
    if spatial % alignment(half, graph.dtype_of(x)):
        return None  # [N, C, H*W] read M-major: H*W is its contiguous extent
    return "nchw"


def conv_gemm_operands(b: ProgramBuilder, op: Op, half: str | None, mode: str) -> GemmOp:
    """The GEMM of a 1x1 conv: the activation reshaped as stored (no copy), the filter [K, C, 1, ...]
    declared [K, C] (a reshape when bound), read ``w^T``."""
    graph = b.graph
    x, w = op.operands
    sx, sw = graph.shape_of(x), graph.shape_of(w)
    w_name = b.declare_param_as(w, (sw[0], sw[1]), half)
    x_name = b.value(x)
    if half and graph.dtype_of(x) == "f32":
        x_name = b.cast(x_name, half)  # a cast keeps the layout (and folds into a producer's store)
    if mode == "nhwc":
        nhwc = b.namer(f"{x_name}_nhwc")
        perm = (0,) + tuple(range(2, len(sx))) + (1,)
        b.steps.append(TorchStep(outputs=(nhwc,), fn="permute", args=(TensorArg(name=x_name), LiteralArg(value=perm))))
        a = Operand(name=b.reshape(nhwc, f"{x_name}_rows", (-1, sx[1])))
    else:
        a = Operand(name=b.reshape(x_name, f"{x_name}_3d", (sx[0], sx[1], -1)), transpose=True)
    return GemmOp(a=a, b=Operand(name=w_name or "?", transpose=True))


# ---------------------------------------------------------------------------------------------
# Epilogue


def _epilogue_inputs(b: ProgramBuilder, group: KernelGroup, pad: KernelPadding) -> dict[Any, tuple[str, str]]:
    """What the fused nodes read from outside the kernel: value -> (program tensor, index), padded with the output."""
    graph = b.graph
    externals: dict[Any, tuple[str, str]] = {}
    conv = graph.ops[group.anchor].kind == "conv"
    for r in graph.external_operands(group):
        index = graph.bias_index(group, r) or "full"
        name = b.value(r, extra=epilogue_padding(graph, group, r, index, pad.d_m, pad.d_n or pad.d_kc))
        if conv and index == "full" and name is not None:
            name = b.as_channels_last(name)  # a residual must match the NHWC output
        externals[r] = (name or "?", index)
    return externals


def _bias(b: ProgramBuilder, group: KernelGroup, anchor_op: Op, gemm_1x1: str | None, pad: KernelPadding) -> Ref | None:
    """The anchor's own bias as the epilogue reads it (None: it does not broadcast, and the program failed)."""
    import torch.fx

    graph = b.graph
    bias = anchor_op.bias
    r = graph.resolve(bias) if isinstance(bias, torch.fx.Node) else bias
    index = graph.bias_index(group, r)
    if anchor_op.kind == "conv" and (gemm_1x1 or graph.shape_of(r) == (graph.shape_of(group.anchor)[1],)):
        index = "col"  # the conv's own bias: one value per output channel
    name = b.value(r, extra=epilogue_padding(graph, group, r, index, pad.d_m, pad.d_n or pad.d_kc))
    if index is None or name is None:
        b.fail(f"{group.anchor.name}: bias of shape {list(graph.shape_of(r) or ())} does not broadcast over the output")
        return None
    return Ref(name=name, index=index)


def _epilogue(b: ProgramBuilder, group: KernelGroup, anchor_op: Op, externals, bias_ref) -> tuple[list, list] | None:
    """(lets, stores) of the kernel: the anchor's scaled product and bias, then each fused node; a value read more
    than once inside the kernel is a ``let``, a value read outside it a store (None: a node failed)."""
    graph = b.graph
    members = set(group.members) | {group.anchor}
    inner_uses: dict[Any, int] = {}
    for m in group.members:
        for o in graph.ops[m].operands:
            if _is_tensor(o) and graph.resolve(o) in members:
                inner_uses[graph.resolve(o)] = inner_uses.get(graph.resolve(o), 0) + 1
    lets: list[Let] = []
    expr: dict[Any, Any] = {}

    def bind(v, e):
        if v not in group.reduces and inner_uses.get(v, 0) > 1 and not isinstance(e, (Acc, Ref, Const)):
            let_name = b.namer(f"{v.name}_v")
            lets.append(Let(name=let_name, expr=e))
            e = Ref(name=let_name, index="full")
        expr[v] = e

    bind(group.anchor, _product(anchor_op, bias_ref))
    for m in group.members:
        mop = graph.ops[m]
        if mop.kind == "reduce":
            expr[m] = _reduction(mop, expr[graph.resolve(mop.operands[0])])
            continue
        e = _elementwise(b, m, mop, members, expr, externals)
        if e is None:
            return None
        bind(m, e)
    return lets, _stores(b, group, expr, lets)


def _is_tensor(o) -> bool:
    import torch.fx

    return isinstance(o, torch.fx.Node)


def _product(anchor_op: Op, bias_ref) -> Any:
    """acc, times addmm's alpha, plus the bias (times its beta)."""
    base = Acc()
    if anchor_op.alpha != 1.0:
        base = Binary(fn="mul", lhs=base, rhs=Const(value=anchor_op.alpha))
    if bias_ref is not None:
        bterm = bias_ref if anchor_op.beta == 1.0 else Binary(fn="mul", lhs=bias_ref, rhs=Const(value=anchor_op.beta))
        base = Binary(fn="add", lhs=base, rhs=bterm)
    return base


def _reduction(mop: Op, arg) -> Reduce:
    """A fused reduction over its argument, with the scale and shift folded into it."""
    if mop.scale != 1.0:
        arg = Binary(fn="mul", lhs=arg, rhs=Const(value=mop.scale))
    if mop.shift != 0.0:
        arg = Binary(fn="add", lhs=arg, rhs=Const(value=mop.shift))
    return Reduce(fn=_REDUCE_FN[mop.fn], arg=arg)


def _elementwise(b: ProgramBuilder, m, mop: Op, members: set, expr: dict, externals: dict) -> Any:
    """A fused element-wise node as an expression over its operands (None: an operand has no program form)."""
    import torch.fx

    args = []
    for o in mop.operands:
        if isinstance(o, (torch.fx.Node, ParamRef)):
            r = b.graph.resolve(o) if isinstance(o, torch.fx.Node) else o
            if r in members:
                args.append(expr[r])
            else:
                name, index = externals[r]
                args.append(Ref(name=name, index=index))
        elif isinstance(o, (int, float)) and not isinstance(o, bool):
            args.append(Const(value=float(o)))
        else:
            b.fail(f"{m.name}: operand {o!r} is neither a tensor nor a number")
            return None
    if mop.fn in ("add", "sub", "mul", "div", "min", "max", "pow"):
        return Binary(fn=mop.fn, lhs=args[0], rhs=args[1])
    if mop.params:
        return ParamCall(fn=mop.fn, arg=args[0], params=tuple(mop.params))
    return Unary(fn=mop.fn, arg=args[0])


def _stores(b: ProgramBuilder, group: KernelGroup, expr: dict, lets: list) -> list[Store]:
    """A store for every value read outside the kernel; reductions alone get the full output CUTLASS writes."""
    graph = b.graph
    members = set(group.members) | {group.anchor}
    kname = group.kernel_name
    dtype = graph.dtype_of(group.anchor) or "f32"
    stores: list[Store] = []
    for v in [group.anchor] + group.members:
        if not any(u in b.live and (u not in members or u.op == "output") for u in graph.users(v)):
            continue
        name = b.namer(v.name if v is not group.anchor else f"{kname}_out")
        b.tensor_name[v] = name
        stores.append(Store(name=name, dtype=dtype, expr=expr[v]))
    if stores and all(isinstance(st.expr, Reduce) for st in stores):
        # the CUTLASS epilogue writes a full output alongside its reductions
        first = stores[0].expr.arg
        if not isinstance(first, (Acc, Ref)):
            let_name = b.namer(f"{kname}_v")
            lets.append(Let(name=let_name, expr=first))
            first = Ref(name=let_name, index="full")
            stores = [Store(name=st.name, dtype=st.dtype, expr=Reduce(fn=st.expr.fn, arg=first))
                      if st.expr.arg == stores[0].expr.arg else st for st in stores]
        stores.insert(0, Store(name=b.namer(f"{kname}_tile"), dtype=dtype, expr=first))
    return stores


# ---------------------------------------------------------------------------------------------
# Outputs


def _stored_value(b: ProgramBuilder, name: str):
    return next((k for k, nm in b.tensor_name.items() if nm == name), None)


def _shape_outputs(b: ProgramBuilder, group: KernelGroup, anchor_op: Op, stores: list[Store], gemm_1x1: str | None,
                   pad: KernelPadding) -> None:
    """The program reads the kernel's outputs in the traced shapes: a 1x1 conv's GEMM output as NCHW-shaped
    channels-last, the real rows and channels of a padded kernel, a flattened product in its rank, a keepdim
    reduction with its dim."""
    graph = b.graph
    out_shape = graph.shape_of(group.anchor)
    stored = {s.name: _stored_value(b, s.name) for s in stores}  # before a padding cut renames what they hold
    if gemm_1x1:
        _conv_gemm_outputs(b, stores, out_shape)
    elif anchor_op.kind == "conv":
        b.cl_tensors.update(s.name for s in stores if not isinstance(s.expr, Reduce))
    if pad.d_m or pad.d_n or pad.d_kc:
        _cut_padding(b, anchor_op, stores, len(out_shape), pad)
    if anchor_op.flatten_a or anchor_op.flatten_batch:
        for s in stores:
            v = stored[s.name]
            if v is not None:  # a padded batched product's cut named it anew: the cut is what is reshaped
                b.tensor_name[v] = b.reshape(b.tensor_name[v], f"{s.name}_nd", tuple(out_shape))
    for m in group.reduces:
        if m in b.tensor_name and graph.ops[m].keepdim:
            shaped = b.namer(f"{b.tensor_name[m]}_kd")
            b.steps.append(TorchStep(outputs=(shaped,), fn="unsqueeze", args=(TensorArg(name=b.tensor_name[m]), LiteralArg(value=-1))))
            b.tensor_name[m] = shaped


def _conv_gemm_outputs(b: ProgramBuilder, stores: list[Store], out_shape) -> None:
    """The GEMM wrote [N, H*W, K] or [N*H*W, K]: the conv's output NHWC, seen as [N, K, H, W] channels-last."""
    nhwc = (out_shape[0],) + tuple(out_shape[2:]) + (out_shape[1],)
    for s in stores:
        v = _stored_value(b, s.name)
        if v is None:
            continue
        shaped = b.reshape(s.name, f"{s.name}_nhwc", nhwc)
        logical = b.namer(f"{s.name}_cl")
        perm = (0, len(nhwc) - 1) + tuple(range(1, len(nhwc) - 1))
        b.steps.append(TorchStep(outputs=(logical,), fn="permute", args=(TensorArg(name=shaped), LiteralArg(value=perm))))
        b.tensor_name[v] = logical
        b.cl_tensors.add(logical)


def _cut_padding(b: ProgramBuilder, anchor_op: Op, stores: list[Store], rank: int, pad: KernelPadding) -> None:
    """The kernel computed padded rows / columns / channels: the program reads the real ones."""
    for s in stores:
        v = _stored_value(b, s.name)
        if v is None:
            continue
        if isinstance(s.expr, Reduce):
            cut = (-pad.d_m,)
        elif anchor_op.kind == "conv":
            cut = (0, -pad.d_kc) + (0,) * (rank - 2)
        elif anchor_op.flatten_a:
            cut = (-pad.d_m, -pad.d_n)
        else:
            cut = (0,) * (rank - 2) + (-pad.d_m, -pad.d_n)
        b.tensor_name[v] = b.pad_step(s.name, cut)


def conv_transpose_note(conv: dict, half: str | None) -> str:
    """How a transposed conv's kernel runs it, for the coverage row (the program's notes): its lowering and cost."""
    how = "sm_90 dgrad" if half else "a forward conv over the flipped filter (forward_filter: tf32 cannot read dgrad's)"
    stride = [int(s) for s in conv["stride"]]
    if any(s != 1 for s in stride) or any(conv["output_padding"]):
        factor = math.prod(stride)
        return (f"transposed conv as {how} at unit stride over a zero-inserted input (zero_insert, stride "
                f"{tuple(stride)}): {factor}x the useful MMAs, as sm_90 conv kernels have no strided dgrad")
    return f"transposed conv as {how}"


def _cover_group(b: ProgramBuilder, group: KernelGroup) -> None:
    graph, kname = b.graph, group.kernel_name
    anchor_op = graph.ops[group.anchor]
    note = (conv_transpose_note(anchor_op.conv, group.plan.math.half)
            if anchor_op.kind == "conv" and anchor_op.conv.get("transposed") else "")
    graph.cover(group.anchor, "kernel", where=kname, reason=note)
    for m in group.members:
        graph.cover(m, "reduction" if m in group.reduces else "epilogue", where=kname)
    for n_, red in graph.aliases_to_reduce.items():
        if graph.resolve(red) in group.reduces:
            graph.cover(n_, "epilogue", where=kname, reason="")
    for x in graph.nodes:
        xop = graph.ops[x]
        if xop.name in TRANSPOSES and x not in graph.coverage and all(
                graph.member_of.get(u) is group and u is group.anchor for u in graph.users(x)):
            graph.cover(x, "folded", where=kname, reason="transpose read as an operand ^T")
            b.emitted.add(x)
