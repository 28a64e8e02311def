"""Who did a forward's work: the candidate's own kernels or a library's (the `pytorch_only` flag).

GPU kernels are named by the profiler. A library kernel that computes (cuBLAS/cuDNN GEMMs and convolutions,
ATen reductions, torch.compile's generated kernels) is work the candidate did not bring. A library kernel that
only moves data (a copy, a cast, a layout change, a pad, a fill) is the cost of a program's own torch steps
around its kernels: it is neither side's work, so an honest program whose conv spends half its time in a cast
to channels-last is not called PyTorch's. Elementwise ATen kernels count as movement: on their own they cannot
make a GEMM- or conv-class problem fast, and a candidate with no kernel of its own is flagged whatever it ran.
In a μCUTLASS program only a library's products (GEMMs, convolutions, attention) count against it: its other
torch steps are declared glue whose work its FLOP share already weighs (``split_kernel_time``).
"""

from __future__ import annotations

import math
import re
from typing import Iterable, NamedTuple

# Kernel names of libraries (ATen, cuBLAS, cuDNN, torch.compile's generated kernels).
LIBRARY_KERNEL = re.compile(
    r"at::|at_cuda_detail|\bcublas|cudnn|cutlass_80|cutlass3x|sm\d+_xmma|\bxmma|nvjet|gemv|gemmk1|splitKreduce|"
    r"ampere_|volta_|turing_|implicit_convolve|precomputed_convolve|winograd|\bfft|elementwise_kernel|"
    r"reduce_kernel|triton_(poi|red|per|tem)_|Memcpy|Memset|memcpy|memset",
    re.IGNORECASE,
)
# Of those, the ones that only move data (copies, casts, layout changes, pads, fills, plain elementwise maps).
MOVEMENT_KERNEL = re.compile(
    r"Memcpy|Memset|memcpy|memset|copy|cast|fill|transpose|permute|constant_pad|reflection_pad|replication_pad|"
    r"CatArray|cat_|index_|elementwise_kernel|vectorized_elementwise|unrolled_elementwise",
    re.IGNORECASE,
)
# A library kernel whose name also carries a movement word but computes (cuDNN's implicit GEMM, a cuBLAS GEMM).
COMPUTE_KERNEL = re.compile(r"gemm|conv|xmma|cublas|cudnn|nvjet", re.IGNORECASE)
# Library kernels that compute products (GEMMs, convolutions, attention): for a program, the only library
# kernels that count against it (its other torch steps are glue it declares; their work is in its FLOP share).
PRODUCT_KERNEL = re.compile(r"gemm|gemv|conv|xmma|nvjet|winograd|fft|splitKreduce|flash|fmha|attention|triton_tem_",
                            re.IGNORECASE)


class WorkSplit(NamedTuple):
    own_us: float  # kernels the candidate brought (built programs, code it compiled)
    library_work_us: float  # library kernels that compute
    movement_us: float  # library kernels that only move data (for a program: that compute no product)

    @property
    def own_share(self) -> float | None:
        """The candidate's share of the computing GPU time (movement left out); None without computing kernels."""
        work = self.own_us + self.library_work_us
        return self.own_us / work if work > 0 else None


def split_kernel_time(kernels: Iterable[tuple[str, float]], program: bool = False) -> WorkSplit:
    """GPU time by who did it. With ``program``, a library kernel that computes no product counts as movement:
    a μCUTLASS program's torch steps (a BatchNorm with batch statistics, a pooling, a softmax between its GEMMs)
    are declared in its text and run on ATen by design; what they compute is in its FLOP share (its kernels'
    FLOPs from their shapes against the problem's), which a program that hands a problem's non-product work to
    such steps fails. A library GEMM or convolution inside a program still counts against it."""
    own = lib = move = 0.0
    for name, t_us in kernels:
        if not LIBRARY_KERNEL.search(name):
            own += t_us
        elif (MOVEMENT_KERNEL.search(name) and not COMPUTE_KERNEL.search(name)) or \
                (program and not PRODUCT_KERNEL.search(name)):
            move += t_us
        else:
            lib += t_us
    return WorkSplit(own, lib, move)


