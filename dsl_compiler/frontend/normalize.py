"""Normalising traced nodes: every fx node (function, method or module call) becomes one ``Op``
with a canonical name, its tensor arguments and its literal arguments."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from dsl_compiler.frontend.reference import ParamRef
from dsl_compiler.frontend.library_modules import kept_whole, rule_for
from dsl_compiler.frontend.targets import target_name as _target_name
from dsl_compiler.ops import EPILOGUE_OPS, OPS, EpilogueOp


DTYPES = {"torch.float32": "f32", "torch.bfloat16": "bf16", "torch.float16": "f16"}

_ALIASES = {"clone", "detach", "contiguous", "identity", "alias", "_assert_tensor_metadata"}
TRANSPOSES = {"t", "transpose", "permute", "T", "mT", "swapaxes", "swapdims"}
_REDUCTIONS = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min", "max": "max", "min": "min"}

# The op table's functions by their traced names (dsl_compiler.ops). Of one tensor: name -> the functions it can be
# (gelu: gelu or gelu_tanh, by its approximate argument); clamp's calls are read apart (one bound is max or min).
def _one_tensor_functions() -> dict[str, list[EpilogueOp]]:
    found: dict[str, list[EpilogueOp]] = {}
    for op in EPILOGUE_OPS:
        if op.form != "binary" and op.name != "clamp":
            for name in op.traced:
                found.setdefault(name, []).append(op)
    return found


_ONE_TENSOR = _one_tensor_functions()
_PRESETS = {name: (op.name, params) for op in EPILOGUE_OPS for name, params in op.presets}
_CLAMPS = (*OPS["clamp"].traced, "clamp_min", "clamp_max")
# Of two: a name that is a reduction too (torch.max(x, 1)) is the binary function only between two tensors;
# rsub(x, c) is c - x, sub with its operands swapped.
_BINARY = {name: op.name for op in EPILOGUE_OPS if op.form == "binary" for name in op.traced if name not in _REDUCTIONS}
_BINARY["rsub"] = "rsub"
_BINARY_OR_REDUCTION = {name: op.name for op in EPILOGUE_OPS if op.form == "binary" for name in op.traced
                        if name in _REDUCTIONS}
# nn modules: by class name; a parameterised function by isinstance, since a subclass carries its parameters
# (ReLU6 is a Hardtanh)
_MODULE_OPS = tuple(op for op in EPILOGUE_OPS if op.modules)


@dataclass
class Op:
    node: Any
    kind: str  # input param const alias gemm conv ew reduce batch_norm getitem torch output unsupported
    target: str  # readable, for coverage
    name: str = ""  # canonical op name ("relu", "linear")
    operands: list[Any] = field(default_factory=list)  # fx.Node | ParamRef | literal
    torch_fn: str | None = None  # the PyTorch-step form of this op
    torch_args: list[Any] = field(default_factory=list)
    torch_kwargs: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    # gemm: operands [a, b]; conv: operands [x, w]
    a_t: bool = False
    b_t: bool = False
    bias: Any = None
    alpha: float = 1.0
    beta: float = 1.0
    conv: dict[str, Any] = field(default_factory=dict)
    flatten_a: bool = False  # rank > 3 A: reshaped to 2-D around the kernel
    flatten_batch: bool = False  # rank > 3 A and B with the same batch dims: one batched GEMM over all of them
    # ew: fn and literal params
    fn: str = ""
    params: tuple[float, ...] = ()
    # reduce
    dim: int = -1
    keepdim: bool = False
    scale: float = 1.0  # folded scalar factor (mean, a later mul/div)
    shift: float = 0.0  # folded additive constant (max/min)
    index: int = 0  # getitem
    # batch_norm: weight, bias, running mean / var (ParamRef or None), eps, batch_stats
    batch_norm: dict[str, Any] = field(default_factory=dict)


def _arg(node_args, node_kwargs, i, key, default=None):
    if key in node_kwargs:
        return node_kwargs[key]
    if i is not None and i < len(node_args):
        return node_args[i]
    return default


def _tuple(v, n):
    if isinstance(v, (list, tuple)):
        return tuple(int(x) for x in v)
    return (int(v),) * n


def literal(v):
    import torch

    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple, torch.Size)):
        items = tuple(literal(x) for x in v)
        if all(isinstance(x, (bool, int, float, str)) or x is None for x in items):
            return items
        raise ValueError(f"nested value {v!r}")
    if isinstance(v, torch.dtype):
        return str(v).replace("torch.", "")
    if isinstance(v, torch.memory_format):
        return str(v).replace("torch.", "")
    raise ValueError(f"value {v!r} of type {type(v).__name__}")


def _select_index(index) -> tuple[int, int] | None:
    """(dim, i) when ``index`` picks one integer of one dim, all dims before it whole: x[i], x[:, i]."""
    index = index if isinstance(index, tuple) else (index,)
    *whole, last = index
    if isinstance(last, int) and not isinstance(last, bool) and all(s == slice(None) for s in whole):
        return len(whole), last
    return None


def normalize(node, gm, state) -> Op:
    if node.op in ("placeholder", "output", "get_attr"):
        return _normalize_leaf(node, state)
    if node.op == "call_module" and str(node.target) in (getattr(gm, "_mucutlass_opaque", None) or {}):
        return _normalize_opaque_module(node, gm)
    if node.op == "call_module":
        return _normalize_module(node, gm.get_submodule(node.target))
    name, readable = _target_name(node)
    # a number computed from sizes (1 / sqrt(k.size(-1))) is that number: an epilogue constant, not a tensor
    args = [_number(a) for a in node.args]
    kwargs = {k: _number(v) for k, v in node.kwargs.items()}
    op = Op(node, "torch", readable, name=name, torch_fn=name, torch_args=args, torch_kwargs=kwargs)
    if "const" in node.meta:
        op.kind = "const"
        return op
    if node.op == "call_function" and node.target is getattr:
        attr = str(args[1])
        op.torch_args = [args[0]]
        if attr == "T":
            op.torch_fn = "t"
        elif attr == "mT":
            op.torch_fn, op.torch_args = "transpose", [args[0], -2, -1]
        elif attr in ("values", "indices"):  # torch.max(x, dim).values: the tuple's element
            op.kind, op.operands, op.index = "getitem", [args[0]], 0 if attr == "values" else 1
            return op
        else:
            op.kind, op.reason = "unsupported", f"attribute .{attr}"
            return op
    for read in _CALL_READERS:  # the first that knows the call
        if read(op, name, args, kwargs):
            return op
    return op


def _normalize_leaf(node, state) -> Op:
    """A forward() argument, the output, or a tensor attribute of the model."""
    if node.op == "placeholder":
        return Op(node, "input", "input", name=node.name)
    if node.op == "output":
        return Op(node, "output", "output")
    key = str(node.target)
    if key in state:
        return Op(node, "param", f"self.{key}", operands=[ParamRef(key)])
    return Op(node, "unsupported", f"self.{key}", reason="a tensor attribute outside state_dict cannot be bound as a param")


def _normalize_opaque_module(node, gm) -> Op:
    """A submodule torch.fx cannot follow: the model's own module, one named step (its output's shape with it)."""
    module = gm.get_submodule(node.target)
    return module_step_op(node, f"{type(module).__name__} ({node.target})",
                          f"{gm._mucutlass_opaque[node.target]}: kept as one PyTorch step")


def module_step_op(node, readable: str, why: str) -> Op:
    """A call of the model's submodule as one ``module`` step (its outputs' shapes with it): every tensor it gives,
    a tuple's flattened. Unsupported where the call passes keywords or gives something other than tensors."""
    leaves = _meta_leaves(node.meta.get("tensor_meta"))
    shapes = [tuple(int(d) for d in m.shape) for m in leaves if hasattr(m, "shape")]
    if node.kwargs or not shapes or len(shapes) != len(leaves):
        return Op(node, "unsupported", readable,
                  reason=f"{why}; kept whole it would need tensor outputs and positional tensor inputs")
    kwargs: dict[str, Any] = {"path": str(node.target), "shape": tuple(d for s in shapes for d in s)}
    if len(shapes) > 1 or isinstance(node.meta.get("tensor_meta"), (tuple, list)):
        kwargs["ranks"] = tuple(len(s) for s in shapes)
    return Op(node, "torch", readable, name="module", torch_fn="module", torch_args=list(node.args),
              torch_kwargs=kwargs, reason=why)


