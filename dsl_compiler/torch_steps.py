"""Named PyTorch steps: the whitelisted functions a program may call for what kernels cannot express.

A step ``torch y = softmax(h, dim=1)`` calls the function on named tensors and literals. Every backend
runs steps through ``run`` so that their semantics never differ between the interpreter and the GPU.
"""

from __future__ import annotations

from typing import Any, Callable

from dsl_compiler import ir
from dsl_compiler.tensor_types import ShapeError, TensorType

# name -> what it does, for the language reference and for error messages. Signatures follow PyTorch
# (torch.* or torch.nn.functional.*) unless noted.
STEPS: dict[str, str] = {
    # layout and shape
    "channels_last": 'channels_last(x) or channels_last(x, dtype="f16"): the same values stored NHWC / NDHWC / NWC, '
                     "converted in the same copy when a dtype is given",
    "contiguous": "x -> the same values in PyTorch's default order",
    "reshape": "reshape(x, (d0, d1, ...))", "flatten": "flatten(x, start_dim=1)", "permute": "permute(x, (0, 2, 1))",
    "transpose": "transpose(x, 0, 1)", "unsqueeze": "unsqueeze(x, 1)", "select": "select(x, 1, t): index t of dim 1", "squeeze": "squeeze(x, 1)",
    "cat": "cat(a, b, ..., dim=1)", "stack": "stack(a, b, ..., dim=0)", "chunk": "torch a, b = chunk(x, 2, dim=1)",
    "split": "torch a, b = split(x, (16, 48), dim=1)", "unbind": "torch a, b = unbind(x, dim=0)",
    "narrow": "narrow(x, 1, start, length)",
    "index": 'index(x, (":", "0:32", 3)): basic indexing x[:, 0:32, 3], one entry per leading dim: an integer picks '
             '(the dim goes), "a:b" / "a:b:s" slices, "..." fills, None adds a dim of 1',
    "pad": "pad(x, (l, r, t, b), value=0.0)",
    "fill_where": 'fill_where(x, m, v, "eq", 0.0): x with v where m == 0.0 (comparisons eq, ne, lt, le, gt, ge; '
                  'm broadcast to x; v a number, inf or -inf): a masked_fill by a comparison of a float mask, '
                  "such as a causal attention's",
    "forward_filter": "forward_filter(w): a transposed conv's filter [C, K, *filter] as the forward conv's [K, C, *filter], "
                      "flipped in every spatial dim, channels-last: the stride-1 transposed conv with padding p is the "
                      "forward conv with padding dilation·(filter - 1) - p over it",
    "zero_insert": "zero_insert(x, stride=(2, 2), output_padding=(0, 0)): stride - 1 zeros between the input pixels "
                   "of each spatial dim and output_padding zeros after the last, layout kept: a transposed conv of "
                   "stride s is the stride-1 one over this",
    "to": 'to(x, dtype="bf16"): the same values in another element type (f32, bf16, f16)',
    # elementwise
    "relu": "", "gelu": "gelu(x, approximate=\"tanh\")", "silu": "", "sigmoid": "", "tanh": "", "softplus": "",
    "mish": "", "elu": "", "selu": "", "hardtanh": "hardtanh(x, min_val=-1.0, max_val=1.0)",
    "leaky_relu": "leaky_relu(x, 0.01)", "hardswish": "", "hardsigmoid": "", "softsign": "", "exp": "", "log": "",
    "abs": "", "neg": "", "sqrt": "", "rsqrt": "", "square": "", "clamp": "clamp(x, min=0.0, max=6.0)",
    "add": "add(a, b) or add(a, 2.0)", "sub": "", "mul": "", "div": "", "minimum": "", "maximum": "", "pow": "",
    # reductions and normalisation
    "softmax": "softmax(x, dim=1)", "log_softmax": "log_softmax(x, dim=1)", "sum": "sum(x, dim=1, keepdim=True)",
    "mean": "", "amax": "", "amin": "", "logsumexp": "logsumexp(x, dim=1)", "var": "var(x, dim=1, unbiased=False)",
    "std": "", "norm": "norm(x, p=2, dim=1)", "prod": "", "argmax": "argmax(x, dim=1)", "argmin": "", "cumsum": "cumsum(x, dim=1)",
    "cumprod": "", "flip": "flip(x, (1,)): x with the order of dim 1 reversed",
    "triu": "triu(x, 1): the upper triangle of the last two dims, from diagonal 1", "tril": "",
    "max": "torch v, i = max(x, dim=1): values and indices", "min": "torch v, i = min(x, dim=1)",
    "batch_norm": "batch_norm(x, weight, bias, eps=1e-05): training-mode statistics of the batch, as KernelBench; "
                  "batch_norm(x, weight, bias, running_mean, running_var, eps=1e-05) normalises with the running ones",
    "var_mean": "torch v, m = var_mean(y, dim=(0, 2, 3), correction=0): per-channel variance and mean",
    "fold_batch_norm": "torch w2, b2 = fold_batch_norm(w, mean, var, weight, bias, b, eps=1e-05, dim=0): BatchNorm "
                       "with these statistics folded into the op before it (filter or Linear weight w scaled along dim, "
                       "its bias b, None if absent); w2 keeps w's type and layout",
    "layer_norm": "layer_norm(x, (D,), weight, bias, eps=1e-05)", "rms_norm": "rms_norm(x, (D,), weight, eps=1e-06)",
    "group_norm": "group_norm(x, G, weight, bias, eps=1e-05)",
    "instance_norm": "instance_norm(x, eps=1e-05)",
    "normalize": "normalize(x, p=2.0, dim=1)",
    # pooling
    "max_pool1d": "", "max_pool2d": "max_pool2d(x, 2)", "max_pool3d": "", "avg_pool1d": "", "avg_pool2d": "",
    "avg_pool3d": "", "adaptive_avg_pool1d": "", "adaptive_avg_pool2d": "adaptive_avg_pool2d(x, (1, 1))",
    "adaptive_avg_pool3d": "", "adaptive_max_pool2d": "",
    # whole ops left to PyTorch (counted as such)
    "matmul": "", "linear": "linear(x, w, b)", "conv1d": "", "conv2d": "conv2d(x, w, b, stride=1, padding=0)",
    "conv3d": "", "conv_transpose1d": "", "conv_transpose2d": "conv_transpose2d(x, w, b, stride=2, padding=1)",
    "conv_transpose3d": "",
    # a part torch.fx cannot follow (a branch on values inside a submodule)
    "module": 'module(x, path="gate", shape=(8, 32)): the reference model\'s own submodule at path (path="": the '
              "whole model), run as PyTorch runs it; shape is its output's (element type: x's); a module giving "
              "several tensors binds one output each, shape their shapes one after another, ranks=(r0, ...) their ranks",
}

