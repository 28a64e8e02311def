"""The folding pass: a BatchNorm after a GEMM or conv kernel folded into that kernel's weights and bias.

With running statistics (eval mode) the kernel reads the filter and bias rescaled by a ``fold_batch_norm`` step.
With the batch's statistics (training mode) they exist only once the whole output does: a first pass of the kernel
stores the raw output, a ``var_mean`` step reduces it per channel, and the kernel runs again on the folded filter,
so the normalisation and whatever follows (activation, residual add) are its epilogue. That second pass pays where
the kernel is memory-bound and its input is not much larger than its output; elsewhere the PyTorch step is cheaper.

``try_fold_batch_norm`` decides during the grouping walk; ``emit_folded_batch_norm`` writes the steps when the
kernel is emitted.
"""

from __future__ import annotations

import math
from typing import Any

from dsl_compiler.frontend.graph import KernelGroup, LoweringSettings, OpGraph
from dsl_compiler.frontend.passes.padding import conv_padding, gemm_padding
from dsl_compiler.frontend.passes.precision import kernel_math
from dsl_compiler.ir import Acc, Binary, ConvOp, Kernel, KernelConfig, Kwarg, LiteralArg, Operand, Ref, Store, TensorArg, TorchStep

# Reachable TF32 tensor-core FLOPs per byte of HBM traffic on an H100/H200 (about 400 TFLOP/s over about
# 4.5 TB/s); a depthwise conv multiplies on SIMT cores (about 50 TFLOP/s fp32).
RIDGE_FLOP_PER_BYTE = {"tensor": 90.0, "simt": 11.0}
# The second pass launches about five more kernels than the PyTorch step (var_mean, the fold's few tiny
# ones, the pass itself): some 10 us, as much time as moving 45 MB.
SECOND_PASS_FIXED_BYTES = 45e6


def try_fold_batch_norm(graph: OpGraph, settings: LoweringSettings, node) -> str:
    """Fold a BatchNorm into the kernel that computes its input ('' on success, else why not)."""
    op, options = graph.ops[node], settings.options
    if options.batch_norm == "step":
        return "BatchNorm folding is off"
    x = graph.resolve(op.operands[0])
    group = graph.member_of.get(x)
    if group is None or x is not group.anchor:
        return "its input is not the output of a GEMM or conv kernel" if group is None else \
            "its input is an epilogue result, not the kernel's raw output"
    if options.fuse != "all" or group.kernel_name in options.unfuse:
        return settings.why.get(group.kernel_name, "epilogue fusion is off for this kernel")
    stats_name = f"{group.kernel_name}_stats"
    if stats_name in options.unfuse or stats_name in options.demote:
        return settings.why.get(stats_name, "the kernel's statistics pass failed its checks")
    why = _kernel_limit(graph, settings, node, x, group)
    if why:
        return why
    group.batch_norm = node
    op.kind, op.operands = "alias", [x]
    return ""


def _kernel_limit(graph: OpGraph, settings: LoweringSettings, node, x, group: KernelGroup) -> str:
    """Why the kernel computing x cannot take the BatchNorm at ``node`` into its weights ('' when it can)."""
    import torch.fx

    anchor, bn = graph.ops[x], graph.ops[node].batch_norm
    if group.members or graph.users(x) != [node]:
        return "the kernel's raw output has other readers"
    if anchor.alpha != 1.0 or anchor.beta != 1.0 or anchor.flatten_a or anchor.flatten_batch:
        return "the kernel scales its product or reads a flattened view"
    out = graph.shape_of(x)
    if anchor.kind == "conv" and anchor.conv.get("transposed"):
        return "BatchNorm after a transposed conv (not folded into its filter)"
    if anchor.kind == "gemm" and len(out) != 2:
        return "BatchNorm over a batched GEMM's output"
    w = anchor.operands[1]
    if not graph.is_param(w) or (anchor.bias is not None and not graph.is_param(anchor.bias)):
        return "the kernel's weight or bias is computed, not a model tensor"
    if anchor.bias is not None and graph.shape_of(anchor.bias) != (out[1],):
        return "the kernel's bias is not one value per channel"
    grown = conv_padding(graph, settings, anchor)[1] if anchor.kind == "conv" else sum(gemm_padding(graph, settings, anchor)[:2])
    if grown:
        return "the kernel pads its output channels to 16 bytes (the statistics would count the padding)"
    if any(isinstance(bn[k], torch.fx.Node) and graph.depends_on(bn[k], group) for k in ("weight", "bias", "mean", "var")):
        return "its scale or statistics are computed from the kernel's output"
    if bn["batch_stats"] and settings.options.batch_norm == "auto" and not second_pass_pays(graph, settings, x, node):
        return ("batch statistics exist only once the whole output does, and a second pass of this kernel "
                "(compute-bound, or reading more than it writes) costs more than the PyTorch step")
    return ""


