"""Row kernels: a reduction, softmax, normalization or scan over one dim (or adjacent dims) of a tensor, or a pool
over its spatial dims, with an element-wise tail in the epilogue language. Everything the readers share about
them lives here: the function table, the [outer, R, inner] view, output shapes, the checks, the interpreter's
exact semantics, the knobs the compiler picks when left at auto, and their FLOPs and bytes.

x is seen as [outer, R, inner]: R the product of the reduced dims, inner what follows them. inner == 1 is a
contiguous row (a CTA's threads share a row); inner > 1 is a strided segment (a thread per column of inner,
coalesced across threads). These kernels are memory-bound: their bound is bytes / bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from dsl_compiler import ir
from dsl_compiler.tensor_types import ShapeError

RowKind = Literal["reduce", "softmax", "norm", "scan", "pool"]


@dataclass(frozen=True)
class RowFn:
    """One row function: its family, its FLOPs per input element, its PyTorch names, and (reductions) the
    identity and the C++ combine of two partial values ``a``, ``b`` (the emitter's)."""

    name: str
    kind: RowKind
    flops: float
    torch: tuple[str, ...]
    identity: str = "0.f"
    combine: str = "a + b"
    index: bool = False  # gives the position (argmax, argmin): stores are i64, the tail is `acc`


ROW_FNS: dict[str, RowFn] = {f.name: f for f in (
    RowFn("sum", "reduce", 1, ("sum",)),
    RowFn("mean", "reduce", 1, ("mean",)),
    RowFn("amax", "reduce", 1, ("amax", "max"), "-INFINITY", "fmaxf(a, b)"),
    RowFn("amin", "reduce", 1, ("amin", "min"), "INFINITY", "fminf(a, b)"),
    RowFn("argmax", "reduce", 1, ("argmax",), "-INFINITY", "", index=True),
    RowFn("argmin", "reduce", 1, ("argmin",), "INFINITY", "", index=True),
    RowFn("prod", "reduce", 1, ("prod",), "1.f", "a * b"),
    RowFn("logsumexp", "reduce", 4, ("logsumexp",)),
    RowFn("norm", "reduce", 2, ("norm",)),
    RowFn("softmax", "softmax", 5, ("softmax",)),
    RowFn("log_softmax", "softmax", 5, ("log_softmax",)),
    RowFn("layer_norm", "norm", 8, ("layer_norm",)),
    RowFn("rms_norm", "norm", 6, ("rms_norm",)),
    RowFn("group_norm", "norm", 8, ("group_norm",)),
    RowFn("instance_norm", "norm", 8, ("instance_norm",)),
    RowFn("normalize", "norm", 3, ("normalize",)),
    # scans: the running combine along the dim (identity and combine as a reduction's)
    RowFn("cumsum", "scan", 1, ("cumsum",)),
    RowFn("cumprod", "scan", 1, ("cumprod",), "1.f", "a * b"),
    # pools: a window per output element over x [N, C, *spatial] (flops: per window element, see ``flops``)
    RowFn("max_pool", "pool", 1, ("max_pool1d", "max_pool2d", "max_pool3d"), "-INFINITY", "fmaxf(a, b)"),
    RowFn("avg_pool", "pool", 1, ("avg_pool1d", "avg_pool2d", "avg_pool3d")),
    RowFn("adaptive_avg_pool", "pool", 1, ("adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d")),
)}
# normalizations over (sample, group) segments of x [N, C, *spatial], whatever their dim says
GROUPED = ("group_norm", "instance_norm")
assert tuple(ROW_FNS) == ir.RowFn.__args__  # type: ignore[attr-defined]  # one list, in the IR's order

# the knobs, what each allows (a diagnostic's "expected") and an example (its hint)
ROW_KNOB_VALUES: dict[str, tuple[str, str]] = {
    "vector": ("1, 2, 4 or 8 elements, or auto (at most 16 bytes)", "4"),
    "rows_per_block": ("1, 2, 4, 8, 16 or 32, or auto (scans: 1)", "4"),
    "passes": ("1 (the row in registers), 2 (x read again), or auto", "2"),
    "split": ("a CTA count per row like 4 (reductions only)", "4"),
}
VECTORS = (1, 2, 4, 8)
ROWS_PER_BLOCK = (1, 2, 4, 8, 16, 32)
THREADS = 256  # a CTA's threads
# a one-pass row lives in registers: at most this many values per thread (the CTA's threads times this per row)
MAX_VALUES_PER_THREAD = 32
MAX_SPLIT = 64


def reduced_dims(op: ir.RowOp, rank: int) -> tuple[int, ...]:
    """The reduced dims, non-negative and sorted; raises ShapeError for a dim out of range or not adjacent."""
    dims = []
    for d in op.dim:
        if not -rank <= d < rank:
            raise ShapeError(f"{op.fn} over dim {d} of a rank-{rank} tensor", op.span, found=f"dim={d}",
                             expected=f"a dim in {-rank}..{rank - 1}", hint="count dims from 0, or from -1 at the end")
        dims.append(d % rank)
    dims = sorted(set(dims))
    if is_scan(op) and len(op.dim) != 1:
        raise ShapeError(f"{op.fn} over dims {op.dim}: a scan runs along one dim", op.span, found=f"dim={op.dim}",
                         expected="one dim, like dim=-1", hint="flatten the dims first (torch t = flatten(x, 1, 2))")
    if len(dims) != len(op.dim):
        raise ShapeError(f"{op.fn} names a dim twice", op.span, found=f"dim={op.dim}", expected="distinct dims",
                         hint="name each dim once")
    if dims != list(range(dims[0], dims[-1] + 1)):
        raise ShapeError(f"{op.fn} over dims {tuple(dims)}: a row kernel reduces adjacent dims", op.span,
                         found=f"dim={op.dim}", expected="one dim, or adjacent dims like (1, 2)",
                         hint="permute the dims together first (torch t = permute(x, ...)), or reduce twice")
    return tuple(dims)


def groups_of(op: ir.RowOp, shape: tuple[int, ...]) -> int:
    """The groups of a group_norm (instance_norm: one per channel); raises ShapeError where x has no channel dim
    or the groups do not divide it."""
    if len(shape) < 2:
        raise ShapeError(f"{op.fn} of a rank-{len(shape)} tensor", op.span, found=f"shape {list(shape)}",
                         expected="x shaped [N, C, *spatial]", hint="add the batch dim (torch t = unsqueeze(x, 0))")
    groups = shape[1] if op.fn == "instance_norm" else op.groups
    if shape[1] % groups:
        raise ShapeError(f"group_norm: {groups} groups of {shape[1]} channels", op.span, found=f"groups={groups}",
                         expected=f"a divisor of {shape[1]}", hint="nn.GroupNorm needs C divisible by its groups")
    return groups


def geometry(op: ir.RowOp, shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(outer, R, inner) of x's shape under the op; a group_norm's segment is its group's channels and spatial
    extent, contiguous: (N · groups, C / groups · spatial, 1); a pool's, a (sample, channel) plane:
    (N · C, prod(spatial), 1)."""
    if is_pool(op):
        lead, _ = pool_spatial(op, shape)
        return math.prod(lead), math.prod(shape[len(lead):]), 1
    if op.fn in GROUPED:
        groups = groups_of(op, shape)
        return shape[0] * groups, math.prod(shape[1:]) // groups, 1
    dims = reduced_dims(op, len(shape))
    return (math.prod(shape[:dims[0]]), math.prod(shape[dims[0]:dims[-1] + 1]), math.prod(shape[dims[-1] + 1:]))


def output_shape(op: ir.RowOp, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A reduction drops the reduced dims (keepdim: extent 1); softmax, the norms and the scans keep x's shape;
    a pool gives [N, C, *pooled extents]."""
    if is_pool(op):
        lead, out = pool_spatial(op, shape)
        return lead + out
    if ROW_FNS[op.fn].kind != "reduce":
        geometry(op, shape)  # raises for dims out of range, as a reduction's
        return tuple(shape)
    dims = reduced_dims(op, len(shape))
    if op.keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def op_output(kernel: ir.RowKernel, types: dict[str, Any]) -> tuple[int, ...]:
    """The op's output shape over the operand types in ``types``; raises ShapeError where they do not fit."""
    op = kernel.op
    tx = types[op.x.name]
    if tx.dtype == "i64":
        raise ShapeError(f"{op.fn} reads '{op.x.name}', an index tensor", op.x.span or op.span, found="i64",
                         expected="f32, bf16 or f16", hint="row kernels read floating-point tensors", code="dtype")
    if not tx.shape:
        raise ShapeError(f"{op.fn} of a scalar '{op.x.name}'", op.span, found="shape []",
                         expected="a tensor of rank >= 1", hint="reduce a tensor with a dim to reduce")
    out = output_shape(op, tx.shape)
    if is_pool(op):
        return out
    want = (tx.shape[1],) if op.fn in GROUPED else tuple(tx.shape[d] for d in reduced_dims(op, len(tx.shape)))
    for what, operand in (("weight", op.weight), ("bias", op.bias)):
        if operand is None:
            continue
        t = types[operand.name]
        if math.prod(t.shape) != math.prod(want):
            raise ShapeError(f"{op.fn}'s {what} '{operand.name}' is {list(t.shape)}; the normalized dims are {list(want)}",
                             operand.span or op.span, found=str(list(t.shape)), expected=str(list(want)),
                             hint="the affine has one value per channel, as nn.GroupNorm's" if op.fn in GROUPED
                             else "the affine has one value per element of the normalized dims, as nn.LayerNorm's")
    return out


def is_reduction(op: ir.RowOp) -> bool:
    return ROW_FNS[op.fn].kind == "reduce"


def is_scan(op: ir.RowOp) -> bool:
    return ROW_FNS[op.fn].kind == "scan"


# ---------------------------------------------------------------------------------------------
# Pools: x [N, C, *spatial] (or [C, *spatial]), a window per output element


def is_pool(op: ir.RowOp) -> bool:
    return ROW_FNS[op.fn].kind == "pool"


def pool_rank(op: ir.RowOp) -> int:
    """The spatial dims the pool slides over: its kernel's (adaptive: its output_size's)."""
    return len(op.output_size if op.fn == "adaptive_avg_pool" else op.kernel_size)


def pool_dilation(op: ir.RowOp) -> tuple[int, ...]:
    return op.dilation or (1,) * pool_rank(op)


def pool_extent(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling_output_shape: with ceil_mode the last window must start inside the input or the left
    padding, else it is dropped."""
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool_like(op: ir.RowOp) -> str:
    k = max(1, min(3, pool_rank(op)))
    if op.fn == "adaptive_avg_pool":
        return f"adaptive_avg_pool(x, output_size={_ones(k, 1)})"
    return f"{op.fn}(x, kernel_size={_ones(k, 2)}, stride={_ones(k, 2)}, padding={_ones(k, 0)})"


def _ones(k: int, v: int) -> str:
    return "(" + ", ".join([str(v)] * k) + ("," if k == 1 else "") + ")"


def pool_spatial(op: ir.RowOp, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the dims before the spatial ones, the pooled output's spatial extents); raises ShapeError where x's
    rank or the pool's parameters do not fit (each as PyTorch would refuse it)."""
    k, fn = pool_rank(op), op.fn
    like = _pool_like(op)
    if not 1 <= k <= 3:
        what = "output_size" if fn == "adaptive_avg_pool" else "kernel_size"
        raise ShapeError(f"{fn} over {k} spatial dims", op.span, found=f"{what}={getattr(op, what)}",
                         expected="1, 2 or 3 values, one per spatial dim", hint=f"write {like}")
    if len(shape) not in (k + 1, k + 2):
        raise ShapeError(f"{fn} over {k} spatial dim(s) of a rank-{len(shape)} tensor", op.span,
                         found=f"shape {list(shape)}", expected=f"rank {k + 2} ([N, C, *spatial]) or {k + 1} ([C, *spatial])",
                         hint="give one value per spatial dim of x (the dims after N and C), or reshape x first")
    lead, spatial = tuple(shape[:-k]), tuple(shape[-k:])
    if fn == "adaptive_avg_pool":
        if any(o < 1 for o in op.output_size):
            raise ShapeError(f"{fn} to output_size {op.output_size}", op.span, found=f"output_size={op.output_size}",
                             expected="positive extents", hint="output_size=(1, 1) gives one value per channel")
        return lead, tuple(op.output_size)
    params = {"stride": op.stride, "padding": op.padding, "dilation": pool_dilation(op)}
    for key, values in params.items():
        if len(values) != k:
            raise ShapeError(f"{fn}'s {key} has {len(values)} value(s) for a {k}-D kernel", op.span,
                             found=f"{key}={values}", expected=f"{k} value(s), one per spatial dim", hint=f"write {like}")
    if fn == "avg_pool" and any(d != 1 for d in params["dilation"]):
        raise ShapeError(f"avg_pool with dilation {op.dilation}", op.span, found=f"dilation={op.dilation}",
                         expected="no dilation", hint="PyTorch's avg_pool has no dilation; leave it out")
    for key, values in (("kernel_size", op.kernel_size), ("stride", op.stride), ("dilation", params["dilation"])):
        if any(v < 1 for v in values):
            raise ShapeError(f"{fn}'s {key} {values} is not positive", op.span, found=f"{key}={values}",
                             expected=f"{key} values >= 1", hint=f"write {like}")
    if any(p < 0 for p in op.padding):
        raise ShapeError(f"{fn}'s padding {op.padding} is negative", op.span, found=f"padding={op.padding}",
                         expected="padding values >= 0", hint="pad x with a torch step (pad) for anything else")
    if any(p > kk // 2 for p, kk in zip(op.padding, op.kernel_size)):
        half = tuple(kk // 2 for kk in op.kernel_size)
        raise ShapeError(f"{fn}'s padding {op.padding} is more than half its kernel {op.kernel_size}", op.span,
                         found=f"padding={op.padding}", expected=f"padding <= kernel_size // 2, here at most {half}",
                         hint="PyTorch refuses such padding; use a smaller padding or pad x with a torch step (pad)")
    if fn == "avg_pool" and op.divisor_override is not None and op.divisor_override < 1:
        raise ShapeError(f"avg_pool's divisor_override {op.divisor_override}", op.span,
                         found=f"divisor_override={op.divisor_override}", expected="a positive integer or None",
                         hint="leave divisor_override out to divide by the window's size")
    if fn == "avg_pool" and k == 3 and any(n < kk for n, kk in zip(spatial, op.kernel_size)):
        # avg_pool3d alone refuses a window larger than the unpadded input
        raise ShapeError(f"avg_pool of spatial extents {list(spatial)} with kernel {op.kernel_size}", op.span,
                         found=f"kernel_size={op.kernel_size}", expected=f"a 3-D kernel within {list(spatial)}",
                         hint="PyTorch's avg_pool3d needs kernel_size <= the input's extents; use a smaller kernel")
    out = tuple(pool_extent(n, kk, st, p, d, op.ceil_mode)
                for n, kk, st, p, d in zip(spatial, op.kernel_size, op.stride, op.padding, params["dilation"]))
    if any(o < 1 for o in out):
        raise ShapeError(f"{fn} of spatial extents {list(spatial)} gives {list(out)}", op.span,
                         found=f"output extents {list(out)}", expected="every output extent >= 1",
                         hint="the window (dilation * (kernel - 1) + 1) is larger than the padded input; "
                              "use a smaller kernel or dilation, or more padding")
    return lead, out


def adaptive_bounds(i: int, size: int, out: int) -> tuple[int, int]:
    """The input window [start, end) of adaptive output position i: floor(i·In/Out), ceil((i+1)·In/Out)."""
    return (i * size) // out, -(-((i + 1) * size) // out)


def pool_window_elements(op: ir.RowOp, shape: tuple[int, ...]) -> int:
    """The input elements all output windows visit together (max: padding included, as its compares)."""
    lead, out = pool_spatial(op, shape)
    k = pool_rank(op)
    if op.fn == "adaptive_avg_pool":
        per_dim = [sum(e - s for s, e in (adaptive_bounds(i, n, o) for i in range(o))) for n, o in zip(shape[-k:], out)]
        return math.prod(lead) * math.prod(per_dim)
    return math.prod(lead) * math.prod(out) * math.prod(op.kernel_size)


def pool_value(op: ir.RowOp, xf: Any) -> Any:
    """The pool of xf (fp32) by torch.nn.functional, which is the kernel's semantics."""
    import torch.nn.functional as F

    k = pool_rank(op)
    if op.fn == "adaptive_avg_pool":
        return (F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d)[k - 1](xf, op.output_size)
    if op.fn == "max_pool":
        return (F.max_pool1d, F.max_pool2d, F.max_pool3d)[k - 1](xf, op.kernel_size, op.stride, op.padding,
                                                               pool_dilation(op), op.ceil_mode)
    if k == 1:  # avg_pool1d has no divisor_override: the same pool as a 2-D one over [.., 1, L]
        y = F.avg_pool2d(xf.unsqueeze(-2), (1, *op.kernel_size), (1, *op.stride), (0, *op.padding), op.ceil_mode,
                         op.count_include_pad, op.divisor_override)
        return y.squeeze(-2)
    return (F.avg_pool2d, F.avg_pool3d)[k - 2](xf, op.kernel_size, op.stride, op.padding, op.ceil_mode,
                                               op.count_include_pad, op.divisor_override)


# ---------------------------------------------------------------------------------------------
# Knobs


@dataclass(frozen=True)
class RowPlan:
    """The knobs a row kernel runs with: the written ones, and the compiler's choice for those at auto."""

    outer: int
    rows: int  # R, the reduced extent
    inner: int
    vector: int
    rows_per_block: int
    passes: int
    split: int

    @property
    def segments(self) -> int:
        """Independent rows: outer · inner."""
        return self.outer * self.inner


def max_vector(dtype: str, extent: int) -> int:
    """The widest vector (16 bytes at most) dividing the contiguous extent."""
    width = 16 // ir.ELEMENT_BYTES[dtype]
    while width > 1 and extent % width:
        width //= 2
    return width


def plan(kernel: ir.RowKernel, shape: tuple[int, ...], dtype: str, sm_count: int = 132) -> RowPlan:
    """The knobs, auto ones chosen from the row's geometry: vectors as wide as the contiguous extent allows,
    several short rows per CTA (a warp each), one pass while the row fits in registers, and a split of a long
    row across CTAs where there are too few rows to fill the GPU."""
    op, cfg = kernel.op, kernel.config
    outer, rows, inner = geometry(op, shape)
    if is_pool(op):  # a thread per output element: no knobs
        return RowPlan(outer, rows, inner, 1, 1, 1, 1)
    contiguous = rows if inner == 1 else inner
    vector = cfg.vector or max_vector(dtype, contiguous)
    if cfg.rows_per_block is not None:
        rpb = cfg.rows_per_block
    elif inner == 1:
        rpb = max(1, min(32, THREADS * vector * 4 // max(rows, 1)))
        rpb = 1 << (rpb.bit_length() - 1)
    else:
        rpb = 1
    if is_scan(op):  # a CTA per contiguous row (its threads scan it in chunks), or a thread per strided column
        return RowPlan(outer, rows, inner, vector, 1, 1, 1)
    warp_values = (THREADS if rpb == 1 else 32) * MAX_VALUES_PER_THREAD
    if is_reduction(op):
        passes = 1  # a reduction reads x once
    elif inner > 1:
        passes = 2  # a strided normalization reads its segment again (each thread walks a column)
    else:
        passes = cfg.passes or (1 if rows <= warp_values else 2)
    split = cfg.split
    if split == 1 and is_reduction(op) and inner == 1 and cfg.rows_per_block is None:
        # too few rows for the GPU's SMs, each long: spread each row over several CTAs
        blocks = math.ceil(outer / rpb)
        if blocks < sm_count and rows >= 32 * THREADS:
            split = min(MAX_SPLIT, max(1, sm_count // blocks), rows // (THREADS * vector))
    return RowPlan(outer, rows, inner, vector, rpb, passes, max(1, split))


# ---------------------------------------------------------------------------------------------
# The interpreter's semantics (fp32 arithmetic, as the kernel's)


def interpret(op: ir.RowOp, x: Any, weight: Any = None, bias: Any = None) -> Any:
    """The op's value over x in fp32 (argmax / argmin: int64 positions, the first of equal values)."""
    import torch

    xf = x.float()
    if is_pool(op):
        return pool_value(op, xf)
    outer, rows, inner = geometry(op, tuple(xf.shape))
    v = xf.reshape(outer, rows, inner)
    fn = op.fn
    if fn in ("cumsum", "cumprod"):
        return scan(v, fn, op.reverse, op.exclusive).reshape(xf.shape)
    if fn in ("argmax", "argmin"):
        # PyTorch gives the flat position within the reduced dims; for one dim that is the index along it
        idx = (torch.argmax if fn == "argmax" else torch.argmin)(v, dim=1)
        return idx.reshape(output_shape(op, tuple(xf.shape)))
    if fn in ROW_FNS and ROW_FNS[fn].kind == "reduce":
        value = {
            "sum": lambda: v.sum(dim=1),
            "mean": lambda: v.sum(dim=1) / rows,
            "amax": lambda: v.amax(dim=1),
            "amin": lambda: v.amin(dim=1),
            "prod": lambda: v.prod(dim=1),
            "logsumexp": lambda: torch.logsumexp(v, dim=1),
            "norm": lambda: v.abs().sum(dim=1) if op.p == 1 else v.square().sum(dim=1).sqrt(),
        }[fn]()
        return value.reshape(output_shape(op, tuple(xf.shape)))
    if fn == "normalize":  # F.normalize: x / max(||x||_p, eps)
        size = v.abs().sum(dim=1, keepdim=True) if op.p == 1 else v.square().sum(dim=1, keepdim=True).sqrt()
        return (v / size.clamp_min(op.eps)).reshape(xf.shape)
    if fn == "softmax":
        out = torch.softmax(v, dim=1)
    elif fn == "log_softmax":
        out = torch.log_softmax(v, dim=1)
    elif fn in GROUPED:
        mean = v.mean(dim=1, keepdim=True)
        var = (v - mean).square().mean(dim=1, keepdim=True)
        out = ((v - mean) * torch.rsqrt(var + op.eps)).reshape(xf.shape)
        channel = (1, xf.shape[1]) + (1,) * (xf.dim() - 2)  # the affine is per channel
        if weight is not None:
            out = out * weight.float().reshape(channel)
        if bias is not None:
            out = out + bias.float().reshape(channel)
    else:
        if fn == "layer_norm":
            mean = v.mean(dim=1, keepdim=True)
            var = (v - mean).square().mean(dim=1, keepdim=True)
            out = (v - mean) * torch.rsqrt(var + op.eps)
        else:
            out = v * torch.rsqrt(v.square().mean(dim=1, keepdim=True) + op.eps)
        if weight is not None:
            out = out * weight.float().reshape(1, rows, 1)
        if bias is not None:
            out = out + bias.float().reshape(1, rows, 1)
    return out.reshape(xf.shape)


def scan(v: Any, fn: str, reverse: bool, exclusive: bool) -> Any:
    """cumsum / cumprod of v [outer, R, inner] along dim 1: from the end where ``reverse``, and ``exclusive`` of
    the element itself (the first value is the identity)."""
    import torch

    if reverse:
        v = v.flip(1)
    out = torch.cumsum(v, dim=1) if fn == "cumsum" else torch.cumprod(v, dim=1)
    if exclusive:
        first = torch.zeros_like(out[:, :1]) if fn == "cumsum" else torch.ones_like(out[:, :1])
        out = torch.cat([first, out[:, :-1]], dim=1)
    return out.flip(1) if reverse else out


# ---------------------------------------------------------------------------------------------
# Counting: FLOPs and the bytes a kernel must move


def flops(op: ir.RowOp, x_numel: int, shape: tuple[int, ...] | None = None) -> float:
    """Per element of x; a pool's (``shape`` x's): a compare (max) or an add (avg) per window element, and one
    divide per output element (avg)."""
    if is_pool(op):
        assert shape is not None, "a pool's FLOPs need x's shape"
        divides = 0 if op.fn == "max_pool" else math.prod(output_shape(op, shape))
        return float(pool_window_elements(op, shape) + divides)
    affine = (op.weight is not None) + (op.bias is not None)
    return (ROW_FNS[op.fn].flops + affine) * x_numel


def x_reads(kernel: ir.RowKernel, shape: tuple[int, ...], dtype: str) -> int:
    """How often the kernel reads x from memory: twice for a two-pass normalization, else once."""
    if is_reduction(kernel.op) or is_scan(kernel.op) or is_pool(kernel.op):
        return 1
    return plan(kernel, shape, dtype).passes


def store_types(kernel: ir.RowKernel, types: dict[str, Any]) -> dict[str, Any]:
    """The type of each store: the op's output shape, the store's element type, row-major."""
    from dsl_compiler.tensor_types import TensorType

    out = op_output(kernel, types)
    return {s.name: TensorType(dtype=s.dtype, shape=out, layout="contiguous") for s in kernel.stores}
