"""The grouping pass: which GEMM and conv nodes become kernels, and which element-wise and reduction nodes after
them become their epilogues. One walk over the nodes in order, since each decision reads the ones before it: a
kernel anchor's transposed operands are folded into ``^T`` reads; a BatchNorm after a kernel is folded into it
(passes.folding); an element-wise node joins the group of its operand, a reduction over the last dim of a 2-D
GEMM output becomes a row reduction, a scalar op on a fused reduction folds into it; the rest stays PyTorch."""

from __future__ import annotations

from dsl_compiler.frontend.graph import KernelGroup, LoweringSettings, OpGraph
from dsl_compiler.frontend.normalize import TRANSPOSES, Op
from dsl_compiler.frontend.passes.folding import try_fold_batch_norm
from dsl_compiler.frontend.passes.naming import kernel_base
from dsl_compiler.frontend.passes.padding import gemm_padding
from dsl_compiler.frontend.reference import ParamRef


def group_kernels(graph: OpGraph, settings: LoweringSettings) -> None:
    """Form ``graph.groups``: every node's op is left a kernel anchor, a member of a group, an alias (folded) or a
    PyTorch op with the reason it is one."""
    demoted = set(settings.options.demote)
    for node in graph.nodes:
        op = graph.ops[node]
        if op.kind in ("gemm", "conv"):
            _anchor(graph, settings, node, op, demoted)
        elif op.kind == "batch_norm":
            why = try_fold_batch_norm(graph, settings, node)
            if why:
                op.kind, op.reason = "torch", f"{op.target} is not folded into a kernel: {why}"
        elif op.kind in ("ew", "reduce"):
            _fuse_or_leave(graph, settings, node, op)
        elif op.kind == "getitem":
            src = graph.resolve(op.operands[0])
            if src in graph.member_of and src in graph.member_of[src].reduces and op.index == 0:
                op.kind, op.operands = "alias", [src]  # values of a fused torch.max(x, dim)
    # aliases created by folding a scalar into a reduction
    for node, red in graph.aliases_to_reduce.items():
        graph.ops[node].kind, graph.ops[node].operands = "alias", [red]


def _anchor(graph: OpGraph, settings: LoweringSettings, node, op: Op, demoted: set[str]) -> None:
    why = check_gemm(graph, op) if op.kind == "gemm" else check_conv(graph, op)
    if not why and kernel_base(node) in demoted:
        why = settings.why.get(kernel_base(node), "demoted to PyTorch after a failed check or build")
    if why:
        op.kind, op.reason = "torch", why
        return
    group = KernelGroup(anchor=node, kernel_name=kernel_base(node))
    graph.groups.append(group)
    graph.member_of[node] = group


def _fuse_or_leave(graph: OpGraph, settings: LoweringSettings, node, op: Op) -> None:
    why = try_fuse(graph, settings, node)
    if why and op.kind == "ew" and fold_after_reduce(graph, node):
        return
    if why:
        op.reason = why
        if op.kind == "reduce":
            reduce_to_torch(graph, node, op)
        op.kind = "torch"


# ---------------------------------------------------------------------------------------------
# Kernel anchors


def check_gemm(graph: OpGraph, op: Op) -> str:
    """Why this gemm cannot be a kernel ('' when it can); folds transposes and layouts."""
    a, b = (graph.resolve(x) for x in op.operands)
    # fold an explicit transpose of an operand into its ^T read
    a, a_t = fold_transpose(graph, a, op.a_t)
    b, b_t = fold_transpose(graph, b, op.b_t)
    sa, sb = graph.shape_of(a), graph.shape_of(b)
    if sa is None or sb is None:
        return "an operand is not a tensor"
    if graph.dtype_of(a) is None or graph.dtype_of(a) != graph.dtype_of(b):
        return "operands of different or unsupported element types"
    if len(sb) != 2 and len(sb) != len(sa):
        return f"operand shapes {list(sa)} x {list(sb)} are not a GEMM, batched GEMM or shared-B batched GEMM"
    if len(sa) < 2:
        return "a matrix-vector product with a 1-D operand"
    if len(sa) > 3:
        if len(sb) == len(sa) and sa[:-2] == sb[:-2]:
            op.flatten_batch = True  # attention's [B, H, S, D] products: a batched GEMM over B*H
        elif len(sb) != 2 or a_t:
            return f"a rank-{len(sa)} batched product"
        else:
            op.flatten_a = True
    if len(sa) == 3 and len(sb) == 3 and sa[0] != sb[0]:
        return "batched operands with broadcast batch dims"
    op.operands, op.a_t, op.b_t = [a, b], a_t, b_t
    return ""