WHITELIST: tuple[str, ...] = tuple(sorted(STEPS))


_COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")


def fill_where(x, m, value: float, comparison: str, than: float):
    """``x.masked_fill(m <comparison> than, value)``: the ``fill_where`` step, and what the frontend's folded
    masks call while tracing."""
    import torch

    if comparison not in _COMPARE:
        raise ValueError(f"comparison must be one of {', '.join(_COMPARE)}, got {comparison!r}")
    return x.masked_fill(getattr(torch, comparison)(m, than), value)


def index_key(spec) -> tuple:
    """The Python index of an ``index`` step's spec: integers, "a:b:s" slices, "..." and None, as written."""
    def entry(e):
        if isinstance(e, str) and e == "...":
            return Ellipsis
        if isinstance(e, str):
            parts = e.split(":")
            if not 2 <= len(parts) <= 3:
                raise ValueError(f"index entry {e!r} is not a slice 'a:b' or 'a:b:s'")
            return slice(*(int(p) if p.strip() else None for p in parts))
        if e is None or (isinstance(e, int) and not isinstance(e, bool)):
            return e
        raise ValueError(f"index entry {e!r} is not an integer, a slice string, '...' or None")

    return tuple(entry(e) for e in (spec if isinstance(spec, (tuple, list)) else (spec,)))