def pytorch_only_reason(split: WorkSplit, flop_share: float | None) -> str | None:
    """Why the forward counts as PyTorch's work (a flag kept out of headline speedups), or None."""
    if split.own_us <= 0.0:
        return "no GPU time ran in kernels the candidate brought: only library kernels (ATen, cuBLAS, cuDNN)"
    share = split.own_share
    if share is not None and share < 0.5:
        return (f"{100 * (1 - share):.0f}% of the computing GPU time ran in library kernels (ATen, cuBLAS, cuDNN); "
                f"less than half is in kernels the candidate brought")
    if flop_share is not None and flop_share < 0.5:
        return (f"{100 * (1 - flop_share):.0f}% of the FLOPs ran as PyTorch operators; less than half is in kernels "
                f"the candidate brought")
    return None


# ---------------------------------------------------------------------------------------------
# Operator work: the FLOPs of the ATen operators a forward dispatched, from their names and input shapes
#
# Recorded by the profiler (a C++ observer of the dispatcher, on every thread: a Python dispatch mode can
# be left with torch's own helpers, and work in a thread of the candidate's never enters one), and counted
# here with a formula for every spelling of a product (mm, addmm, addmv, mv, dot, outer, bmm, baddbmm,
# _addmm_activation, _scaled_mm, convolutions, attention), not only the few torch's FLOP counter knows, and
# one FLOP per element for every other operator that computes (a broadcast multiply and a sum over K is a
# GEMM). The reference is counted by the same formulas (``OpRecorder``), so the share compares like with like.
#
# PyTorch's libraries are not only ATen: oneDNN, MKL, FBGEMM and the quantized backends register operators
# under their own namespaces (``mkldnn::_linear_pointwise`` is a whole Linear+ReLU), and ATen has products
# with no formula here (``_cdist_forward``, ``_weight_int8pack_mm``). An operator of any namespace torch
# registers is library work; one with no formula whose operands cannot be mapped elementwise counts as the
# largest product two of its operands could form, and one of a backend's namespaces whose operands cannot
# be sized (a packed weight the profiler records without a shape) counts as unsized: none of the call's work
# is then the candidate's. Operators of a namespace torch does not register are the candidate's own (an
# extension it built); what they dispatch to torch is recorded beneath them and counted.

_MATMUL_LIKE = {  # name -> (index of the left operand among the tensor inputs)
    "mm": 0, "addmm": 1, "_addmm_activation": 1, "bmm": 0, "baddbmm": 1, "addbmm": 1, "_scaled_mm": 0, "_int_mm": 0,
    "mv": 0, "addmv": 1, "dot": 0, "vdot": 0, "inner": 0, "ger": 0, "outer": 0, "addr": 1, "_mixed_dtypes_linear": 0,
}
# Library operators that are a Linear or a distance matrix (x[..., K] against w[N, K]): 2 * numel(x) * N, N from the
# weight, or from the bias where the weight is packed (FBGEMM's fp16 weight).
_LINEAR_LIKE = frozenset({"_weight_int8pack_mm", "fbgemm_linear_int8_weight", "fbgemm_linear_int8_weight_fp32_activation",
                          "_linear_pointwise", "_mkl_linear", "mkldnn_linear", "_sparse_semi_structured_linear",
                          "_cdist_forward", "cdist", "_euclidean_dist", "qlinear_pointwise", "linear_dynamic_fp16"})
_BIAS_SIZED = frozenset({"fbgemm_linear_fp16_weight", "fbgemm_linear_fp16_weight_fp32_activation"})
_CONV = re.compile(r"conv(olution)?(_transpose)?\d?d?$|^_convolution$|^(cudnn|mkldnn|miopen)_convolution|"
                   r"^_slow_conv2d_forward$|^thnn_conv|^slow_conv", re.IGNORECASE)