def _meta_leaves(meta) -> list[Any]:
    """A result's tensor metadata, nested tuples flattened (TensorMetadata, a NamedTuple, is one leaf)."""
    if isinstance(meta, (tuple, list)) and not hasattr(meta, "shape"):
        return [leaf for item in meta for leaf in _meta_leaves(item)]
    return [meta]


def _number(v):
    """``v``, or the number a traced scalar (a size, or arithmetic on sizes) has by the shapes."""
    import torch.fx

    if isinstance(v, torch.fx.Node) and type(v.meta.get("const")) in (int, float):
        return v.meta["const"]
    return v


def _constants_in_index(index):
    """An index with each traced size in it (``x[:, :, :T, :T]``, T = x.size(1)) as the number the shapes gave."""

    def entry(e):
        if isinstance(e, slice):
            return slice(_number(e.start), _number(e.stop), _number(e.step))
        return _number(e)

    return tuple(entry(e) for e in index) if isinstance(index, tuple) else entry(index)


# Readers of a call_function / call_method node, tried in order: each fills in ``op`` and returns True when the call
# is its kind, else returns False and leaves ``op`` as it is.

def _read_getitem(op: Op, name: str, args: list, kwargs: dict) -> bool:
    import torch.fx

    if name != "getitem":
        return False
    args = [args[0], _constants_in_index(args[1])]
    op.kind, op.operands, op.index = "getitem", [args[0]], args[1] if isinstance(args[1], int) else -1
    source_meta = args[0].meta.get("tensor_meta") if isinstance(args[0], torch.fx.Node) else None
    if hasattr(source_meta, "shape"):
        picked = _select_index(args[1])
        if picked is not None:  # x[:, t]: one index of one dim
            op.kind, op.torch_fn, op.torch_args, op.torch_kwargs = "torch", "select", [args[0], *picked], {}
            return True
        from dsl_compiler.torch_steps import index_spec

        spec = index_spec(args[1])
        if spec is None:
            op.kind, op.reason = "unsupported", "indexing by a tensor or a list (advanced indexing) has no program form"
            return True
        op.kind, op.torch_fn, op.torch_args, op.torch_kwargs = "torch", "index", [args[0], spec], {}
    elif op.index < 0:
        op.kind, op.reason = "unsupported", "indexing by slices has no μCUTLASS form"
    return True