def index_spec(key) -> tuple | None:
    """An ``index`` step's spec of a Python index (ints, slices, Ellipsis, None); None when it has none
    (a tensor or a list index)."""
    out = []
    for e in (key if isinstance(key, tuple) else (key,)):
        if e is Ellipsis:
            out.append("...")
        elif isinstance(e, slice) and all(v is None or (isinstance(v, int) and not isinstance(v, bool))
                                          for v in (e.start, e.stop, e.step)):
            text = f"{'' if e.start is None else e.start}:{'' if e.stop is None else e.stop}"
            out.append(text + (f":{e.step}" if e.step is not None else ""))
        elif e is None or (isinstance(e, int) and not isinstance(e, bool)):
            out.append(e)
        else:
            return None
    return tuple(out)


def is_allowed(fn: str) -> bool:
    """Whether ``fn`` may be called by a torch step."""
    return fn in STEPS


# Functions taking a leading list of tensors.
_LIST_FIRST = ("cat", "stack")


def _table() -> dict[str, Callable[..., Any]]:
    import torch
    import torch.nn.functional as F

    def batch_norm(x, weight=None, bias=None, running_mean=None, running_var=None, *, eps=1e-5, momentum=0.1):
        # KernelBench never calls eval(): BatchNorm normalises with the batch's own statistics, unless the
        # running statistics are given (a module in eval mode)
        training = running_mean is None or running_var is None
        return F.batch_norm(x, running_mean, running_var, weight, bias, training=training, momentum=momentum, eps=eps)

    def fold_batch_norm(w, mean, var, weight=None, bias=None, b=None, *, eps=1e-5, dim=0):
        # BN(op(x, w) + b) = op(x, w * s) + (b - mean) * s + bias with s = weight / sqrt(var + eps), along the
        # output channels: dim 0 of a filter [K, C, R, S] or of a Linear weight [N, K], dim 1 of a [K, N] weight
        scale = torch.rsqrt(var.float() + eps)
        if weight is not None:
            scale = scale * weight.float()
        centre = mean.float() if b is None else mean.float() - b.float()
        shift = torch.addcmul(bias.float(), centre, scale, value=-1.0) if bias is not None else -centre * scale
        view = [1] * w.dim()
        view[dim] = -1
        w2 = torch.empty_like(w)  # w's element type and memory format (a channels-last filter stays so)
        torch.mul(w, scale.reshape(view).to(w.dtype), out=w2)
        return w2, shift

    def instance_norm(x, weight=None, bias=None, eps=1e-5, use_input_stats=True, momentum=0.1):
        # F.instance_norm's trace passes use_input_stats and momentum; with no running stats both are moot
        return F.instance_norm(x, weight=weight, bias=bias, eps=eps, use_input_stats=use_input_stats, momentum=momentum)

    def to(x, dtype):
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
        return x.to(torch_dtype(dtype))

    def zero_insert(x, stride, output_padding=0):
        dims = x.dim() - 2
        steps = (stride,) * dims if isinstance(stride, int) else tuple(stride)
        extra = (output_padding,) * dims if isinstance(output_padding, int) else tuple(output_padding)
        if len(steps) != dims or len(extra) != dims or min(steps) < 1 or min(extra) < 0:
            raise ValueError(f"zero_insert needs {dims} strides >= 1 and {dims} output paddings >= 0")
        spans = [(n - 1) * st + 1 for n, st in zip(x.shape[2:], steps)]
        out = x.new_zeros((*x.shape[:2], *(sp + e for sp, e in zip(spans, extra))))
        if is_channels_last(x):
            out = channels_last(out)
        out[(slice(None), slice(None), *(slice(0, sp, st) for sp, st in zip(spans, steps)))] = x
        return out

    def forward_filter(w):
        return channels_last(w.transpose(0, 1).flip(tuple(range(2, w.dim()))))

    table: dict[str, Callable[..., Any]] = {
        "to": to,
        "forward_filter": forward_filter,
        "zero_insert": zero_insert,
        "channels_last": channels_last,
        "contiguous": lambda x: x.contiguous(),
        "reshape": torch.reshape, "flatten": torch.flatten, "permute": torch.permute, "transpose": torch.transpose,
        "unsqueeze": torch.unsqueeze, "select": torch.select, "squeeze": torch.squeeze, "cat": torch.cat, "stack": torch.stack,
        "chunk": torch.chunk, "pad": F.pad, "split": torch.split, "unbind": torch.unbind, "narrow": torch.narrow,
        "index": lambda x, spec: x[index_key(spec)], "fill_where": fill_where,
        "relu": F.relu, "gelu": F.gelu, "silu": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
        "softplus": F.softplus, "mish": F.mish, "elu": F.elu, "selu": F.selu, "hardtanh": F.hardtanh,
        "leaky_relu": F.leaky_relu, "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "softsign": F.softsign,
        "exp": torch.exp, "log": torch.log, "abs": torch.abs, "neg": torch.neg, "sqrt": torch.sqrt,
        "rsqrt": torch.rsqrt, "square": torch.square, "clamp": torch.clamp,
        "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "minimum": torch.minimum,
        "maximum": torch.maximum, "pow": torch.pow,
        "softmax": torch.softmax, "log_softmax": torch.log_softmax, "sum": torch.sum, "mean": torch.mean,
        "amax": torch.amax, "amin": torch.amin, "logsumexp": torch.logsumexp, "var": torch.var, "std": torch.std,
        "norm": torch.norm, "prod": torch.prod, "argmax": torch.argmax, "argmin": torch.argmin, "cumsum": torch.cumsum,
        "cumprod": torch.cumprod, "flip": torch.flip, "triu": torch.triu, "tril": torch.tril,
        "max": torch.max, "min": torch.min, "var_mean": torch.var_mean, "fold_batch_norm": fold_batch_norm,
        "batch_norm": batch_norm, "layer_norm": F.layer_norm, "rms_norm": F.rms_norm, "group_norm": F.group_norm,
        "instance_norm": instance_norm, "normalize": F.normalize,
        "max_pool1d": F.max_pool1d, "max_pool2d": F.max_pool2d, "max_pool3d": F.max_pool3d,
        "avg_pool1d": F.avg_pool1d, "avg_pool2d": F.avg_pool2d, "avg_pool3d": F.avg_pool3d,
        "adaptive_avg_pool1d": F.adaptive_avg_pool1d, "adaptive_avg_pool2d": F.adaptive_avg_pool2d,
        "adaptive_avg_pool3d": F.adaptive_avg_pool3d, "adaptive_max_pool2d": F.adaptive_max_pool2d,
        "matmul": torch.matmul, "linear": F.linear, "conv1d": F.conv1d, "conv2d": F.conv2d, "conv3d": F.conv3d,
        "conv_transpose1d": F.conv_transpose1d, "conv_transpose2d": F.conv_transpose2d,
        "conv_transpose3d": F.conv_transpose3d,
        "module": _unbound_module,
    }
    assert set(table) == set(STEPS)
    return table


