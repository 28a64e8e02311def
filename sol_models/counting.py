"""FLOPs and bytes of a PyTorch problem or a μCUTLASS program.

A KernelBench-format problem is built and run on the ``meta`` device, so nothing is allocated and
a Level 3 model counts in well under a second. Every ATen op the forward dispatches is seen by a
``TorchDispatchMode``:

* FLOPs of matmuls, convolutions and attention come from PyTorch's own FLOP formulas
  (``torch.utils.flop_counter``: 2·M·N·K per GEMM, 2·N·K·(C/g)·R·S·P·Q per convolution); they are
  the tensor-core FLOPs (``flops_tensor``).
* Every other op is counted by the rules of ``FLOPS_PER_ELEMENT`` below (``flops_other``, run on
  the SIMT units): per output element for elementwise ops, per input element for reductions,
  norms and softmax, per output element times window size for pooling. Copies, views and index
  ops cost no FLOPs.

Bytes are counted three ways (NVlabs SOLAR's definitions):

* ``bytes_unfused``: every op reads its tensor inputs and writes its outputs through DRAM
  (views and metadata ops move nothing);
* ``bytes_fused``: the program's inputs, the parameters and buffers it reads, and its outputs,
  each once: the least any implementation must move;
* ``bytes_program`` (``count_program`` only): what a μCUTLASS program's kernels and torch steps
  move, the intermediates between its stages included.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import traceback
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from dsl_compiler.limits import TimeLimitExceeded, time_limit
from dsl_compiler.ops import OPS
from dsl_compiler.walk import epilogue_nodes, epilogue_refs
from run_vocabulary.problem import Problem, ProblemValue

OpKind = Literal["matmul", "elementwise", "reduction", "norm", "softmax", "pool", "data", "other"]


class ProblemLoadError(Exception):
    """A problem file that cannot be imported, built or run; ``str()`` is one line naming the file."""


class ProblemInputError(ProblemLoadError):
    """get_inputs() returns something no kernel of the language takes (None, float64, complex)."""


class OpRow(BaseModel):
    """One ATen op (or one program step), aggregated over its calls."""

    op: str
    kind: OpKind
    calls: int = 0
    flops: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0


class WorkCount(BaseModel):
    """The intended work of a problem or a program."""

    name: str
    source: Literal["problem", "program"] = "problem"
    flops: float  # flops_tensor + flops_other
    flops_tensor: float = 0.0  # matmul / conv / attention: what tensor cores can run
    flops_other: float = 0.0  # elementwise, reductions, norms, softmax, pooling (SIMT)
    bytes_fused: float
    bytes_unfused: float
    bytes_program: float | None = None
    input_bytes: float = 0.0
    param_bytes: float = 0.0
    output_bytes: float = 0.0
    kernel_count: int = 1  # launches: eager ops for a problem, kernels + torch steps for a program
    ops: list[OpRow] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# FLOP rules for the ops torch's FLOP counter does not cover. Names are ATen overload packets with
# any trailing "_" (in-place) removed. Each value is FLOPs per element of the op's largest
# floating tensor argument or output ("elementwise": per output element; the rest: per input
# element). A transcendental function counts as one FLOP.

_ELEMENTWISE: dict[str, float] = {
    # one arithmetic, compare or select per element
    **dict.fromkeys(
        "add sub rsub mul div neg abs relu clamp clamp_min clamp_max maximum minimum fmax fmin where "
        "threshold hardtanh leaky_relu relu6 sign sgn floor ceil round trunc frac remainder fmod "
        "reciprocal square lt gt le ge eq ne logical_and logical_or logical_not logical_xor "
        "bitwise_and bitwise_or bitwise_not masked_fill bernoulli exp exp2 expm1 log log2 log10 log1p "
        "sqrt rsqrt sin cos tan asin acos atan atan2 sinh cosh tanh erf erfc erfinv pow xlogy "
        "hypot copysign nan_to_num isnan isinf isfinite".split(),
        1.0,
    ),
    "addcmul": 2.0, "addcdiv": 2.0, "lerp": 3.0,
    "sigmoid": 3.0,  # exp, add, div
    "silu": 4.0,  # sigmoid and a multiply
    "hardsigmoid": 3.0, "hardswish": 4.0, "hardshrink": 2.0, "softshrink": 3.0, "tanhshrink": 2.0,
    "softplus": 3.0,  # exp, add, log
    "mish": 5.0,  # softplus, tanh, multiply
    "elu": 3.0, "celu": 3.0, "selu": 4.0, "glu": 4.0, "prelu": 2.0, "rrelu_with_noise": 2.0,
    "log_sigmoid_forward": 4.0, "softsign": 3.0, "logit": 3.0,
    "native_dropout": 2.0,  # draw a mask and scale
}
# by its approximate argument: the epilogue's gelu (erf form) and gelu_tanh in the op table
_GELU_FLOPS = {"none": OPS["gelu"].flops, "tanh": OPS["gelu_tanh"].flops}

_REDUCTION: dict[str, float] = {
    **dict.fromkeys(
        "sum mean amax amin max min argmax argmin prod any all cumsum cumprod cummax cummin "
        "aminmax count_nonzero nansum nanmean".split(),
        1.0,
    ),
    "logsumexp": 4.0, "var": 3.0, "std": 4.0, "var_mean": 3.0, "std_mean": 4.0,
    "linalg_vector_norm": 2.0, "norm": 2.0, "frobenius_norm": 2.0, "dist": 3.0,
    "mse_loss": 3.0, "l1_loss": 3.0, "smooth_l1_loss": 4.0, "huber_loss": 4.0, "soft_margin_loss": 4.0,
    "binary_cross_entropy": 6.0, "binary_cross_entropy_with_logits": 8.0, "kl_div": 4.0,
    "nll_loss_forward": 1.0, "nll_loss2d_forward": 1.0, "multi_margin_loss": 4.0,
    "multilabel_margin_loss_forward": 4.0, "hinge_embedding_loss": 3.0,
}
# Norms: mean (1), variance (3), normalise (2), affine (2) per element.
_NORM: dict[str, float] = dict.fromkeys(
    "native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_functional "
    "_native_batch_norm_legit_no_training native_layer_norm native_group_norm instance_norm "
    "_batch_norm_with_update _batch_norm_no_update cudnn_batch_norm".split(),
    8.0,
)
_NORM.update({"_fused_rms_norm": 4.0, "rms_norm": 4.0, "local_response_norm": 6.0})
# max, subtract, exp, sum, divide (log_softmax: log instead of divide)
_SOFTMAX: dict[str, float] = {"_softmax": 5.0, "_log_softmax": 5.0, "softmax": 5.0, "log_softmax": 5.0,
                               "_safe_softmax": 5.0}
_POOL_WINDOW = {
    "max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "max_pool3d_with_indices",
    "avg_pool1d", "avg_pool2d", "avg_pool3d", "max_pool1d_with_indices",
}
_POOL_ADAPTIVE = {"_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_max_pool2d",
                  "adaptive_max_pool3d", "_adaptive_avg_pool1d", "adaptive_max_pool1d"}
_UPSAMPLE = {"upsample_bilinear2d": 8.0, "upsample_bicubic2d": 30.0, "upsample_trilinear3d": 16.0,
             "upsample_linear1d": 4.0, "upsample_nearest1d": 0.0, "upsample_nearest2d": 0.0,
             "upsample_nearest3d": 0.0, "grid_sampler_2d": 12.0}

# Ops that only describe memory (no bytes move, no launch); views are detected by `is_view` too.
_METADATA = set(
    "view _unsafe_view reshape t transpose permute expand expand_as squeeze unsqueeze slice select "
    "as_strided alias detach lift_fresh split split_with_sizes unsafe_split unsafe_split_with_sizes "
    "unbind chunk narrow view_as_real view_as_complex _reshape_alias unfold movedim diagonal "
    "empty empty_like empty_strided new_empty new_empty_strided _to_copy_noop sym_size sym_stride "
    "sym_numel sym_storage_offset is_same_size _local_scalar_dense resize_ set_".split()
)


def _tensor_bytes(t: Any) -> float:
    """Bytes a tensor's elements occupy; a broadcast (stride-0) view counts its storage only."""
    n = t.numel() * t.element_size()
    try:
        storage = t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return float(n)
    return float(min(n, storage)) if storage else float(n)