def _is_device(v) -> bool:
    """A device: a tensor's ``.device``, a torch.device or its name (a program runs where its inputs are)."""
    import torch
    import torch.fx

    if isinstance(v, torch.fx.Node):
        return v.op == "call_function" and v.target is getattr and len(v.args) == 2 and v.args[1] == "device"
    return isinstance(v, torch.device) or (isinstance(v, str) and v.split(":")[0] in ("cpu", "cuda"))


def _to_device_only(args: list, kwargs: dict) -> bool:
    """``x.to(other.device)`` (or a device's name): the values as they are, on the device the program runs on."""
    devices = list(args[1:]) + [v for k, v in kwargs.items() if k == "device"]
    others = {k: v for k, v in kwargs.items() if k != "device"}
    return bool(devices) and all(_is_device(d) for d in devices) and all(
        k in ("non_blocking", "copy") and not v for k, v in others.items())


def _read_alias(op: Op, name: str, args: list, kwargs: dict) -> bool:
    if name in _ALIASES or (name == "dropout" and _dropout_is_identity(args, kwargs)) or (
            name == "to" and not kwargs and len(args) == 1) or (name == "to" and _to_device_only(args, kwargs)):
        op.kind, op.operands = "alias", [args[0]]
        return True
    return False


def _read_gemm(op: Op, name: str, args: list, kwargs: dict) -> bool:
    if name in ("linear",):
        op.kind, op.operands = "gemm", [args[0], _arg(args, kwargs, 1, "weight")]
        op.b_t = True
        op.bias = _arg(args, kwargs, 2, "bias")
    elif name in ("matmul", "mm", "bmm"):
        op.kind, op.operands = "gemm", [args[0], _arg(args, kwargs, 1, "other", _arg(args, kwargs, 1, "mat2"))]
    elif name in ("addmm", "baddbmm"):
        op.kind = "gemm"
        op.operands = [_arg(args, kwargs, 1, "mat1", _arg(args, kwargs, 1, "batch1")), _arg(args, kwargs, 2, "mat2", _arg(args, kwargs, 2, "batch2"))]
        op.bias = args[0]
        op.beta = float(kwargs.get("beta", 1.0))
        op.alpha = float(kwargs.get("alpha", 1.0))
    elif name == "einsum":
        _normalize_einsum(op, args)
    else:
        return False
    return True