_TABLE: dict[str, Callable[..., Any]] | None = None


def _unbound_module(*args: Any, path: str = "", shape: Any = None, ranks: Any = None) -> Any:
    raise StepError(f"module step '{path}': the model's submodule is not bound (load the program with "
                    "modules=runtime.bind_modules(program, model))")


def _fn(name: str) -> Callable[..., Any]:
    global _TABLE
    if _TABLE is None:
        _TABLE = _table()
    return _TABLE[name]


# PyTorch functions a program reaches for that have a listed way to say the same
_INSTEAD = {
    "expand": "broadcasting happens inside add, mul, sub, div, minimum, maximum; in a kernel read a vector as v[row] "
              "or v[col]",
    "view": "use reshape",
}
_INSTEAD.update(expand_as=_INSTEAD["expand"], broadcast_to=_INSTEAD["expand"], repeat=_INSTEAD["expand"],
                view_as=_INSTEAD["view"], t="transpose(x, 0, 1), or read the operand transposed in a kernel: x^T")


def unknown_step_hint(fn: str) -> str:
    return _INSTEAD.get(fn, "use a listed function, or express it in a kernel epilogue")


class StepError(ValueError):
    """A torch step that cannot run: unknown function, bad arguments, or a PyTorch error."""


def _call(step: ir.TorchStep, lookup: Callable[[str], Any]) -> list[Any]:
    if step.fn not in STEPS:
        raise StepError(f"'{step.fn}' is not a whitelisted torch step ({unknown_step_hint(step.fn)}); allowed: "
                        + ", ".join(sorted(STEPS)))
    args = [channel_view(lookup(a.name), a.channels) if isinstance(a, ir.TensorArg) else _literal(a.value)
            for a in step.args]
    kwargs = {k.key: _literal(k.value) for k in step.kwargs}
    if step.fn in _LIST_FIRST:
        tensors = [a for a in args if not isinstance(a, int | float | str | tuple | list | bool | type(None))]
        rest = args[len(tensors):]
        args = [tensors, *rest]
    result = _fn(step.fn)(*args, **kwargs)
    results = list(result) if isinstance(result, tuple | list) else [result]
    if len(results) != len(step.outputs):
        raise StepError(f"{step.fn} gives {len(results)} tensor(s) but the step names {len(step.outputs)}")
    return results