def second_pass_pays(graph: OpGraph, settings: LoweringSettings, x, bn_node) -> bool:
    """Whether statistics + a second pass of x's kernel beat the PyTorch BatchNorm step (which reads the
    output twice and writes it, and an activation after it reads and writes it again). Times in bytes."""
    anchor = graph.ops[x]
    out = graph.shape_of(x)
    a = graph.shape_of(anchor.operands[0])
    elt = 2 if settings.half_math else 4
    out_bytes, in_bytes = 4 * math.prod(out), elt * math.prod(a)
    if anchor.kind == "conv":
        w = graph.shape_of(anchor.operands[1])
        flops = 2.0 * math.prod(out) * math.prod(w[1:])
        ridge = RIDGE_FLOP_PER_BYTE["simt" if graph.is_depthwise(anchor) else "tensor"]
    else:
        flops = 2.0 * math.prod(out) * a[-1]
        ridge = RIDGE_FLOP_PER_BYTE["tensor"]
    users = graph.users(bn_node)
    activation = len(users) == 1 and graph.ops[users[0]].kind == "ew"
    torch_bytes = (5 if activation else 3) * out_bytes
    second_pass = max(flops / ridge, in_bytes + out_bytes) + out_bytes  # and var_mean's read
    return second_pass + SECOND_PASS_FIXED_BYTES < torch_bytes


def emit_folded_batch_norm(b: Any, group: KernelGroup, op_ir):
    """The kernel's op reading its filter with group.batch_norm folded in, and the folded bias to add (``Ref``);
    with batch statistics, first the statistics pass and its ``var_mean`` step. ``b``: the ProgramBuilder."""
    graph = b.graph
    anchor_op, bn_node = graph.ops[group.anchor], group.batch_norm
    bn = graph.ops[bn_node].batch_norm
    kname = group.kernel_name
    conv = isinstance(op_ir, ConvOp)
    w_name = op_ir.w.name if conv else op_ir.b.name
    bias_name = b.value(anchor_op.bias) if anchor_op.bias is not None else None
    if bn["batch_stats"]:
        mean, var = _statistics_pass(b, group, op_ir, bias_name)
    else:
        mean, var = b.value(bn["mean"]), b.value(bn["var"])
    args = [TensorArg(name=n) if n is not None else LiteralArg(value=None)
            for n in (w_name, mean, var, *(b.value(bn[k]) if bn[k] is not None else None for k in ("weight", "bias")), bias_name)]
    w2, shift = b.namer(f"{w_name}_bn"), b.namer(f"{bn_node.name}_shift")
    dim = 0 if conv or op_ir.b.transpose else 1  # the output channels of a filter [K, C, ...], of w [N, K] or [K, N]
    b.steps.append(TorchStep(outputs=(w2, shift), fn="fold_batch_norm", args=tuple(args),
                             kwargs=(Kwarg(key="eps", value=bn["eps"]), Kwarg(key="dim", value=dim))))
    stats = (f"; the batch statistics from a first pass ({b.steps[-3].name}) and a var_mean step"
             if bn["batch_stats"] else "")
    graph.cover(bn_node, "folded", where=kname, reason=f"BatchNorm folded into the kernel's weights and bias{stats}")
    b.emitted.add(bn_node)
    if conv:
        op_ir = op_ir.model_copy(update={"w": Operand(name=w2)})
    else:
        op_ir = op_ir.model_copy(update={"b": Operand(name=w2, transpose=op_ir.b.transpose)})
    return op_ir, Ref(name=shift, index="col")


def _statistics_pass(b: Any, group: KernelGroup, op_ir, bias_name: str | None) -> tuple[str, str]:
    """The kernel's first pass storing its raw output, and the per-channel ``var_mean`` of it: (mean, var) names."""
    graph = b.graph
    anchor_op, bn_node = graph.ops[group.anchor], group.batch_norm
    conv = isinstance(op_ir, ConvOp)
    raw = b.namer(f"{group.kernel_name}_raw")
    expr = Acc() if bias_name is None else Binary(fn="add", lhs=Acc(), rhs=Ref(name=bias_name, index="col"))
    dtype = graph.dtype_of(group.anchor) or "f32"
    math_mode = kernel_math(graph, b.settings, anchor_op, dtype)
    b.steps.append(Kernel(name=b.namer(f"{group.kernel_name}_stats"), op=op_ir, config=KernelConfig(math=math_mode),
                          stores=(Store(name=raw, dtype=dtype, expr=expr),)))
    if conv:
        b.cl_tensors.add(raw)
    rank = len(graph.shape_of(group.anchor))
    var, mean = b.namer(f"{bn_node.name}_var"), b.namer(f"{bn_node.name}_mean")
    b.steps.append(TorchStep(outputs=(var, mean), fn="var_mean", args=(TensorArg(name=raw),),
                             kwargs=(Kwarg(key="dim", value=(0, *range(2, rank))), Kwarg(key="correction", value=0))))
    return mean, var