def _read_batch_norm(op: Op, name: str, args: list, kwargs: dict) -> bool:
    if name == "batch_norm" and getattr(op.node.target, "__module__", "") == "torch.nn.functional":
        _normalize_functional_batch_norm(op, args, kwargs)
        return True
    return False


def _read_conv(op: Op, name: str, args: list, kwargs: dict) -> bool:
    if name in ("conv_transpose1d", "conv_transpose2d", "conv_transpose3d"):
        return _read_conv_transpose(op, name, args, kwargs)
    if name not in ("conv1d", "conv2d", "conv3d"):
        return False
    dims = int(name[4])
    padding = _arg(args, kwargs, 4, "padding", 0)
    op.kind = "conv"
    op.operands = [args[0], _arg(args, kwargs, 1, "weight")]
    op.bias = _arg(args, kwargs, 2, "bias")
    op.conv = dict(
        dims=dims,
        stride=_tuple(_arg(args, kwargs, 3, "stride", 1), dims),
        padding=padding if isinstance(padding, str) else _tuple(padding, dims),
        dilation=_tuple(_arg(args, kwargs, 5, "dilation", 1), dims),
        groups=int(_arg(args, kwargs, 6, "groups", 1)),
    )
    return True


def _read_conv_transpose(op: Op, name: str, args: list, kwargs: dict) -> bool:
    """F.conv_transpose*d(input, weight, bias, stride, padding, output_padding, groups, dilation): a conv kernel
    whose geometry says ``transposed``."""
    dims = int(name[-2])
    op.kind = "conv"
    op.operands = [args[0], _arg(args, kwargs, 1, "weight")]
    op.bias = _arg(args, kwargs, 2, "bias")
    op.conv = conv_transpose_geometry(
        dims, _arg(args, kwargs, 3, "stride", 1), _arg(args, kwargs, 4, "padding", 0),
        _arg(args, kwargs, 5, "output_padding", 0), int(_arg(args, kwargs, 6, "groups", 1)),
        _arg(args, kwargs, 7, "dilation", 1))
    return True


def conv_transpose_geometry(dims: int, stride, padding, output_padding, groups: int, dilation) -> dict:
    """A transposed conv's ``Op.conv``: the forward conv's keys, ``output_padding`` and ``transposed``."""
    return dict(dims=dims, stride=_tuple(stride, dims), padding=_tuple(padding, dims), dilation=_tuple(dilation, dims),
                groups=groups, output_padding=_tuple(output_padding, dims), transposed=True)


def _read_elementwise(op: Op, name: str, args: list, kwargs: dict) -> bool:
    """A call of an op-table function of one tensor: its literal parameters read by keyword or position, its options
    (gelu's approximate) choosing the function; a call with other options stays a PyTorch step."""
    if name in _PRESETS:
        fn, params = _PRESETS[name]
        op.kind, op.fn, op.operands, op.params = "ew", fn, [args[0]], params
        return True
    candidates = _ONE_TENSOR.get(name)
    if not candidates:
        return False
    for eop in candidates:
        if all(_arg(args, kwargs, a.position, a.key, a.default) == value for a, value in eop.options):
            op.kind, op.fn, op.operands = "ew", eop.name, [args[0]]
            op.params = tuple(float(_arg(args, kwargs, p.position, p.key, p.default)) for p in eop.params)
            return True
    op.reason = f"{name} with " + " or ".join(f"{a.key} != {value}" for a, value in candidates[0].options)
    return True