def channel_view(x: Any, channels: tuple[int, int] | None) -> Any:
    """``y[a:b]``: channels a..b of y as a view: dim 1 of a channels-last tensor, else the last dim."""
    if channels is None:
        return x
    dim = 1 if x.dim() >= 3 and is_channels_last(x) else x.dim() - 1
    return x.narrow(dim, channels[0], channels[1] - channels[0])


def write_channels(value: Any, name: str, channels: tuple[int, int], total: int, env: dict[str, Any],
                   conv: bool | None = None) -> Any:
    """``y[a:b] = value`` (a slice store or ``torch y[a:b] = ...``): the value's rows (a GEMM's rows, a conv's
    output pixels; ``conv``: the value is N, C, *spatial, default: when it is stored channels-last) written as
    channels a..b of y, which its first writer allocates in its own form (channels-last, or rows of channels).
    The CUTLASS backend writes through the same views (``cutlass_runtime.channel_slice``). Returns y."""
    import torch

    conv = value.dim() >= 3 and is_channels_last(value) if conv is None else conv
    width = channels[1] - channels[0]
    buf = env.get(name)
    if buf is None:
        shape = list(value.shape)
        shape[1 if conv else -1] = total
        buf = torch.empty(shape, dtype=value.dtype, device=value.device)
        buf = channels_last(buf) if conv else buf
    def rows_of(t: Any) -> Any:  # channels innermost: N, *spatial, C
        return t.permute(0, *range(2, t.dim()), 1)

    buf_rows = (rows_of(buf) if buf.dim() >= 3 and is_channels_last(buf) else buf).reshape(-1, total)
    if buf_rows.data_ptr() != buf.data_ptr() or buf.dtype != value.dtype:
        raise StepError(f"'{name}' must hold rows of {total} {value.dtype} channels, got {tuple(buf.shape)} {buf.dtype}")
    buf_rows[:, channels[0]:channels[1]] = (rows_of(value) if conv else value).reshape(-1, width)
    return buf