_ATTENTION = re.compile(r"scaled_dot_product|_flash_attention_forward|_efficient_attention_forward")
# Operators that only allocate, reshape, copy or move data: no arithmetic.
_NO_COMPUTE = frozenset("""
empty empty_like empty_strided zeros zeros_like ones ones_like full full_like new_empty new_empty_strided new_zeros
new_ones new_full scalar_tensor arange linspace view view_as reshape _reshape_alias _unsafe_view unsqueeze squeeze
flatten unflatten t transpose permute expand expand_as as_strided select slice narrow split split_with_sizes chunk
unbind contiguous clone copy_ _to_copy to detach alias lift_fresh resize_ set_ fill_ zero_ cat stack index_select
item _local_scalar_dense resolve_conj resolve_neg _copy_from _copy_from_and_resize is_same_size result_type
diagonal movedim swapaxes unfold repeat tile pad constant_pad_nd masked_fill_ record_stream _has_compatible_shallow_copy_type
_reinterpret_tensor _reorder_linear_weight _mkl_reorder_linear_weight
""".split())


def _name(op: str) -> str:
    return op.split("::", 1)[-1].split(".", 1)[0]


def _namespace(op: str) -> str:
    return op.split("::", 1)[0] if "::" in op else ""


def library_namespaces() -> frozenset[str]:
    """The operator namespaces torch registers in this process (aten, mkldnn, mkl, quantized, onednn, prims,
    ...): called in the judge, which never loads a candidate's extension."""
    import torch

    return frozenset(n.split("::", 1)[0] for n in torch._C._dispatch_get_all_op_names()) | {"aten"}


# Input dtypes (as the profiler spells them) of index and mask tensors: never the operand of a product.
_INDEX_DTYPES = frozenset({"long int", "int", "bool", "long", "short int"})


def _numel(shape) -> int:
    n = 1
    for d in shape or ():
        n *= int(d)
    return n


def _tensor_shapes(shapes) -> list[list[int]]:
    return [list(s) for s in shapes or () if isinstance(s, (list, tuple)) and s and all(isinstance(d, int) for d in s)]


def product_flops(name: str, shapes, concrete=None) -> float | None:
    """FLOPs of a product operator (2 per multiply-add) from its input shapes (and, for a convolution, its
    non-tensor arguments ``concrete``, as the profiler records them); None for any other operator."""
    base = _name(name)
    ts = _tensor_shapes(shapes)
    if base in _MATMUL_LIKE:
        ops = ts[_MATMUL_LIKE[base]:] if base not in ("addmm", "_addmm_activation", "baddbmm", "addbmm", "addmv",
                                                       "addr") or len(ts) >= 3 else ts
        if len(ops) < 2:
            return 0.0
        a, b = ops[0], ops[1]
        if base in ("ger", "outer", "addr"):
            return float(_numel(a) * _numel(b))
        if base in ("dot", "vdot", "inner") and len(a) == 1:
            return 2.0 * a[0]
        if base in ("mv", "addmv"):
            return 2.0 * _numel(a)
        # (..., M, K) x (..., K, N): 2 * batch * M * K * N
        return 2.0 * _numel(a) * (b[-1] if len(b) >= 2 else 1)
    if base in _LINEAR_LIKE and len(ts) >= 2:
        x = ts[0]
        w = next((t for t in ts[1:] if len(t) >= 2 and t[-1] == x[-1]), None)
        if w is not None:
            return 2.0 * _numel(x) * w[-2]
        w = next((t for t in ts[1:] if len(t) >= 2 and t[-2] == x[-1]), None)
        return 2.0 * _numel(x) * w[-1] if w is not None else None
    if base in _BIAS_SIZED and len(ts) >= 2 and len(ts[-1]) == 1:
        return 2.0 * _numel(ts[0]) * ts[-1][0]
    if _CONV.search(base) and len(ts) >= 2:
        return conv_flops(base, ts[0], ts[1], concrete)
    if _ATTENTION.search(base) and len(ts) >= 3:
        q, k, v = ts[:3]
        return 2.0 * _numel(q[:-2]) * q[-2] * k[-2] * (q[-1] + v[-1])
    return None