def _read_clamp(op: Op, name: str, args: list, kwargs: dict) -> bool:
    """clamp / clip with both bounds: the clamp function; one bound: max or min with a number; none: an alias."""
    import torch.fx

    if name not in _CLAMPS:
        return False
    lo = _arg(args, kwargs, 1, "min") if name != "clamp_max" else None
    hi = _arg(args, kwargs, 2, "max") if name in OPS["clamp"].traced else None
    if name == "clamp_max":
        hi = _arg(args, kwargs, 1, "max")
    if isinstance(lo, torch.fx.Node) or isinstance(hi, torch.fx.Node):
        op.reason = "clamp with tensor bounds"
        return True
    op.kind, op.operands = "ew", [args[0]]
    if lo is not None and hi is not None:
        op.fn, op.params = "clamp", (float(lo), float(hi))
    elif lo is not None:
        op.fn, op.operands = "max", [args[0], float(lo)]
    elif hi is not None:
        op.fn, op.operands = "min", [args[0], float(hi)]
    else:
        op.kind = "alias"
    return True


def _read_binary(op: Op, name: str, args: list, kwargs: dict) -> bool:
    import torch.fx

    if not (name in _BINARY or name in _BINARY_OR_REDUCTION and _is_binary_minmax(args, kwargs)):
        return False
    if name in ("add", "sub") and ("alpha" in kwargs or len(args) > 2):
        op.reason = f"{name} with alpha"
        return True
    fn = {**_BINARY, **_BINARY_OR_REDUCTION}[name]
    lhs, rhs = args[0], _arg(args, kwargs, 1, "other")
    if fn == "rsub":
        fn, lhs, rhs = "sub", rhs, lhs
    if name == "div" and kwargs.get("rounding_mode") is not None:
        op.reason = "division with a rounding mode"
        return True
    op.kind, op.fn, op.operands = "ew", fn, [lhs, rhs]
    if not isinstance(lhs, torch.fx.Node) and isinstance(rhs, torch.fx.Node):
        # PyTorch functions take the tensor first: 2 * x -> mul(x, 2), 1 - x -> rsub(x, 1)
        swapped = {"add": "add", "mul": "mul", "sub": "rsub", "min": "clamp_max", "max": "clamp_min"}
        if fn in swapped:
            op.torch_fn, op.torch_args, op.torch_kwargs = swapped[fn], [rhs, lhs], {}
    elif fn in ("min", "max") and not isinstance(rhs, torch.fx.Node):
        op.torch_fn = "clamp_max" if fn == "min" else "clamp_min"
    if fn == "pow" and rhs == 2:
        op.fn, op.operands = "square", [lhs]
    return True


def _read_reduction(op: Op, name: str, args: list, kwargs: dict) -> bool:
    if name not in _REDUCTIONS:
        return False
    dim = _arg(args, kwargs, 1, "dim")
    keepdim = bool(_arg(args, kwargs, 2, "keepdim", False))
    if isinstance(dim, (list, tuple)) and len(dim) == 1:
        dim = dim[0]
    if isinstance(dim, int) and not kwargs.get("dtype"):
        op.kind, op.fn, op.operands, op.dim, op.keepdim = "reduce", _REDUCTIONS[name], [args[0]], dim, keepdim
        op.index = 1 if name in ("max", "min") else 0  # torch.max(x, dim) returns (values, indices)
    else:
        op.reason = f"{name} over several dims or all elements"
    return True


def _read_transpose(op: Op, name: str, args: list, kwargs: dict) -> bool:
    if name not in TRANSPOSES:
        return False
    op.kind = "torch"
    op.fn = "transpose"
    op.operands = [args[0]]
    return True


_CALL_READERS = (_read_getitem, _read_alias, _read_gemm, _read_batch_norm, _read_conv, _read_elementwise, _read_clamp,
                 _read_binary, _read_reduction, _read_transpose)