def _storage_key(t: Any) -> int | None:
    try:
        return t.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError, AttributeError):
        return None


def _view_key(t: Any) -> tuple:
    return (_storage_key(t), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


def _is_float(t: Any) -> bool:
    return t.is_floating_point() or t.is_complex()


def _rule_flops(name: str, func: Any, args: tuple, kwargs: dict, tensors_in: list, tensors_out: list) -> tuple[OpKind, float]:
    """(kind, FLOPs) of a non-matmul op by the documented rules."""
    out_elems = max((t.numel() for t in tensors_out if _is_float(t)), default=0)
    in_elems = max((t.numel() for t in tensors_in if _is_float(t)), default=0)
    if name == "gelu":
        approx = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
        return "elementwise", _GELU_FLOPS.get(approx, 5.0) * out_elems
    if name in _ELEMENTWISE:
        return "elementwise", _ELEMENTWISE[name] * (out_elems or in_elems)
    if name in _SOFTMAX:
        return "softmax", _SOFTMAX[name] * in_elems
    if name in _NORM:
        return "norm", _NORM[name] * in_elems
    if name in _REDUCTION:
        return "reduction", _REDUCTION[name] * in_elems
    if name in _POOL_WINDOW:
        kernel = args[1] if len(args) > 1 else kwargs.get("kernel_size", (1,))
        kernel = list(kernel) if isinstance(kernel, (list, tuple)) else [int(kernel)]
        if len(kernel) == 1:  # one size for every spatial dim
            spatial = max(len(tensors_in[0].shape) - 2, 1) if tensors_in else 1
            kernel = kernel * spatial
        return "pool", float(math.prod(kernel)) * out_elems
    if name in _POOL_ADAPTIVE:
        return "pool", float(in_elems)
    if name in _UPSAMPLE:
        return "elementwise", _UPSAMPLE[name] * out_elems
    return "data", 0.0


class _WorkCounter:
    """The dispatch mode's bookkeeping (kept apart so the mode class stays small)."""

    def __init__(self, external: dict[int, float]):
        from torch.utils.flop_counter import flop_registry

        self.flop_registry = flop_registry
        self.external = external  # storage key -> bytes, for inputs, parameters and buffers
        self.external_read: set[int] = set()
        self.rows: OrderedDict[str, OpRow] = OrderedDict()
        self.launches = 0
        self.unknown: set[str] = set()

    def record(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        import torch
        from torch.utils._pytree import tree_flatten

        name = func.overloadpacket.__name__
        base = name.rstrip("_") if not name.startswith("__") else name
        if getattr(func, "is_view", False) or base in _METADATA or name in _METADATA:
            return
        flat_in = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        flat_out = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        seen: set[tuple] = set()
        bytes_read = 0.0
        for t in flat_in:
            key = _view_key(t)
            if key in seen:
                continue
            seen.add(key)
            bytes_read += _tensor_bytes(t)
            sk = key[0]
            if sk in self.external:
                self.external_read.add(sk)
        bytes_written = sum(_tensor_bytes(t) for t in flat_out)
        packet = func.overloadpacket
        if packet in self.flop_registry:
            kind: OpKind = "matmul"
            flops = float(self.flop_registry[packet](*args, **kwargs, out_val=out))
        elif base.startswith("_scaled_dot_product") and len(flat_in) >= 3:
            # Attention kernels torch's counter lacks (the CPU ones): Q·K^T and P·V, 2 FLOPs per MAC.
            q, k, v = flat_in[:3]
            batch = math.prod(q.shape[:-2])
            kind, flops = "matmul", 2.0 * batch * q.shape[-2] * k.shape[-2] * (q.shape[-1] + v.shape[-1])
        else:
            kind, flops = _rule_flops(base, func, args, kwargs, flat_in, flat_out)
            if kind == "data" and base not in _DATA_OPS and any(_is_float(t) for t in flat_out):
                kind = "other"
                self.unknown.add(base)
        self.add(base, kind, flops, bytes_read, bytes_written)

    def add(self, op: str, kind: OpKind, flops: float, bytes_read: float, bytes_written: float,
            calls: int = 1, launches: int = 1) -> None:
        row = self.rows.setdefault(op, OpRow(op=op, kind=kind))
        row.calls += calls
        row.flops += flops
        row.bytes_read += bytes_read
        row.bytes_written += bytes_written
        self.launches += launches

    def mark_read(self, tensors: list) -> float:
        """Mark external tensors as read; returns the bytes of all of them."""
        total = 0.0
        for t in tensors:
            key = _storage_key(t)
            if key in self.external:
                self.external_read.add(key)
            total += _tensor_bytes(t)
        return total


# Ops that move data without arithmetic (no FLOPs by design, not "unknown").
_DATA_OPS = set(
    "clone copy _to_copy contiguous cat stack constant_pad_nd reflection_pad1d reflection_pad2d "
    "reflection_pad3d replication_pad1d replication_pad2d replication_pad3d pad flip roll repeat "
    "index index_select gather scatter scatter_add index_put index_add embedding zeros zeros_like "
    "ones ones_like full full_like fill scalar_tensor arange linspace tril triu masked_select "
    "nonzero sort topk rand rand_like randn randn_like randint normal uniform tensor lift "
    "_unsafe_index pixel_shuffle pixel_unshuffle channel_shuffle im2col col2im one_hot "
    "new_zeros new_ones new_full diag diag_embed tile repeat_interleave take".split()
)


# The operands of matrix products, which real kernels (CPU and GPU) require of one dtype but the meta device does
# not check: argument positions by op. Without this, int64 inputs to a float nn.Linear count as a problem.
_SAME_DTYPE_OPERANDS = {"mm": (0, 1), "bmm": (0, 1), "mv": (0, 1), "dot": (0, 1), "vdot": (0, 1),
                        "addmm": (1, 2), "baddbmm": (1, 2), "addbmm": (1, 2), "addmv": (1, 2), "_addmm_activation": (1, 2)}


def _check_operand_dtypes(func: Any, args: tuple) -> None:
    positions = _SAME_DTYPE_OPERANDS.get(func.overloadpacket.__name__)
    if positions is None or len(args) <= max(positions):
        return
    a, b = args[positions[0]], args[positions[1]]
    if getattr(a, "dtype", None) is not None and getattr(b, "dtype", None) is not None and a.dtype != b.dtype:
        names = [str(t.dtype).removeprefix("torch.") for t in (a, b)]
        raise ProblemInputError(
            f"the forward fails on its own inputs: its {func.overloadpacket.__name__} multiplies {names[0]} by "
            f"{names[1]} tensors, which PyTorch refuses on real tensors (do get_inputs() and the model's parameters "
            "agree on a dtype?)")


def _make_mode(counter: _WorkCounter):
    from torch.utils._python_dispatch import TorchDispatchMode

    class _CountingMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            _check_operand_dtypes(func, args)
            out = func(*args, **kwargs)
            counter.record(func, args, kwargs, out)
            return out

    return _CountingMode()


# Recurrent layers: counted in closed form, since their per-timestep decomposition is thousands
# of tiny ops (seconds on meta tensors). Per timestep, layer and direction, every 2-D weight W is
# applied once to a batch (2·B·numel(W) FLOPs), each bias added once, and the cell's elementwise
# work costs _RNN_CELL_FLOPS per hidden unit (LSTM: 3 sigmoid, 2 tanh, 5 mul/add).
_RNN_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
_RNN_CELL_FLOPS = {"lstm": 16.0, "gru": 14.0, "rnn_tanh": 2.0, "rnn_relu": 2.0}


def _count_rnn(counter: _WorkCounter, name: str, args: tuple) -> Any:
    import torch

    x, hx, params, has_biases, num_layers, _dropout, _train, bidirectional, batch_first = args[:9]
    directions = 2 if bidirectional else 1
    unbatched = x.dim() == 2
    if unbatched:
        steps, batch = x.shape[0], 1
    else:
        steps, batch = (x.shape[1], x.shape[0]) if batch_first else (x.shape[0], x.shape[1])
    h0 = hx[0] if isinstance(hx, (tuple, list)) else hx
    c0 = hx[1] if isinstance(hx, (tuple, list)) and len(hx) > 1 else None
    h_out = h0.shape[-1]
    hidden = c0.shape[-1] if c0 is not None else h_out
    weights = [w for w in params if w.dim() == 2]
    biases = [b for b in params if b.dim() == 1]
    tokens = batch * steps
    flops_gemm = sum(2.0 * tokens * w.numel() for w in weights)
    flops_cell = tokens * num_layers * directions * hidden * _RNN_CELL_FLOPS[name] + sum(
        tokens * b.numel() for b in biases)
    es = x.element_size()
    out_shape = (steps, directions * h_out) if unbatched else (
        (batch, steps, directions * h_out) if batch_first else (steps, batch, directions * h_out))
    output = torch.empty(out_shape, dtype=x.dtype, device=x.device)
    h_n = torch.empty(h0.shape, dtype=h0.dtype, device=h0.device)
    outs = [output, h_n]
    if c0 is not None:
        outs.append(torch.empty(c0.shape, dtype=c0.dtype, device=c0.device))
    states = [h0] + ([c0] if c0 is not None else [])
    read = counter.mark_read([x, *states, *params])
    written = sum(_tensor_bytes(t) for t in outs)
    # Unfused: every timestep re-reads its layer's weights and round-trips its gates and states.
    weight_bytes = sum(_tensor_bytes(w) for w in params)
    per_step = es * batch * (2 * _RNN_GATES[name] * hidden + 4 * hidden) * num_layers * directions
    launches = steps * num_layers * directions
    counter.add(name, "matmul", flops_gemm, read + steps * weight_bytes, written + steps * per_step, launches=launches)
    counter.add(f"{name}_cell", "elementwise", flops_cell, 0.0, 0.0, launches=0)
    return (output, outs[1], outs[2]) if name == "lstm" else (output, outs[1])


def _make_function_mode(counter: _WorkCounter):
    from torch.overrides import TorchFunctionMode

    class _RecurrentMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if name in _RNN_GATES and not kwargs and len(args) == 9 and isinstance(args[2], (list, tuple)) \
                    and isinstance(args[3], bool) and hasattr(args[0], "dim"):
                return _count_rnn(counter, name, args)
            return func(*args, **(kwargs or {}))

    return _RecurrentMode()


# ---------------------------------------------------------------------------------------------
# Loading a KernelBench-format problem


def _one_line_error(path: Path, exc: BaseException, what: str) -> str:
    line = ""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if Path(frame.filename).resolve() == path.resolve():
            line = f":{frame.lineno}"
            break
    message = " ".join(str(exc).split()) or type(exc).__name__
    if len(message) > 300:
        message = message[:297] + "..."
    return f"{path}{line}: {what}: {type(exc).__name__}: {message}"


def load_module(path: str | Path):
    """Import a problem file under a private module name; ProblemLoadError on any failure."""
    path = Path(path)
    if not path.is_file():
        raise ProblemLoadError(f"{path}: no such problem file")
    mod_name = f"_mucutlass_sol_problem_{abs(hash(str(path.resolve())))}"
    try:
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            raise ProblemLoadError(f"{path}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module  # dataclasses and pickling look modules up here
        try:
            with time_limit(f"{path}: importing the problem"):
                spec.loader.exec_module(module)
        finally:
            sys.modules.pop(mod_name, None)
    except (ProblemLoadError, TimeLimitExceeded):
        raise
    except BaseException as exc:  # a problem file may raise anything, SystemExit included
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise ProblemLoadError(_one_line_error(path, exc, "import failed")) from None
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise ProblemLoadError(
            f"{path}: not a KernelBench problem: missing {', '.join(missing)} "
            "(define class Model(nn.Module), get_inputs() and get_init_inputs())"
        )
    return module


def _resolve(problem: Problem | str | Path) -> tuple[Path, Any, str]:
    """(path, module or None, name) from a path or a problem (whose module is imported again from its path
    where it is not a KernelBench module)."""
    if isinstance(problem, (str, Path)):
        path = Path(problem)
        return path, None, path.stem
    path = Path(problem.path)
    module = problem.module
    if module is not None and not all(hasattr(module, n) for n in ("Model", "get_inputs", "get_init_inputs")):
        module = None
    return path, module, problem.name or path.stem


def _to_meta(obj: Any) -> Any:
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.to("meta") if isinstance(t, torch.Tensor) and t.device.type != "meta" else t, obj)


# A forward that fails on meta tensors is counted on real CPU tensors only up to this footprint.
CPU_FALLBACK_LIMIT_BYTES = 1 << 30


def _build_and_run(module: Any, device: str, seed: int, info: dict | None = None, where: str = "the problem"):
    """Build Model and inputs on ``device`` ("meta" or "cpu"), run forward under the counter.
    ``info["footprint_bytes"]`` is set once the model and inputs exist. ``where`` names the file in the
    time limits of its calls."""
    import torch
    from torch.distributions import Distribution
    from torch.utils._pytree import tree_flatten

    validate = Distribution._validate_args
    torch.manual_seed(seed)
    # Distribution argument checks call .item(), which meta tensors cannot answer.
    Distribution.set_default_validate_args(device != "meta")
    try:
        with torch.device(device):
            model, inputs = _construct(module, seed, where)
    finally:
        Distribution.set_default_validate_args(validate)
    if device == "meta":
        model = model.to("meta")
        inputs = _to_meta(inputs)
    external: dict[int, float] = {}
    input_bytes = 0.0
    for t in tree_flatten(inputs)[0]:
        if isinstance(t, torch.Tensor):
            key = _storage_key(t)
            if key is not None and key not in external:
                external[key] = _tensor_bytes(t)
                input_bytes += external[key]
    param_keys: dict[int, float] = {}
    for t in list(model.parameters()) + list(model.buffers()):
        key = _storage_key(t)
        if key is not None and key not in external:
            param_keys[key] = float(t.untyped_storage().nbytes() or _tensor_bytes(t))
    external.update(param_keys)
    if info is not None:
        info["footprint_bytes"] = sum(external.values())
    counter = _WorkCounter(external)
    with torch.no_grad(), _make_function_mode(counter), _make_mode(counter), \
            time_limit(f"{where}: Model.forward on {device} tensors"):
        out = model(*inputs)
    outputs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
    return counter, param_keys, input_bytes, outputs


def _construct(module: Any, seed: int, where: str) -> tuple[Any, list]:
    import torch

    with time_limit(f"{where}: get_init_inputs()"):
        init_inputs = module.get_init_inputs()
    init_inputs = list(init_inputs) if isinstance(init_inputs, (list, tuple)) else [init_inputs]
    with time_limit(f"{where}: Model()"):
        model = module.Model(*init_inputs)
    torch.manual_seed(seed)
    with time_limit(f"{where}: get_inputs()"):
        inputs = module.get_inputs()
    if inputs is None:
        raise ProblemInputError("get_inputs() returned None; it returns the list of forward arguments")
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and (x.is_complex() or x.dtype == torch.float64):
            raise ProblemInputError(
                f"get_inputs()[{i}] is {str(x.dtype).removeprefix('torch.')}; the bound and the kernels take "
                "float32, float16 or bfloat16 tensors (and integer indices)")
    return model, inputs


_warm: list[bool] = []


def warm_up() -> None:
    """Pay the first count's one-time cost (about a second: PyTorch's meta kernels and dispatch machinery load)
    with a two-by-two Linear of our own, so that a child process forked afterwards to count a problem starts
    warm, and so does this process's own count after it."""
    if _warm:
        return
    import types

    import torch

    module = types.ModuleType("warm-up")
    module.Model, module.get_inputs, module.get_init_inputs = (lambda: torch.nn.Linear(2, 2)), (lambda: [torch.ones(1, 2)]), list
    try:
        count_problem(ProblemValue(name="warm-up", path="warm-up", module=module))
    except ProblemLoadError:  # a loaded machine's first count past the time limit: nothing was warmed, nothing failed
        return
    _warm.append(True)


def count_problem(problem: Problem | str | Path, seed: int = 0) -> WorkCount:
    """FLOPs and bytes of a KernelBench-format problem (a path, or an object with ``.path``).

    The model and its inputs are built on the meta device; a problem whose forward needs real
    values (``.item()``, data-dependent shapes) is counted again on CPU tensors, with a note.
    Raises ProblemLoadError with a one-line message for a file that cannot be loaded or run.
    """
    if not isinstance(problem, (str, Path)) and problem.setup_error:  # its setup failed where it was checked: never run here
        raise ProblemLoadError(problem.setup_error)
    with warnings.catch_warnings():
        # a problem's own warnings (deprecations, perf hints) are not about its work
        warnings.simplefilter("ignore")
        path = _resolve(problem)[0]
        import torch  # noqa: F401 - loaded before the clock starts: its import time is not the problem's

        try:
            with time_limit(f"{path}: building and running Model"):
                return _count_problem(problem, seed)
        except TimeLimitExceeded as exc:
            raise ProblemLoadError(str(exc)) from None


def _count_problem(problem: Problem | str | Path, seed: int) -> WorkCount:
    path, module, name = _resolve(problem)
    if module is None:
        module = load_module(path)
    notes: list[str] = []
    try:
        info: dict[str, float] = {}
        counter, param_keys, input_bytes, outputs = _build_and_run(module, "meta", seed, info, str(path))
    except BaseException as meta_exc:  # noqa: BLE001 - a problem may raise anything
        if isinstance(meta_exc, (KeyboardInterrupt, TimeLimitExceeded)):
            raise
        if isinstance(meta_exc, ProblemInputError):
            raise ProblemLoadError(f"{path}: {meta_exc}") from None
        footprint = info.get("footprint_bytes", 0.0)
        if footprint > CPU_FALLBACK_LIMIT_BYTES:
            raise ProblemLoadError(
                _one_line_error(path, meta_exc, "forward needs real tensor values (it fails on the meta device) "
                                f"and its {footprint / 2**30:.1f} GiB of tensors are too large to count on the CPU")
            ) from None
        try:
            counter, param_keys, input_bytes, outputs = _build_and_run(module, "cpu", seed, where=str(path))
            notes.append(f"counted on CPU tensors: the meta device failed ({type(meta_exc).__name__})")
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, (KeyboardInterrupt, TimeLimitExceeded)):
                raise
            raise ProblemLoadError(_one_line_error(path, exc, "running Model failed")) from None
    output_bytes = sum(_tensor_bytes(o) for o in outputs)
    param_read = sum(b for k, b in param_keys.items() if k in counter.external_read)
    input_read = sum(b for k, b in counter.external.items() if k in counter.external_read and k not in param_keys)
    # An input the forward never reads still has to be passed; only unread parameters are dropped.
    bytes_fused = max(input_bytes, input_read) + param_read + output_bytes
    rows = list(counter.rows.values())
    flops_tensor = sum(r.flops for r in rows if r.kind == "matmul")
    flops_other = sum(r.flops for r in rows if r.kind != "matmul")
    if counter.unknown:
        notes.append("no FLOP rule (counted as 0 FLOPs, bytes counted): " + ", ".join(sorted(counter.unknown)))
    return WorkCount(
        name=name,
        source="problem",
        flops=flops_tensor + flops_other,
        flops_tensor=flops_tensor,
        flops_other=flops_other,
        bytes_fused=bytes_fused,
        bytes_unfused=sum(r.bytes_read + r.bytes_written for r in rows),
        input_bytes=input_bytes,
        param_bytes=param_read,
        output_bytes=output_bytes,
        kernel_count=max(counter.launches, 1),
        ops=rows,
        notes=notes,
    )


# ---------------------------------------------------------------------------------------------
# μCUTLASS programs: what their kernels and torch steps must move

# Torch steps that only re-describe contiguous memory: no bytes, no launch.
_FREE_TORCH_STEPS = {"reshape", "view", "flatten", "unflatten", "squeeze", "unsqueeze"}


class ProgramCountError(ValueError):
    """A program whose shapes cannot be worked out; the message says where."""


class StepTraffic(BaseModel):
    """What one step of a program computes and moves."""

    name: str
    kind: Literal["kernel", "row", "torch"]  # row: a reduction / softmax / norm kernel (memory-bound)
    op: str  # gemm, grouped_gemm, conv2d, softmax, ... or the torch function
    dims: tuple[int, int, int, int] | None = None  # (l, m, n, k), the implicit GEMM for conv
    flops_tensor: float = 0.0
    flops_other: float = 0.0
    operand_bytes: float = 0.0  # A and B (x and w)
    aux_bytes: float = 0.0  # epilogue tensors read (bias, residual, scales)
    store_bytes: float = 0.0  # every store, in its dtype
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    launches: int = 1


def _epilogue_cost_per_element(kernel: Any) -> float:
    from dsl_compiler import ir

    cost = 0.0
    for node in epilogue_nodes(kernel):
        if isinstance(node, (ir.Unary, ir.Binary, ir.ParamCall)):
            cost += OPS[node.fn].flops
        elif isinstance(node, ir.Reduce):
            cost += 1.0
    return cost


def _bytes_of(t: Any) -> float:
    from dsl_compiler.ir import ELEMENT_BYTES

    return float(t.numel * ELEMENT_BYTES[t.dtype])


def _torch_step_flops(fn: str, in_elems: int, out_elems: int) -> float:
    base = fn.rstrip("_")
    if base in _SOFTMAX:
        return _SOFTMAX[base] * in_elems
    if base in _NORM or base in {"layer_norm", "group_norm", "batch_norm", "instance_norm"}:
        return 8.0 * in_elems
    if base in _REDUCTION:
        return _REDUCTION[base] * in_elems
    if base == "gelu":
        return _GELU_FLOPS["none"] * out_elems
    return _ELEMENTWISE.get(base, 0.0) * out_elems


_TORCH_PRODUCTS = frozenset({"linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "conv1d", "conv2d", "conv3d",
                             "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"})


def torch_product_flops(step: Any, types: dict[str, Any]) -> float:
    """A torch step's product FLOPs, costed as the GEMM or convolution it is (2 per multiply-add: its output's
    elements times the contraction length): a ``linear`` step is a GEMM, never an elementwise op. 0 for any other
    step, or where the operands' shapes are unknown."""
    from dsl_compiler import ir

    base = step.fn.rstrip("_")
    if base not in _TORCH_PRODUCTS:
        return 0.0
    tensors = [types.get(a.name) for a in step.args if isinstance(a, ir.TensorArg)]
    out = types.get(step.outputs[0]) if step.outputs else None
    if out is None or len(tensors) < 2 or any(t is None for t in tensors[:2]):
        return 0.0
    x, w = tensors[0], tensors[1]
    if base in ("addmm", "baddbmm"):  # (bias, a, b)
        if len(tensors) < 3 or tensors[2] is None:
            return 0.0
        x = tensors[1]
    if base.startswith("conv_transpose"):  # weight [Cin, Cout/g, *k]: each input element meets Cout/g * k taps
        taps = 1
        for d in w.shape[1:]:
            taps *= int(d)
        return 2.0 * x.numel * taps
    if base.startswith("conv"):  # weight [Cout, Cin/g, *k]
        reach = 1
        for d in w.shape[1:]:
            reach *= int(d)
        return 2.0 * out.numel * reach
    return 2.0 * out.numel * int(x.shape[-1]) if x.shape else 0.0


def _permute_is_view(step: Any, types: dict[str, Any]) -> bool:
    """A permute between a dense NHWC buffer and its NCHW-shaped channels-last view moves nothing: the step's
    output is stored as the permute leaves it (``torch_steps.dense`` keeps channels-last strides)."""
    from dsl_compiler import ir

    if step.fn != "permute" or len(step.args) != 2 or not isinstance(step.args[0], ir.TensorArg):
        return False
    src = types.get(step.args[0].name)
    perm = tuple(getattr(step.args[1], "value", ()) or ())
    if src is None or len(perm) != len(src.shape) or len(perm) < 3:
        return False
    r = len(perm)
    to_nchw = (0, r - 1) + tuple(range(1, r - 1))  # dense [N, H, W, C] -> channels-last [N, C, H, W]
    to_nhwc = (0,) + tuple(range(2, r)) + (1,)  # channels-last [N, C, H, W] -> dense [N, H, W, C]
    return (src.layout != "channels_last" and perm == to_nchw) or (src.layout == "channels_last" and perm == to_nhwc)


def program_traffic(program: Any) -> tuple[list[StepTraffic], dict[str, Any]]:
    """Per-step FLOPs and bytes of a program, and the inferred types of its tensors.
    Raises ProgramCountError when shapes cannot be inferred."""
    from dsl_compiler import ir, shapes

    try:
        types = shapes.infer(program)
    except Exception as exc:  # ShapeError, or a torch step that fails on meta tensors
        where = getattr(getattr(exc, "span", None), "line", None)
        prefix = f"line {where}: " if where else ""
        raise ProgramCountError(f"{prefix}cannot infer shapes: {getattr(exc, 'message', exc)}") from None
    steps: list[StepTraffic] = []
    totals = shapes.slice_totals(program)
    for step in program.steps:
        if isinstance(step, ir.RowKernel):
            steps.append(row_traffic(step, types))
        elif isinstance(step, ir.Kernel):
            dims = shapes.gemm_dims(program, step, types)
            op = step.op
            if isinstance(op, ir.GroupedGemmOp):
                flops_tensor = 2.0 * sum(op.group_sizes) * dims.n * dims.k
                out_elems = sum(op.group_sizes) * dims.n
                operands = (op.a.name, op.b.name)
                op_name = "grouped_gemm"
            elif isinstance(op, ir.ConvOp):
                flops_tensor = 2.0 * dims.l * dims.m * dims.n * dims.k
                out_elems = dims.l * dims.m * dims.n
                operands = (op.x.name, op.w.name)
                op_name = op.fn  # conv2d, conv_transpose2d: the implicit GEMM the kernel runs (dgrad's over output pixels)
            else:
                flops_tensor = 2.0 * dims.l * dims.m * dims.n * dims.k
                out_elems = dims.l * dims.m * dims.n
                operands = (op.a.name, op.b.name)
                op_name = "gemm"
            operand_bytes = sum(_bytes_of(types[n]) for n in dict.fromkeys(operands))
            aux = {ref.name for ref in epilogue_refs(step)} - set(operands)
            aux_bytes = sum(_bytes_of(types[n]) for n in aux if n in types)
            # a slice store (store y[a:b]) writes the kernel's own channels of y, not all of y
            store_bytes = sum(out_elems * ir.ELEMENT_BYTES[s.dtype] if s.channels is not None else _bytes_of(types[s.name])
                              for s in step.stores)
            steps.append(StepTraffic(
                name=step.name, kind="kernel", op=op_name, dims=tuple(dims),
                flops_tensor=flops_tensor,
                flops_other=_epilogue_cost_per_element(step) * out_elems,
                operand_bytes=operand_bytes, aux_bytes=aux_bytes, store_bytes=store_bytes,
                bytes_read=operand_bytes + aux_bytes, bytes_written=store_bytes,
            ))
        else:
            ins = [a.name for a in step.args if isinstance(a, ir.TensorArg)]
            ins = list(dict.fromkeys(ins))
            # a channel slice y[a:b] (read or written) moves its share of y only
            share = {a.name: (a.channels[1] - a.channels[0]) / totals[a.name] for a in step.args
                     if isinstance(a, ir.TensorArg) and a.channels is not None and a.name in totals}
            if step.channels is not None and step.outputs[0] in totals:
                share[step.outputs[0]] = (step.channels[1] - step.channels[0]) / totals[step.outputs[0]]
            free = step.fn in _FREE_TORCH_STEPS or _permute_is_view(step, types)
            read = 0.0 if free else sum(_bytes_of(types[n]) * share.get(n, 1.0) for n in ins if n in types)
            written = 0.0 if free else sum(_bytes_of(types[n]) * share.get(n, 1.0) for n in step.outputs if n in types)
            in_elems = max((int(types[n].numel * share.get(n, 1.0)) for n in ins if n in types), default=0)
            out_elems = max((int(types[n].numel * share.get(n, 1.0)) for n in step.outputs if n in types), default=0)
            steps.append(StepTraffic(
                name=",".join(step.outputs), kind="torch", op=step.fn,
                flops_tensor=torch_product_flops(step, types),
                flops_other=0.0 if free else _torch_step_flops(step.fn, in_elems, out_elems),
                bytes_read=read, bytes_written=written, store_bytes=written,
                launches=0 if free else 1,
            ))
    return steps, types


def row_traffic(kernel: Any, types: dict[str, Any]) -> StepTraffic:
    """A row kernel moves x (twice for a two-pass normalization), its affine and tail tensors, and its stores."""
    from dsl_compiler import row_ops

    op = kernel.op
    tx = types[op.x.name]
    x_bytes = _bytes_of(tx) * row_ops.x_reads(kernel, tuple(tx.shape), tx.dtype)
    operand_bytes = x_bytes + sum(_bytes_of(types[o.name]) for o in kernel.operands[1:])
    aux = {ref.name for ref in epilogue_refs(kernel)} - {o.name for o in kernel.operands}
    aux_bytes = sum(_bytes_of(types[n]) for n in aux if n in types)
    store_bytes = sum(_bytes_of(t) for t in row_ops.store_types(kernel, types).values())
    out_elems = math.prod(row_ops.output_shape(op, tuple(tx.shape)))
    return StepTraffic(name=kernel.name, kind="row", op=op.fn, flops_other=row_ops.flops(op, tx.numel, tuple(tx.shape))
                       + _epilogue_cost_per_element(kernel) * out_elems,
                       operand_bytes=operand_bytes, aux_bytes=aux_bytes, store_bytes=store_bytes,
                       bytes_read=operand_bytes + aux_bytes, bytes_written=store_bytes)


def count_program(program: Any) -> WorkCount:
    """FLOPs and bytes of a μCUTLASS program: 2·L·M·N·K per GEMM kernel (conv by its implicit-GEMM
    view, grouped GEMM by its groups), epilogue and torch-step FLOPs by the same rules as problems;
    ``bytes_program``: each kernel reads its operands and epilogue tensors and writes its stores,
    each torch step reads its tensor arguments and writes its outputs (intermediates included);
    ``bytes_fused``: the program's inputs, the params it reads, and its outputs, once."""
    from dsl_compiler import ir

    steps, types = program_traffic(program)
    read_names: set[str] = set()
    for step in program.steps:
        if isinstance(step, ir.RowKernel):
            read_names |= {o.name for o in step.operands} | {ref.name for ref in epilogue_refs(step)}
        elif isinstance(step, ir.Kernel):
            op = step.op
            read_names |= {op.x.name, op.w.name} if isinstance(op, ir.ConvOp) else {op.a.name, op.b.name}
            read_names |= {ref.name for ref in epilogue_refs(step)}
        else:
            read_names |= {a.name for a in step.args if isinstance(a, ir.TensorArg)}
    input_bytes = sum(_bytes_of(types[d.name]) for d in program.inputs)
    param_bytes = sum(_bytes_of(types[d.name]) for d in program.params if d.name in read_names)
    output_bytes = sum(_bytes_of(types[n]) for n in dict.fromkeys(program.outputs) if n in types)
    bytes_program = sum(s.bytes_read + s.bytes_written for s in steps)
    flops_tensor = sum(s.flops_tensor for s in steps)
    flops_other = sum(s.flops_other for s in steps)
    rows = [
        OpRow(op=f"{s.name} ({s.op})", kind="matmul" if s.kind == "kernel" else "other", calls=1,
              flops=s.flops_tensor + s.flops_other, bytes_read=s.bytes_read, bytes_written=s.bytes_written)
        for s in steps
    ]
    return WorkCount(
        name=program.name or "program",
        source="program",
        flops=flops_tensor + flops_other,
        flops_tensor=flops_tensor,
        flops_other=flops_other,
        bytes_fused=input_bytes + param_bytes + output_bytes,
        bytes_unfused=bytes_program,
        bytes_program=bytes_program,
        input_bytes=input_bytes,
        param_bytes=param_bytes,
        output_bytes=output_bytes,
        kernel_count=max(sum(s.launches for s in steps), 1),
        ops=rows,
    )