def _literal(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def channels_last(x: Any, dtype: str | None = None) -> Any:
    """The same values stored channels-last (NWC / NHWC / NDHWC); rank < 3 keeps its layout. With
    ``dtype``, converted in the same copy (one read and one write, not two of each)."""
    if dtype is not None and dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    target = torch_dtype(dtype) if dtype is not None else x.dtype
    if x.dim() < 3:
        return x.to(target)
    order = (0, *range(2, x.dim()), 1)
    inverse = (0, x.dim() - 1, *range(1, x.dim() - 1))
    if target == x.dtype:
        return x.permute(order).contiguous().permute(inverse)
    import torch

    inner = x.permute(order)
    out = torch.empty(inner.shape, dtype=target, device=x.device)
    out.copy_(inner)  # layout and element type in one kernel
    return out.permute(inverse)


def is_channels_last(x: Any) -> bool:
    """Whether a tensor of rank >= 3 is stored densely channels-last (and not also in PyTorch's default order)."""
    return x.dim() >= 3 and not x.is_contiguous() and x.permute(0, *range(2, x.dim()), 1).is_contiguous()


def dense(x: Any, rank3_channels_last: bool = False) -> Any:
    """A step's output stored densely: channels-last when it is laid out so, else PyTorch's default order.
    Views (transpose, permute, chunk) are copied, so a kernel reading the result sees the layout the checks
    inferred. For rank 3, NWC strides look like a transpose, so they count as channels-last only when
    ``rank3_channels_last`` (the step is channels_last, or it reads a channels-last rank-3 tensor)."""
    if (x.dim() >= 4 or rank3_channels_last) and is_channels_last(x):
        return x
    return x.contiguous()


_CHANNELS_LAST_STEPS = ("channels_last", "forward_filter")  # steps whose output is channels-last at any rank


def _rank3_channels_last(step: ir.TorchStep, layout_of: Callable[[str], str | None]) -> bool:
    return step.fn in _CHANNELS_LAST_STEPS or any(
        isinstance(a, ir.TensorArg) and layout_of(a.name) == "channels_last" for a in step.args)


def _layout(x: Any) -> str | None:
    if x.dim() == 3 and is_channels_last(x):
        return "channels_last"
    return None


def run(step: ir.TorchStep, env: dict[str, Any], modules: dict[str, Any] | None = None,
        totals: dict[str, int] | None = None) -> dict[str, Any]:
    """Run one step on the tensors in ``env``; returns output name -> tensor (stored densely, see ``dense``).
    ``modules``: the reference model's submodules by path, for ``module`` steps; ``totals``: the channels of
    each tensor slices fill (``shapes.slice_totals``), for a step writing into one."""
    if step.fn == "module":
        out = _run_module(step, env, modules or {})
    else:
        results = _call(step, lambda name: env[name])
        keep = _rank3_channels_last(step, lambda name: _layout(env[name]))
        out = {name: dense(r, keep) for name, r in zip(step.outputs, results)}
    if step.channels is not None:
        name = step.outputs[0]
        if name not in (totals or {}):
            raise StepError(f"torch {name}[{step.channels[0]}:{step.channels[1]}]: the channel count of '{name}' is "
                            "not given (run it with totals=shapes.slice_totals(program))")
        out[name] = write_channels(out[name], name, step.channels, totals[name], env)
    return out


def _run_module(step: ir.TorchStep, env: dict[str, Any], modules: dict[str, Any]) -> dict[str, Any]:
    kwargs = {k.key: k.value for k in step.kwargs}
    path = kwargs.get("path")
    if path not in modules:
        _unbound_module(path=str(path))
    args = [channel_view(env[a.name], a.channels) if isinstance(a, ir.TensorArg) else _literal(a.value) for a in step.args]
    out = modules[path](*args)
    leaves = module_leaves(out)
    shapes = module_shapes(kwargs)
    if leaves is None or [tuple(t.shape) for t in leaves] != list(shapes or ()):
        found = [tuple(t.shape) for t in leaves] if leaves is not None else type(out).__name__
        raise StepError(f"module step '{path}' gives {found}, the program says {shapes}")
    # the type the step declares: PyTorch's default order
    return {name: t.contiguous() for name, t in zip(step.outputs, leaves)}


def module_leaves(out: Any) -> list[Any] | None:
    """The tensors a module gives, in order (a tuple's, nested ones flattened: an LSTM's ``(y, (h, c))``);
    None when any of them is not a tensor."""
    items = list(out) if isinstance(out, (tuple, list)) else [out]
    leaves: list[Any] = []
    for item in items:
        inner = module_leaves(item) if isinstance(item, (tuple, list)) else ([item] if hasattr(item, "shape") else None)
        if inner is None:
            return None
        leaves.extend(inner)
    return leaves


def module_shapes(kwargs: dict[str, Any]) -> list[tuple[int, ...]] | None:
    """A module step's output shapes: ``shape`` alone, or cut by ``ranks`` into one shape per output."""
    shape, ranks = kwargs.get("shape"), kwargs.get("ranks")
    if not isinstance(shape, tuple):
        return None
    if ranks is None:
        return [shape]
    if not isinstance(ranks, tuple) or not all(isinstance(r, int) and r >= 0 for r in ranks) or sum(ranks) != len(shape):
        return None
    starts = [sum(ranks[:i]) for i in range(len(ranks))]
    return [tuple(shape[a:a + r]) for a, r in zip(starts, ranks)]


def _module_type(step: ir.TorchStep, types: dict[str, Any]) -> list[Any]:
    kwargs = {k.key: k.value for k in step.kwargs}
    first = next((types[a.name] for a in step.args if isinstance(a, ir.TensorArg)), None)
    shapes = module_shapes(kwargs)
    if (first is None or not isinstance(kwargs.get("path"), str) or shapes is None or len(shapes) != len(step.outputs)
            or not all(isinstance(d, int) and d > 0 for s in shapes for d in s)):
        raise ShapeError("a module step takes a tensor, path=\"a.b\" (a submodule; \"\" the whole model) and "
                         "shape=(d0, ...) (its output's; with ranks=(r0, ...) one shape per output)",
                         step.span, found=", ".join(k.key for k in step.kwargs) or "no keywords",
                         expected=STEPS["module"], hint="give the submodule's path and its outputs' shapes",
                         code="torch-step")
    return [TensorType(dtype=first.dtype, shape=s, layout="contiguous") for s in shapes]


_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}