def _normalize_functional_batch_norm(op: Op, args, kwargs) -> Op:
    """F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps): the same op as the module
    (folded where it can be, else the batch_norm step, whose arguments are x, weight, bias[, running stats])."""
    x, mean, var = args[0], _arg(args, kwargs, 1, "running_mean"), _arg(args, kwargs, 2, "running_var")
    weight, bias = _arg(args, kwargs, 3, "weight"), _arg(args, kwargs, 4, "bias")
    training, eps = bool(_arg(args, kwargs, 5, "training", False)), float(_arg(args, kwargs, 7, "eps", 1e-5))
    batch_stats = training or mean is None or var is None
    op.kind, op.operands = "batch_norm", [x]
    op.batch_norm = dict(weight=weight, bias=bias, eps=eps, batch_stats=batch_stats,
                         mean=None if batch_stats else mean, var=None if batch_stats else var)
    op.torch_args = [x, weight, bias] + ([] if batch_stats else [mean, var])
    op.torch_kwargs = dict(eps=eps)
    op.reason = "F.batch_norm has no μCUTLASS kernel form"
    return op


def _dropout_is_identity(args, kwargs) -> bool:
    p = _arg(args, kwargs, 1, "p", 0.5)
    training = _arg(args, kwargs, 2, "training", True)
    return p == 0 or not training


def _is_binary_minmax(args, kwargs) -> bool:
    import torch.fx

    other = _arg(args, kwargs, 1, "other")
    if isinstance(other, (int, float)) and not isinstance(other, bool) and "dim" not in kwargs:
        return False  # torch.max(x, 1) is a reduction
    return isinstance(other, torch.fx.Node) and other.meta.get("tensor_meta") is not None and "dim" not in kwargs


_EINSUM_TERM = re.compile(r"^[a-zA-Z]+$")


def _normalize_einsum(op: Op, args) -> Op:
    equation = args[0]
    operands = list(args[1:])
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = list(operands[0])
    try:
        lhs, out = equation.replace(" ", "").split("->")
        ta, tb = lhs.split(",")
    except (ValueError, AttributeError):
        op.reason = "einsum that is not a two-operand product with an explicit output"
        return op
    if len(operands) != 2 or not all(_EINSUM_TERM.match(t) for t in (ta, tb, out)):
        op.reason = "einsum that is not a two-operand product"
        return op
    batch = [c for c in out if c in ta and c in tb]
    m = [c for c in ta if c in out and c not in tb]
    n = [c for c in tb if c in out and c not in ta]
    k = [c for c in ta if c in tb and c not in out]
    if len(k) != 1 or len(n) != 1 or not m or len(batch) > 1 or len(set(ta + tb)) != len(batch) + len(m) + len(n) + len(k):
        op.reason = f"einsum {equation} is not of GEMM form (one contracted index, one column index)"
        return op
    (kk,), (nn_,) = k, n
    if batch and not (ta[0] == batch[0] and tb[0] == batch[0] and out[0] == batch[0]):
        op.reason = f"einsum {equation}: the batch index is not leading"
        return op
    ta_core, tb_core, out_core = ta[len(batch):], tb[len(batch):], out[len(batch):]
    if len(m) > 1:
        # several row indices: fine when they lead A and the output, in order, with K last in A
        if batch or ta_core != "".join(m) + kk or out_core != "".join(m) + nn_:
            op.reason = f"einsum {equation}: row indices are not contiguous"
            return op
        a_t = False
    elif ta_core == m[0] + kk:
        a_t = False
    elif ta_core == kk + m[0]:
        a_t = True
    else:
        op.reason = f"einsum {equation}: unexpected A indices"
        return op
    if tb_core == kk + nn_:
        b_t = False
    elif tb_core == nn_ + kk:
        b_t = True
    else:
        op.reason = f"einsum {equation}: unexpected B indices"
        return op
    if out_core not in (m[0] + nn_ if len(m) == 1 else "".join(m) + nn_,):
        op.reason = f"einsum {equation}: the output is transposed"
        return op
    op.kind, op.operands, op.a_t, op.b_t = "gemm", operands, a_t, b_t
    return op