def fold_transpose(graph: OpGraph, x, transposed: bool):
    """(the value read, whether it is read transposed): a transpose of the last two dims becomes a ``^T`` read."""
    op = graph.ops.get(x)
    if op is None or op.name not in TRANSPOSES:
        return x, transposed
    shape = graph.shape_of(x)
    if shape is None or len(shape) < 2:
        return x, transposed
    rank = len(shape)
    args = op.node.args
    swaps_last_two = False
    if op.name in ("t", "T", "mT") and (rank == 2 or op.name == "mT"):
        swaps_last_two = True
    elif op.name in ("transpose", "swapaxes", "swapdims") and len(args) >= 3:
        d0, d1 = sorted(int(d) % rank for d in args[1:3])
        swaps_last_two = (d0, d1) == (rank - 2, rank - 1)
    elif op.name == "permute":
        perm = args[1:] if len(args) > 2 or not isinstance(args[1], (list, tuple)) else args[1]
        perm = [int(p) % rank for p in perm]
        swaps_last_two = perm == list(range(rank - 2)) + [rank - 1, rank - 2]
    if not swaps_last_two:
        return x, transposed
    return graph.resolve(op.node.args[0]), not transposed


def check_conv(graph: OpGraph, op: Op) -> str:
    """Why this conv cannot be a kernel ('' when it can); its string padding made numbers."""
    x, w = (graph.resolve(v) for v in op.operands)
    sx, sw = graph.shape_of(x), graph.shape_of(w)
    if sx is None or sw is None:
        return "an operand is not a tensor"
    dims = op.conv["dims"]
    if len(sx) != dims + 2:
        return f"an unbatched conv{dims}d input"
    if op.conv.get("transposed"):
        return _check_conv_transpose(graph, op, x, w, sw)
    padding = op.conv["padding"]
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0,) * dims
        else:  # "same" with stride 1: symmetric padding when the dilated filter is odd
            total = [op.conv["dilation"][i] * (sw[2 + i] - 1) for i in range(dims)]
            if any(t % 2 for t in total):
                return "padding='same' with an even filter (asymmetric padding)"
            padding = tuple(t // 2 for t in total)
    op.conv = {**op.conv, "padding": tuple(padding)}
    if graph.dtype_of(x) is None or graph.dtype_of(x) != graph.dtype_of(w):
        return "operands of different or unsupported element types"
    op.operands = [x, w]
    return ""


def _check_conv_transpose(graph: OpGraph, op: Op, x, w, sw) -> str:
    """Why this transposed conv cannot be a kernel ('' when it can). Its kernels (passes.kernels) run it at unit
    stride over a zero-inserted input: sm_90 dgrad in 16-bit math, a forward conv over the flipped filter in tf32,
    whose padding dilation·(filter - 1) - padding must not be negative."""
    c = op.conv
    if c["groups"] != 1:
        return f"a grouped transposed conv (groups={c['groups']}): CUTLASS's sm_90 dgrad takes one group"
    if any(p > d * (f - 1) for p, d, f in zip(c["padding"], c["dilation"], sw[2:])):
        return "a transposed conv whose padding exceeds dilation·(filter - 1) (its output is a crop)"
    if graph.dtype_of(x) is None or graph.dtype_of(x) != graph.dtype_of(w):
        return "operands of different or unsupported element types"
    op.operands = [x, w]
    return ""


# ---------------------------------------------------------------------------------------------
# Epilogue fusion


def try_fuse(graph: OpGraph, settings: LoweringSettings, node) -> str:
    """Fuse an elementwise / reduce node into the group of its operand; '' on success, else why not."""
    import torch.fx

    op, options = graph.ops[node], settings.options
    tensor_ops = [graph.resolve(o) for o in op.operands if isinstance(o, (torch.fx.Node, ParamRef))]
    groups = {id(g): g for g in (graph.group_of(o) for o in tensor_ops) if g is not None}
    if not groups:
        return "its inputs do not come from a kernel"
    if len(groups) > 1:
        return "it combines the outputs of two kernels"
    (group,) = groups.values()
    if options.fuse == "none" or group.kernel_name in options.unfuse:
        return settings.why.get(group.kernel_name, "epilogue fusion is off for this kernel")
    if options.fuse == "bias":
        return "epilogue fusion is limited to the bias"
    if any(o in group.reduces for o in tensor_ops):
        return "it reads a reduction, which ends the epilogue"
    out_shape = graph.shape_of(group.anchor)
    if op.kind == "reduce":
        return try_fuse_reduce(graph, settings, node, op, group, out_shape)
    if graph.shape_of(node) != out_shape:
        return f"it broadcasts the kernel output {list(out_shape)} to {list(graph.shape_of(node) or ())}"
    if graph.dtype_of(node) is None:
        return "unsupported element type"
    why = _operands_limit(graph, group, tensor_ops) or grouped_conv_epilogue_limit(graph, group, tensor_ops)
    if why:
        return why
    group.members.append(node)
    graph.member_of[node] = group
    return ""


def _operands_limit(graph: OpGraph, group: KernelGroup, tensor_ops) -> str:
    """Why the node's other operands cannot be read by the group's epilogue ('' when they can)."""
    anchor = graph.ops[group.anchor]
    for o in tensor_ops:
        if graph.group_of(o) is group:
            continue
        index = graph.bias_index(group, o)
        if index is None:
            return f"operand {getattr(o, 'name', o)} of shape {list(graph.shape_of(o) or ())} does not broadcast as a row, column, scalar or same-shape tensor"
        if index in ("full", "row") and (anchor.flatten_a or anchor.flatten_batch):
            return "the kernel reads a flattened view of its input; only row-broadcast operands fuse"
        if graph.depends_on(o, group):
            return f"operand {o.name} is computed from this kernel's output"
    return ""


def grouped_conv_epilogue_limit(graph: OpGraph, group: KernelGroup, tensor_ops) -> str:
    """Why a grouped / depthwise conv's epilogue cannot take these operands ('' when it can): CUTLASS's
    kernels for them (dsl_compiler.cutlass.grouped_conv) read at most one tensor, through their source
    operand: the conv's bias, a per-channel vector or a residual."""
    import torch.fx

    anchor = graph.ops[group.anchor]
    if anchor.kind != "conv" or int(anchor.conv.get("groups", 1)) == 1:
        return ""
    reads = set()
    for o in [anchor.bias] + [o for m in group.members for o in graph.ops[m].operands] + list(tensor_ops):
        if isinstance(o, (torch.fx.Node, ParamRef)):
            r = graph.resolve(o) if isinstance(o, torch.fx.Node) else o
            if graph.group_of(r) is not group:
                reads.add(r)
    new = [o for o in tensor_ops if graph.group_of(o) is not group]
    if any(graph.bias_index(group, o) == "scalar" for o in new):
        return "a grouped / depthwise conv epilogue reads no one-element tensors"
    if len(reads) > 1:
        return "a grouped / depthwise conv epilogue reads one tensor (a bias or a residual)"
    return ""


def try_fuse_reduce(graph: OpGraph, settings: LoweringSettings, node, op: Op, group: KernelGroup, out_shape) -> str:
    if not settings.options.reductions:
        return "reductions are off"
    if graph.ops[group.anchor].kind != "gemm" or len(out_shape) != 2:
        return "reductions are fused only into 2-D GEMM outputs"
    if gemm_padding(graph, settings, graph.ops[group.anchor])[1]:
        return "N is padded to 16 bytes for the kernel: a fused reduction would sum the padded columns"
    dim = op.dim % len(out_shape)
    if dim != len(out_shape) - 1:
        return "only reductions over the last dim (rows) are fused"
    if op.node.target in ("max", "min") or op.name in ("max", "min"):
        # torch.max(x, dim) returns (values, indices): the indices cannot be fused
        for u in node.users:
            if graph.ops[u].kind != "getitem" or graph.ops[u].index != 0:
                return "it uses the argmax/argmin indices"
    group.members.append(node)
    group.reduces.add(node)
    graph.member_of[node] = group
    if op.fn == "mean":
        op.scale = 1.0 / out_shape[dim]
    return ""


def fold_after_reduce(graph: OpGraph, node) -> bool:
    """A scalar op on a fused reduction folds into it: sum(x)*c = sum(x*c), max(x)+c = max(x+c)."""
    import torch.fx

    op = graph.ops[node]
    if op.kind != "ew" or op.fn not in ("mul", "div", "add", "sub") or len(op.operands) != 2:
        return False
    red = [graph.resolve(o) for o in op.operands if isinstance(o, torch.fx.Node)]
    consts = [o for o in op.operands if isinstance(o, (int, float)) and not isinstance(o, bool)]
    if len(red) != 1 or len(consts) != 1:
        return False
    target = red[0]
    if graph.ops[target].kind == "getitem":
        target = graph.resolve(graph.ops[target].operands[0])
    group = graph.member_of.get(target)
    if group is None or target not in group.reduces or len(graph.users(red[0])) != 1:
        return False
    rop, c = graph.ops[target], float(consts[0])
    lhs_is_red = isinstance(op.operands[0], torch.fx.Node)
    is_sum = rop.fn in ("sum", "mean")
    if op.fn == "mul" or (op.fn == "div" and lhs_is_red):
        factor = c if op.fn == "mul" else 1.0 / c
        if not is_sum and factor <= 0:
            return False
        rop.scale *= factor
        rop.shift *= factor
    elif op.fn in ("add", "sub") and not is_sum and (lhs_is_red or op.fn == "add"):
        rop.shift += c if op.fn == "add" else -c
    else:
        return False
    graph.aliases_to_reduce[node] = red[0]
    op.kind, op.operands = "alias", [red[0]]
    return True


def reduce_to_torch(graph: OpGraph, node, op: Op) -> None:
    """A reduction left to PyTorch, spelled as a whitelisted step."""
    if op.fn in ("max", "min"):
        getitems = [u for u in node.users if graph.ops[u].kind == "getitem"]
        if op.index == 1 and len(getitems) != len(node.users):
            return
        if op.index == 1 and any(graph.ops[u].index != 0 for u in getitems):
            op.reason += "; its argmax/argmin indices are used"
            return
        for u in getitems:
            graph.ops[u].kind, graph.ops[u].operands = "alias", [node]
        op.torch_fn = "amax" if op.fn == "max" else "amin"
        op.torch_args, op.torch_kwargs = [op.operands[0]], {"dim": op.dim, "keepdim": op.keepdim}