def torch_dtype(element: str):
    import torch

    return torch.int64 if element == "i64" else getattr(torch, _DTYPES[element])


def element_type(dtype: Any) -> str | None:
    """The element type (f32, bf16, f16) of a torch dtype; None for one a program cannot carry."""
    import torch

    return next((element for element, name in _DTYPES.items() if getattr(torch, name) == dtype), None)


def empty_like_type(t, device: str = "meta"):
    """A tensor of a TensorType (values unset), with its layout's strides."""
    import torch

    x = torch.empty(t.shape, dtype=torch_dtype(t.dtype), device=device)
    return channels_last(x) if t.layout == "channels_last" else x


def type_of(tensor) -> Any:
    """The TensorType of a tensor (raises StepError for element types a program cannot carry)."""
    import torch

    element = "i64" if tensor.dtype == torch.int64 else element_type(tensor.dtype)  # i64: argmax / argmin indices
    if element is None:
        raise StepError(f"the step gives a {str(tensor.dtype).replace('torch.', '')} tensor; programs carry f32, bf16, "
                        "f16 (and the i64 indices of argmax, argmin)")
    layout = "channels_last" if is_channels_last(tensor) else "contiguous"
    return TensorType(dtype=element, shape=tuple(tensor.shape), layout=layout)


# Output types by (function, argument types and literals): a configuration search checks one program hundreds
# of times, and some steps take tens of milliseconds on meta tensors (batch_norm's decomposition).
_INFERRED: dict[tuple, tuple[Any, ...]] = {}
_INFERRED_MAX = 8192


def infer(step: ir.TorchStep, types: dict[str, Any]) -> list[Any]:
    """Output types of a step, found by running it on meta tensors (no data, no device)."""
    if step.fn not in STEPS:
        raise ShapeError(f"'{step.fn}' is not a whitelisted torch step", step.span, found=step.fn,
                         expected="one of " + ", ".join(sorted(STEPS)),
                         hint=unknown_step_hint(step.fn), code="unknown-function")
    for a in step.args:
        if isinstance(a, ir.TensorArg) and a.name not in types:
            raise ShapeError(f"'{a.name}' is not defined before this torch step", a.span or step.span, found=a.name,
                             expected="an input, a param, or a tensor computed earlier",
                             hint=f"declare '{a.name}' or compute it in an earlier step", code="undefined-name")
    if step.fn == "module":
        return _module_type(step, types)
    key = (step.fn, tuple((types[a.name], a.channels) if isinstance(a, ir.TensorArg) else repr(a.value) for a in step.args),
           tuple((k.key, repr(k.value)) for k in step.kwargs))
    if key in _INFERRED:
        return list(_INFERRED[key])
    try:
        results = _call(step, lambda name: empty_like_type(types[name]))
        keep = _rank3_channels_last(step, lambda name: types[name].layout if len(types[name].shape) == 3 else None)
        inferred = [type_of(dense(r, keep)) for r in results]
        if len(_INFERRED) >= _INFERRED_MAX:
            _INFERRED.clear()
        _INFERRED[key] = tuple(inferred)
        return inferred
    except ShapeError:
        raise
    except Exception as exc:  # noqa: BLE001 - any PyTorch complaint becomes a diagnostic
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ShapeError(f"torch step '{step.fn}' fails: {first[:300]}", step.span,
                         found=", ".join(f"{a.name} {list(types[a.name].shape)}" for a in step.args
                                         if isinstance(a, ir.TensorArg)) or None,
                         expected=STEPS.get(step.fn) or f"the arguments of torch {step.fn}",
                         hint="check the arguments against PyTorch's signature", code="torch-step") from None