def _normalize_module(node, module) -> Op:
    import torch.nn as nn

    cls = type(module).__name__
    prefix = str(node.target)
    readable = f"nn.{cls}"
    x = node.args[0] if node.args else None

    def p(attr):
        return ParamRef(f"{prefix}.{attr}") if getattr(module, attr, None) is not None else None

    op = Op(node, "torch", readable, name=cls.lower())
    if isinstance(module, nn.Linear):
        op.kind, op.name, op.operands, op.b_t, op.bias = "gemm", "linear", [x, p("weight")], True, p("bias")
        op.torch_fn, op.torch_args = "linear", [x, p("weight"), p("bias")]
        return op
    if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
        dims = {nn.Conv1d: 1, nn.Conv2d: 2, nn.Conv3d: 3}[type(module)]
        op.name = f"conv{dims}d"
        op.torch_fn, op.torch_args = op.name, [x, p("weight"), p("bias")]
        op.torch_kwargs = dict(stride=tuple(module.stride), padding=module.padding if isinstance(module.padding, str) else tuple(module.padding), dilation=tuple(module.dilation), groups=module.groups)
        if module.padding_mode != "zeros":
            op.reason = f"padding_mode={module.padding_mode!r}"
            return op
        op.kind, op.operands, op.bias = "conv", [x, p("weight")], p("bias")
        op.conv = dict(dims=dims, **op.torch_kwargs)
        return op
    if isinstance(module, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
        dims = {nn.ConvTranspose1d: 1, nn.ConvTranspose2d: 2, nn.ConvTranspose3d: 3}[type(module)]
        op.name = f"conv_transpose{dims}d"
        op.torch_fn, op.torch_args, op.torch_kwargs = _module_functional(module, x, p)
        if module.padding_mode != "zeros" or len(node.args) > 1 or node.kwargs:
            op.reason = "an output_size argument" if module.padding_mode == "zeros" else f"padding_mode={module.padding_mode!r}"
            return op
        op.kind, op.operands, op.bias = "conv", [x, p("weight")], p("bias")
        op.conv = conv_transpose_geometry(dims, module.stride, module.padding, module.output_padding, module.groups,
                                          module.dilation)
        return op
    if isinstance(module, (nn.Identity,)) or (isinstance(module, nn.Dropout) and (module.p == 0 or not module.training)):
        op.kind, op.operands = "alias", [x]
        return op
    found = _module_function(module)
    if found is not None:
        eop, params = found
        op.kind, op.fn, op.params, op.operands = "ew", eop.name, params, [x]
        op.name = eop.name
        op.torch_fn, op.torch_args = eop.torch[0], [x]
        op.torch_kwargs = {**{arg.key: v for arg, v in zip(eop.params, params)},
                           **{arg.key: v for arg, v in eop.options if v != arg.default}}
        return op
    # no kernel form: the functional equivalent as a PyTorch step
    op.torch_fn, op.torch_args, op.torch_kwargs = _module_functional(module, x, p)
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        # folded into the kernel before it where it can be (passes.folding.try_fold_batch_norm), else the step
        batch_stats = module.training or not module.track_running_stats
        op.kind, op.operands = "batch_norm", [x]
        op.batch_norm = dict(weight=p("weight"), bias=p("bias"), eps=float(module.eps), batch_stats=batch_stats,
                             mean=None if batch_stats else p("running_mean"), var=None if batch_stats else p("running_var"))
        op.reason = f"nn.{cls} has no μCUTLASS kernel form"
        return op
    if isinstance(module, nn.Dropout):
        op.kind, op.reason = "unsupported", "dropout with p > 0 in training mode is random: no program can match it"
    elif op.torch_fn is None and rule_for(module) is not None:  # a call frontend.library_modules did not take
        return module_step_op(node, readable, f"nn.{cls} kept as one PyTorch step ({node.target}): "
                                              f"{kept_whole(module, node) or 'its call was not rewritten'}")
    elif op.torch_fn is None:
        return module_step_op(node, readable, f"nn.{cls} has no μCUTLASS or PyTorch-step form: the model's own "
                                              f"module ({node.target}), kept as one PyTorch step")
    else:
        op.reason = f"nn.{cls} has no μCUTLASS kernel form"
    return op


def _module_function(module) -> tuple[EpilogueOp, tuple[float, ...]] | None:
    """The op-table function an nn module computes, with its parameters (the module's attributes), else None."""
    import torch.nn as nn

    for eop in _MODULE_OPS:
        if eop.params or eop.options:
            if not isinstance(module, tuple(getattr(nn, m) for m in eop.modules)):
                continue
            if all(getattr(module, a.key) == value for a, value in eop.options):
                return eop, tuple(float(getattr(module, p.key)) for p in eop.params)
        elif type(module).__name__ in eop.modules:
            return eop, ()
    return None


def _module_functional(m, x, p):
    import torch.nn as nn

    if isinstance(m, nn.modules.batchnorm._BatchNorm):
        if m.training or not m.track_running_stats:
            # the step normalises with the batch's statistics, as a module in training mode does
            return "batch_norm", [x, p("weight"), p("bias")], dict(eps=float(m.eps))
        return "batch_norm", [x, p("weight"), p("bias"), p("running_mean"), p("running_var")], dict(eps=float(m.eps))
    if isinstance(m, nn.GroupNorm):
        return "group_norm", [x, m.num_groups, p("weight"), p("bias")], dict(eps=float(m.eps))
    if isinstance(m, nn.LayerNorm):
        return "layer_norm", [x, tuple(m.normalized_shape), p("weight"), p("bias")], dict(eps=float(m.eps))
    if isinstance(m, getattr(nn, "RMSNorm", ())):
        return "rms_norm", [x, tuple(m.normalized_shape), p("weight")], {} if m.eps is None else dict(eps=float(m.eps))
    if isinstance(m, nn.modules.instancenorm._InstanceNorm):
        if not (m.training or not m.track_running_stats):
            return None, [], {}
        return "instance_norm", [x, p("weight"), p("bias")], dict(eps=float(m.eps))
    if isinstance(m, nn.Dropout):
        return None, [], {}
    if isinstance(m, (nn.Softmax, nn.LogSoftmax)):
        return ("softmax" if isinstance(m, nn.Softmax) else "log_softmax"), [x], dict(dim=m.dim)
    if isinstance(m, nn.Flatten):
        return "flatten", [x], dict(start_dim=m.start_dim, end_dim=m.end_dim)
    for cls, fn in ((nn.MaxPool1d, "max_pool1d"), (nn.MaxPool2d, "max_pool2d"), (nn.MaxPool3d, "max_pool3d")):
        if isinstance(m, cls):
            return fn, [x], dict(kernel_size=m.kernel_size, stride=m.stride, padding=m.padding, dilation=m.dilation, ceil_mode=m.ceil_mode)
    for cls, fn in ((nn.AvgPool1d, "avg_pool1d"), (nn.AvgPool2d, "avg_pool2d"), (nn.AvgPool3d, "avg_pool3d")):
        if isinstance(m, cls):
            kw = dict(kernel_size=m.kernel_size, stride=m.stride, padding=m.padding, ceil_mode=m.ceil_mode, count_include_pad=m.count_include_pad)
            if getattr(m, "divisor_override", None) is not None:
                kw["divisor_override"] = m.divisor_override
            return fn, [x], kw
    for cls, fn in ((nn.AdaptiveAvgPool1d, "adaptive_avg_pool1d"), (nn.AdaptiveAvgPool2d, "adaptive_avg_pool2d"), (nn.AdaptiveAvgPool3d, "adaptive_avg_pool3d"),
                    (nn.AdaptiveMaxPool2d, "adaptive_max_pool2d")):
        if isinstance(m, cls):
            return fn, [x], dict(output_size=m.output_size)
    for cls, fn in ((nn.ConvTranspose1d, "conv_transpose1d"), (nn.ConvTranspose2d, "conv_transpose2d"), (nn.ConvTranspose3d, "conv_transpose3d")):
        if isinstance(m, cls):
            return fn, [x, p("weight"), p("bias")], dict(stride=tuple(m.stride), padding=tuple(m.padding), output_padding=tuple(m.output_padding),
                                                          groups=m.groups, dilation=tuple(m.dilation))
    if isinstance(m, nn.Softsign):
        return "softsign", [x], {}
    if isinstance(m, nn.SELU):
        return "selu", [x], {}
    if isinstance(m, nn.LogSigmoid):
        return "logsigmoid", [x], {}
    return None, [], {}


# ---------------------------------------------------------------------------------------------