# Where each convolution operator keeps stride, padding, dilation (and whether it transposes) among its
# arguments: their orders differ (cuDNN's and oneDNN's put padding before stride).
_CONV_ARGS = {  # base name -> (stride, padding, dilation, transposed) argument indices
    "conv1d": (3, 4, 5, None), "conv2d": (3, 4, 5, None), "conv3d": (3, 4, 5, None),
    "convolution": (3, 4, 5, 6), "_convolution": (3, 4, 5, 6), "convolution_overrideable": (3, 4, 5, 6),
    "cudnn_convolution": (3, 2, 4, None), "mkldnn_convolution": (4, 3, 5, None), "miopen_convolution": (4, 3, 5, None),
    "_slow_conv2d_forward": (4, 5, None, None), "slow_conv3d_forward": (4, 5, None, None),
}


def _per_dim(value, dims: int) -> list[int] | None:
    """An int-or-list argument as one int per spatial dimension; None where it was not recorded as numbers."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return [int(value)] * dims
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float)) for v in value):
        vals = [int(v) for v in value]
        return vals * dims if len(vals) == 1 else (vals if len(vals) == dims else None)
    return None


def _conv_positions(base: str, x: list[int], w: list[int], concrete) -> int | None:
    """Output positions per image of a convolution, from the stride, padding and dilation it was recorded with (a
    transposed one: its input positions, each meeting the whole filter once); None where they were not recorded as
    numbers (a string padding, an operator not in ``_CONV_ARGS``)."""
    dims = len(w) - 2
    where = _CONV_ARGS.get(base)
    if dims < 1 or len(x) != len(w) or where is None or not isinstance(concrete, (list, tuple)):
        return None
    i_stride, i_pad, i_dil, i_transposed = where

    def arg(i):
        return concrete[i] if i is not None and i < len(concrete) else None

    if i_transposed is not None and bool(arg(i_transposed)):
        return math.prod(x[2:])
    pad = arg(i_pad)
    stride = _per_dim(arg(i_stride), dims)
    dilation = _per_dim(arg(i_dil), dims) if i_dil is not None else [1] * dims
    padding = [0] * dims if pad == "valid" else _per_dim(pad, dims)  # 'same' (stride 1): not known here
    if stride is None or padding is None or dilation is None or min(stride) < 1:
        return None
    return math.prod(max(0, (size + 2 * p - d * (k - 1) - 1) // s_ + 1)
                     for size, k, s_, p, d in zip(x[2:], w[2:], stride, padding, dilation))


def conv_flops(base: str, x: list[int], w: list[int], concrete=None) -> float:
    """2 * weight elements * output positions of a convolution (``_conv_positions``). Where its arguments are not
    known it counts per input position, which is exact for stride 1 with 'same' padding and an overcount for a
    strided one: never low."""
    positions = _conv_positions(base, x, w, concrete)
    if positions is None:
        return 2.0 * _numel(w) * _numel(x) / max(x[1] if len(x) > 1 else 1, 1)
    return 2.0 * _numel(w) * x[0] * positions


def _conv_unknown(name: str, shapes, concrete) -> bool:
    """A recorded convolution whose output positions its arguments do not give (the operators it dispatched may)."""
    base = _name(name)
    ts = _tensor_shapes(shapes)
    return bool(_CONV.search(base)) and len(ts) >= 2 and _conv_positions(base, ts[0], ts[1], concrete) is None


def elementwise_flops(name: str, shapes) -> float:
    """One FLOP per element of the broadcast inputs for an operator that computes; 0 for data movement."""
    if _moves_data(name):
        return 0.0
    ts = _tensor_shapes(shapes)
    if not ts:
        return 0.0
    shape = _broadcast_shape(ts)
    return float(_numel(shape)) if shape is not None else float(max(_numel(s) for s in ts))


def _moves_data(name: str) -> bool:
    """Whether an operator only moves, views or fills data (in-place spellings included)."""
    base = _name(name).rstrip("_") if not _name(name).startswith("__") else _name(name)
    return base in _NO_COMPUTE or _name(name) in _NO_COMPUTE


def _broadcast_shape(ts: list[list[int]]) -> tuple | None:
    """The shape the operands broadcast to; None where they do not (a product's operands)."""
    import torch

    try:
        return tuple(torch.broadcast_shapes(*[tuple(s) for s in ts]))
    except (RuntimeError, ValueError):
        return None


def contraction_flops(shapes, dtypes=None) -> float:
    """The largest product two operands of an operator could form: x[..., K] with w[N, K] or w[K, N] is
    2 * numel(x) * N (0 where no two operands share a K). Index and mask tensors are no operand."""
    dtypes = list(dtypes or [])
    ts = [list(s) for i, s in enumerate(shapes or ()) if isinstance(s, (list, tuple)) and len(s) >= 2
          and all(isinstance(d, int) for d in s) and (dtypes[i] if i < len(dtypes) else None) not in _INDEX_DTYPES]
    best = 0.0
    for i, a in enumerate(ts):
        for j, b in enumerate(ts):
            if i != j and a[-1] == b[-1]:
                best = max(best, 2.0 * _numel(a) * b[-2])
            if i != j and a[-1] == b[-2]:
                best = max(best, 2.0 * _numel(a) * b[-1])
    return best


def library_op_flops(name: str, shapes, dtypes=None) -> float:
    """FLOPs of a library operator with no formula that did its work itself. An elementwise map (operands that
    broadcast) of ATen counts one per element; an ATen operator whose operands do not broadcast, or any operator
    of another of torch's namespaces (oneDNN, MKL, quantized: their products take operands of the same shape too),
    counts the larger of that and the product two operands could form. One of those with an operand recorded
    without shape or type (a packed weight) and no such pair cannot be sized: infinite."""
    if _moves_data(name):
        return 0.0
    per_element = elementwise_flops(name, shapes)
    ts = _tensor_shapes(shapes)
    dtypes = list(dtypes or [])
    aten = _namespace(name) == "aten"
    # an ATen operator with an index operand (gather, scatter, embedding) selects; it does not multiply
    if aten and (len(ts) < 2 or _broadcast_shape(ts) is not None or any(d in _INDEX_DTYPES for d in dtypes)):
        return per_element
    product = contraction_flops(shapes, dtypes)
    opaque = any((s == [] or s == ()) and i < len(dtypes) and dtypes[i] == "" for i, s in enumerate(shapes or ()))
    if not aten and product == 0.0 and ts and opaque:
        return math.inf
    return max(per_element, product)


def op_flops(ops, library: frozenset[str] | None = None) -> float:
    """FLOPs of a forward's recorded library operators: ``ops`` is ``[name, input_shapes, parent_index]`` per
    record (parent -1 at the top), with the non-tensor arguments (``concrete``, None per tensor) as an optional
    fourth item and the input dtypes (as the profiler spells them) as an optional fifth. ``library``: the operator
    namespaces that are PyTorch's (``library_namespaces``; by default those registered here). A product operator
    counts by its formula and its sub-operators not at all; any other library operator counts what its
    sub-operators count, or, where they count nothing (it did the work itself), ``library_op_flops`` (a backend's
    operator beyond ATen: the larger of the two). An operator
    of another namespace (the candidate's own extension) counts what it dispatched to the library. Infinite where
    a library operator's work cannot be sized."""
    library = library_namespaces() if library is None else library
    ops = [list(o[:3]) + [o[3] if len(o) > 3 else None, o[4] if len(o) > 4 else None] for o in ops]
    children: dict[int, list[int]] = {}
    for i, (_, _, parent, _, _) in enumerate(ops):
        if isinstance(parent, int) and 0 <= parent < len(ops) and parent != i:
            children.setdefault(parent, []).append(i)
    counted: dict[int, float] = {}
    # post-order without recursion (a loop of thousands of small operators nests shallowly but widely)
    for root in [i for i, (_, _, parent, _, _) in enumerate(ops) if not (isinstance(parent, int) and 0 <= parent < len(ops))]:
        stack = [(root, False)]
        while stack:
            i, done = stack.pop()
            name, shapes, _, concrete, dtypes = ops[i]
            is_library = _namespace(str(name)) in library
            product = product_flops(str(name), shapes, concrete) if is_library else None
            # a conv whose stride and padding were not recorded (a string padding) asks the operators it
            # dispatched first: they carry them as numbers
            if product is not None and (not children.get(i) or not _conv_unknown(str(name), shapes, concrete)):
                counted[i] = product
                continue
            if not done:
                stack.append((i, True))
                stack.extend((c, False) for c in children.get(i, []) if c not in counted)
                continue
            below = sum(counted.get(c, 0.0) for c in children.get(i, []))
            if is_library and not str(name).startswith("aten::"):
                # a backend's operator does its product itself and may dispatch its epilogue (a bias add) to ATen
                counted[i] = max(below, library_op_flops(str(name), shapes, dtypes))
                continue
            counted[i] = below if below > 0 or not is_library else (
                product if product is not None else library_op_flops(str(name), shapes, dtypes))
    roots = [i for i, (_, _, parent, _, _) in enumerate(ops) if not (isinstance(parent, int) and 0 <= parent < len(ops))]
    return float(sum(counted.get(i, 0.0) for i in roots))


def _math_of_dtype(dtype: str) -> str | None:
    """The math a product runs in with operands of ``dtype`` (as the profiler spells it), where it is below fp32."""
    if dtype == "c10::Half":
        return "f16"
    if dtype == "c10::BFloat16":
        return "bf16"
    return "f8" if dtype.startswith("c10::Float8") else None


def low_precision_products(ops, allowed_precisions) -> list[str]:
    """The recorded product operators (GEMMs, convolutions, attention) whose operands are in a precision the problem
    does not admit, as "aten::mm on c10::Half": what ran, not what its error looks like (f16 used only where the
    values fit it has TF32's error on a TF32 problem and reads as allowed by error alone)."""
    from dsl_compiler.precision import admitted

    found = []
    for o in ops:
        name, dtypes = str(o[0]), (o[4] if len(o) > 4 and o[4] else [])
        if product_flops(name, o[1] if len(o) > 1 else [], o[3] if len(o) > 3 else None) is None:
            continue
        low = [d for d in dtypes if (m := _math_of_dtype(str(d))) and not admitted(m, allowed_precisions)]
        if low:
            found.append(f"{name} on {low[0]}")
    return found


def compiled_own_us(ops, compiled: Iterable[str]) -> float:
    """The time (us) a forward spent in operators of the candidate's own compiled code: each recorded operator of
    ``compiled`` (namespaces torch does not register, kernels registered from C++: ``Runner.counted``) by its own
    time, what it dispatched beneath it taken out. Time outside every operator (Python, numpy, a library called
    through ctypes) and in torch's operators is nobody's the judge can name as the candidate's: where the executed
    code lives, not what an operator is called, says whose work it was."""
    compiled = set(compiled)
    spans = [float(o[5]) if len(o) > 5 and isinstance(o[5], (int, float)) else 0.0 for o in ops]
    below = [0.0] * len(ops)
    for i, o in enumerate(ops):
        parent = o[2] if len(o) > 2 else -1
        if isinstance(parent, int) and 0 <= parent < len(ops) and parent != i:
            below[parent] += spans[i]
    return float(sum(max(0.0, spans[i] - below[i]) for i, o in enumerate(ops) if str(o[0]) in compiled))


def plain_arg(a):
    """A non-tensor argument as plain data, as the profiler's concrete inputs spell it (ints, floats, bools,
    strings, lists; anything else None): the reference's recorder and the candidate process record alike."""
    if isinstance(a, (bool, int, float, str)) or a is None:
        return a
    if isinstance(a, (list, tuple)):
        return [plain_arg(v) for v in a]
    return None


def _profiler_dtypes() -> dict:
    """torch dtypes as the profiler spells them in its records (the ones ``op_flops`` tells apart)."""
    import torch

    return {torch.int64: "long int", torch.int32: "int", torch.int16: "short int", torch.bool: "bool",
            torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16"}


class OpRecorder:
    """The reference's operators as ``op_flops`` reads them, recorded with a dispatch mode in the judge (the
    reference is trusted; a mode sees each operator once, after composite operators are decomposed)."""

    def __init__(self) -> None:
        self.ops: list[list] = []

    def __enter__(self):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        recorder = self
        dtype_names = _profiler_dtypes()

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                shapes = [list(a.shape) if isinstance(a, torch.Tensor) else [] for a in args]
                concrete = [None if isinstance(a, torch.Tensor) else plain_arg(a) for a in args]
                dtypes = [dtype_names.get(a.dtype, str(a.dtype)) if isinstance(a, torch.Tensor) else "Scalar" for a in args]
                name = getattr(func.overloadpacket, "_qualified_op_name", f"aten::{func.overloadpacket.__name__}")
                recorder.ops.append([name, shapes, -1, concrete, dtypes])
                return func(*args, **kwargs)

        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        return False

    @property
    def flops(self) -> float:
        return op_flops(self.ops)

    @property
    def products(self) -> list[float]:
        """The FLOPs of each product operation (GEMM, convolution, attention) of the reference, in call order."""
        out = []
        for op in self.ops:
            f = product_flops(_name(op[0]), op[1], op[3] if len(op) > 3 else None)
            if f:
                out.append(float(f))
        return out


# A program's products are its kernels': a reference product of which a library (a torch step) ran more than
# this share is split between the program and the library, and counts as the library's whole. Counting only the
# total let a program put just under half of one GEMM's columns in a torch `linear` step and keep its share.
SPLIT_SHARE = 0.05


def split_products(program, ref_products: list[float]) -> tuple[float, list[dict]]:
    """(the FLOPs of the reference's products a program's torch product steps split, costed as GEMMs, and each
    such product): each step is matched to the smallest reference product it fits in (a split piece is part of
    one), else to the largest."""
    from sol_models.counting import program_traffic

    steps, _ = program_traffic(program)
    pieces = [s.flops_tensor for s in steps if s.kind == "torch" and s.flops_tensor > 0]
    if not pieces or not ref_products:
        return 0.0, []
    library = [0.0] * len(ref_products)
    by_size = sorted(range(len(ref_products)), key=lambda i: ref_products[i])
    for piece in pieces:
        fits = [i for i in by_size if ref_products[i] >= piece * (1 - 1e-6)]
        library[fits[0] if fits else by_size[-1]] += piece
    split = [{"reference_flops": f, "library_flops": lib, "library_share": min(1.0, lib / f)}
             for f, lib in zip(ref_products, library) if lib > SPLIT_SHARE * f]
    return sum(d["reference_flops"] for d in split), split


# CPU time the candidate's other processes may spend during the counted call before its work is attributed
# away from it: an idle helper (a compile worker waiting on a pipe) spends none; a helper that computes the
# forward spends at least its unpickling and its operators (about 0.3 ms for the smallest problem, measured).
OTHER_PROCESSES_CPU_S = 0.0005


def work_share(work: dict, ref_flops: float, program=None, problem=None, ref_products: list[float] | None = None) -> dict:
    """The candidate's share of the problem's work in one counted call (``candidate_work_share``, 0..1), the
    numbers it comes from, and ``work_reason`` where the share is 0 because the work could not be seen.

    A Python candidate: 1 - its recorded ATen operators' FLOPs over the reference's. A program: the smaller of
    its kernels' FLOPs from their shapes over the reference's (a one-row decoy kernel does 1/M) and 1 - the
    FLOPs its torch steps dispatched, and (with the reference's ``ref_products``) 1 - the reference's products a torch
    product step split with its kernels, each such product counted whole (``SPLIT_SHARE``). Either way, CPU time spent meanwhile by another process of the
    candidate's (work handed to a helper no record reaches) attributes the call away from it."""
    out: dict = {"reference_flops": ref_flops}
    kernels = work.get("kernels") or []
    if kernels:
        split = split_kernel_time(kernels, program=program is not None)
        out["kernels"] = [[str(n)[:120], t] for n, t in kernels[:40]]
        out["split_us"] = split._asdict()
        out["candidate_time_share"] = split.own_share if split.own_us > 0 else 0.0
    if work.get("error"):
        out.update(candidate_work_share=0.0, work_reason=f"the counted call's work could not be recorded "
                   f"({work['error']}): none of it can be attributed to the candidate")
        return out
    shares = []
    if work.get("aten_flops") is not None:  # a program: its torch steps, by the FLOP counter
        out["aten_flops"] = float(work["aten_flops"])
    else:
        out["aten_flops"] = op_flops(work.get("ops") or [])
        out["ops_recorded"] = len(work.get("ops") or [])
    if math.isinf(out["aten_flops"]):
        out["work_reason"] = ("an operator of PyTorch's libraries whose work cannot be sized from its operands (a packed "
                              "weight) did the work itself: none of the call can be attributed to the candidate")
        shares.append(0.0)
    if ref_flops > 0:
        shares.append(max(0.0, 1.0 - out["aten_flops"] / ref_flops))
    if program is not None and ref_flops > 0:
        try:
            from sol_models.trace import coverage_of, state_shapes_of

            coverage, flops = coverage_of(program, ref_flops, state_shapes_of(problem) if problem is not None else None)
            out["kernel_flops"] = flops
            shares.append(coverage)
        except Exception:  # noqa: BLE001 - shapes that cannot be inferred leave the torch steps' count alone
            pass
        try:
            split_flops, split = split_products(program, ref_products or [])
        except Exception:  # noqa: BLE001 - the same: shapes that cannot be inferred
            split_flops, split = 0.0, []
        if split:
            out["split_products"] = split
            shares.append(max(0.0, 1.0 - split_flops / ref_flops))
            worst = max(d["library_share"] for d in split)
            if shares[-1] < 0.5:
                out.setdefault("work_reason", f"a torch product step ran {100 * worst:.0f}% of one of the reference's "
                               f"products (more than {100 * SPLIT_SHARE:.0f}%): a product split between the program's "
                               f"kernels and PyTorch's library counts as the library's")
    if program is None and work.get("call_us") and not kernels:  # a Python candidate on the CPU: where the time went
        own_us = compiled_own_us(work.get("ops") or [], work.get("compiled_ops") or [])
        out.update(call_us=float(work["call_us"]), compiled_own_us=own_us)
        time_share = min(1.0, own_us / float(work["call_us"]))
        if time_share < 0.5 and (not shares or time_share < min(shares)):
            out["work_reason"] = (f"{100 * (1 - time_share):.0f}% of the counted call's CPU time ran outside operators "
                                  f"of the candidate's own compiled code (in PyTorch's operators, in Python, or in "
                                  f"libraries reached without the dispatcher: numpy, ctypes)")
        shares.append(time_share)
    share = min(shares) if shares else out.get("candidate_time_share")
    other_s = float(work.get("other_processes_cpu_s") or 0.0)
    out["other_processes_cpu_s"] = other_s
    if other_s > OTHER_PROCESSES_CPU_S:
        share = 0.0
        out["work_reason"] = (f"other processes of the candidate's spent {1e3 * other_s:.1f} ms of CPU time during the "
                              f"counted call: work handed to another process is not in kernels the candidate brought")
    out["candidate_work_share"] = share
    return out
