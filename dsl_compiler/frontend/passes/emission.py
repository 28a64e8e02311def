"""The emission pass: the program's declarations and steps, written as the output needs them.

``ProgramBuilder.value(x)`` is the program tensor holding a traced value, its producer emitted first: an input or
param declared (a param once per layout, element type and padding), a PyTorch op as a torch step, a kernel group
as a kernel (by the kernel emitter it is given, ``passes.kernels.emit_group``). The helpers here prepare what a
kernel reads: 16-bit copies, zero padding, channels-last and K-major copies, each made once per tensor.
"""

from __future__ import annotations

from typing import Any, Callable

from dsl_compiler.diagnostics import Diagnostic
from dsl_compiler.frontend.graph import LoweringSettings, OpGraph
from dsl_compiler.frontend.normalize import DTYPES, Op, literal
from dsl_compiler.frontend.passes.naming import Namer
from dsl_compiler.frontend.passes.padding import pad_spec
from dsl_compiler.frontend.reference import ParamRef
from dsl_compiler.ir import Kwarg, LiteralArg, TensorArg, TensorDecl, TorchStep

_BAD = object()  # an argument that has no program form (the step fails)


def _flat_names(nested) -> list[str]:
    return [leaf for item in nested for leaf in _flat_names(item)] if isinstance(nested, tuple) else [nested]


def _first_name(nested) -> str:
    return _flat_names(nested)[0]


class ProgramBuilder:
    """The program being written, and what was written for which traced value."""

    def __init__(self, graph: OpGraph, settings: LoweringSettings, emit_kernel: Callable[["ProgramBuilder", Any], None]):
        self.graph = graph
        self.settings = settings
        self.emit_kernel = emit_kernel  # (builder, group): a kernel group's kernel and the steps around it
        self.namer = Namer()
        self.diagnostics: list[Diagnostic] = []
        self.tensor_name: dict[Any, str] = {}  # traced value (or ("tuple", node)) -> program tensor
        self.tuple_outputs: dict[Any, tuple[str, ...]] = {}
        self.decls: list[TensorDecl] = []
        self.steps: list[Any] = []
        self.param_names: dict[tuple, str] = {}
        self.emitted: set[Any] = set()
        self.channels_last: dict[str, str] = {}
        self.cl_tensors: set[str] = set()  # tensors stored channels-last (a conv kernel's output, their copies)
        self.k_major: dict[str, str] = {}
        self.casts: dict[tuple[str, str], str] = {}
        self.pads: dict[tuple[str, tuple[int, ...]], str] = {}
        self.live: set[Any] = set()  # nodes the output needs: dead users do not make a kernel store a value
        self.failed = False

    def fail(self, message: str, code: str = "unsupported", hint: str | None = None):
        self.failed = True
        self.diagnostics.append(Diagnostic(code=code, message=message, hint=hint or "write this part of the program by hand"))

    # -- declarations ------------------------------------------------------------------------
    def declare_input(self, n):
        graph = self.graph
        tm = graph.meta(n)
        if tm is None:
            graph.cover(n, "unsupported", reason="a non-tensor forward() argument")
            self.fail(f"forward() argument {n.name} is not a tensor")
            return
        dtype = DTYPES.get(str(tm.dtype))
        if dtype is None:
            graph.cover(n, "unsupported", reason=f"element type {tm.dtype}")
            self.fail(f"input {n.name} has element type {tm.dtype}; the language has f32, bf16 and f16")
            return
        name = self.namer(n.name)
        self.tensor_name[n] = name
        self.decls.append(TensorDecl(kind="input", name=name, dtype=dtype, shape=tuple(int(s) for s in tm.shape)))
        graph.cover(n, "input", where=name)

    def declare_param(self, ref: ParamRef, layout="contiguous", dtype: str | None = None,
                      extra: tuple[int, ...] | None = None) -> str | None:
        """The param holding a model tensor, declared once per layout, element type and padding
        (``dtype`` converts an fp32 tensor when it is bound: a kernel reading it in 16-bit math;
        ``extra`` declares it that much larger per dim: zero-padded once, when bound)."""
        import torch

        key = ref.key
        t = self.graph.traced.state.get(key)
        if not isinstance(t, torch.Tensor):
            self.fail(f"model tensor {key} is not in state_dict")
            return None
        own = DTYPES.get(str(t.dtype))
        if own is None:
            self.fail(f"model tensor {key} has element type {t.dtype}")
            return None
        dtype = dtype if dtype is not None and own == "f32" else own
        shape = tuple(int(s) for s in t.shape)
        extra = tuple(extra) if extra is not None and any(extra) and len(extra) == len(shape) else ()
        if extra:
            shape = tuple(s + e for s, e in zip(shape, extra))
        if (key, layout, dtype, extra) in self.param_names:
            return self.param_names[(key, layout, dtype, extra)]
        seen = [(lay, dt) for k, lay, dt, _ in self.param_names if k == key]
        suffix = ("_cl" if layout == "channels_last" and seen else "") + (f"_{dtype}" if dtype != own else "") + (
            "_pad" if extra else "")
        name = self.namer(key.replace(".", "_") + suffix)
        self.param_names[(key, layout, dtype, extra)] = name
        self.decls.append(TensorDecl(kind="param", name=name, dtype=dtype, shape=shape, layout=layout, source=key))
        return name

    def declare_param_as(self, x, shape: tuple[int, ...], half: str | None) -> str | None:
        """A param declared in another shape of the same size (bound by a reshape), in the kernel's type."""
        import torch.fx

        graph = self.graph
        r = graph.resolve(x) if isinstance(x, torch.fx.Node) else x
        ref = r if isinstance(r, ParamRef) else graph.ops[r].operands[0]
        t = graph.traced.state.get(ref.key)
        own = DTYPES.get(str(t.dtype)) if t is not None else None
        if own is None:
            self.fail(f"model tensor {ref.key} is not a param of a supported element type")
            return None
        dtype = half if half is not None and own == "f32" else own
        key = (ref.key, "gemm", dtype, tuple(shape))
        if key not in self.param_names:
            name = self.namer(ref.key.replace(".", "_") + "_2d" + (f"_{dtype}" if dtype != own else ""))
            self.param_names[key] = name
            self.decls.append(TensorDecl(kind="param", name=name, dtype=dtype, shape=tuple(shape), source=ref.key))
        if not isinstance(r, ParamRef) and r not in graph.coverage:
            graph.cover(r, "param", where=self.param_names[key])
        return self.param_names[key]

    # -- values ------------------------------------------------------------------------------
    def value(self, x, layout="contiguous", dtype: str | None = None, extra: tuple[int, ...] | None = None) -> str | None:
        """The program tensor name holding value x (emitting its producer first); ``dtype`` declares
        a param in that element type, ``extra`` zero-pads it (a param when bound, anything else by a
        ``pad`` step)."""
        import torch.fx

        graph = self.graph
        if isinstance(x, ParamRef):
            return self.declare_param(x, layout, dtype, extra)
        if not isinstance(x, torch.fx.Node):
            return None
        x = graph.resolve(x)
        op = graph.ops[x]
        if extra is not None and any(extra) and op.kind != "param":
            name = self.value(x, layout, dtype)
            return self.pad_step(name, extra) if name is not None else None
        if op.kind == "param":
            name = self.declare_param(op.operands[0], layout, dtype, extra)
            if x not in graph.coverage:
                graph.cover(x, "param", where=name or "")
            return name
        if op.kind == "const":
            return None
        if x not in self.tensor_name:
            self.visit(x)
        return self.tensor_name.get(x)

    def visit(self, n):
        graph = self.graph
        if n in self.emitted:
            return
        op = graph.ops[n]
        if op.kind in ("alias", "param"):
            return
        group = graph.member_of.get(n)
        if group is not None:
            self.emit_kernel(self, group)
            return
        self.emitted.add(n)
        if op.kind == "getitem":
            src = graph.resolve(op.operands[0])
            self.visit(src)
            base = self.tensor_name.get(("tuple", src))
            if base is None:
                self.fail(f"{n.name} indexes a value that is not a tuple of tensors")
                return
            picked = self.tuple_outputs[src][op.index]
            if isinstance(picked, tuple):  # a tuple inside a module's result (an LSTM's (h, c))
                self.tuple_outputs[n] = picked
                self.tensor_name[("tuple", n)] = _first_name(picked)
                picked = _first_name(picked)
            else:
                self.tensor_name[n] = picked
            graph.cover(n, "folded", where=picked, reason="tuple element of a PyTorch step")
            return
        if op.kind == "unsupported":
            graph.cover(n, "unsupported", reason=op.reason)
            self.fail(f"{op.target} ({n.name}): {op.reason}")
            return
        self.emit_torch(n, op)

    # -- torch steps ---------------------------------------------------------------------------
    def emit_torch(self, n, op: Op):
        graph = self.graph
        fn = op.torch_fn
        if fn is None:
            graph.cover(n, "unsupported", reason=op.reason or "no PyTorch-step form")
            self.fail(f"{op.target} ({n.name}) has no PyTorch-step form")
            return
        fn, torch_args, torch_kwargs = _whitelist_form(fn, list(op.torch_args), dict(op.torch_kwargs), graph.shape_of(n))
        if fn is None:
            graph.cover(n, "unsupported", reason=torch_args)
            self.fail(f"{op.target} ({n.name}): {torch_args}")
            return
        op = Op(op.node, op.kind, op.target, name=op.name, torch_fn=fn, torch_args=torch_args, torch_kwargs=torch_kwargs,
                reason=op.reason, fn=op.fn)
        pre_neg = fn == "rsub"  # c - x runs as add(neg(x), c)
        if pre_neg:
            fn = "add"
        call = self._torch_call(n, op, fn)
        if call is None:
            return
        args, kwargs = call
        whitelist_reason = _torch_step_unknown(fn)
        if whitelist_reason:
            graph.cover(n, "unsupported", reason=whitelist_reason)
            self.fail(f"{op.target} ({n.name}): {whitelist_reason}", hint="add the function to the torch-step whitelist or rewrite the model")
            return
        outs = self._torch_outputs(n, fn)
        if pre_neg and args and isinstance(args[0], TensorArg):
            negated = self.namer(f"{outs[0]}_neg")
            self.steps.append(TorchStep(outputs=(negated,), fn="neg", args=(args[0],)))
            args[0] = TensorArg(name=negated)
        self.steps.append(TorchStep(outputs=outs, fn=fn, args=tuple(args), kwargs=tuple(kwargs)))
        reason = op.reason or ("no μCUTLASS form" if op.kind == "torch" else "")
        if fn in ("cat", "stack") and not op.reason:
            reason = "a store has no channel offset (no slice store): the step copies the kernels' outputs together"
        if op.kind in ("ew", "torch") and not op.reason and op.fn:
            reason = "its input does not come from a kernel"
        graph.cover(n, "torch_step", where=outs[0], reason=reason or f"{op.target} has no μCUTLASS kernel form")

    def _torch_call(self, n, op: Op, fn: str) -> tuple[list, list[Kwarg]] | None:
        """The step's arguments and keywords (None when one has no program form: the node failed)."""
        import torch.fx

        args, kwargs = [], []
        torch_args = list(op.torch_args)
        if fn in ("cat", "stack") and torch_args and isinstance(torch_args[0], (list, tuple)):
            # the step spells cat([a, b], 1) as cat(a, b, dim=1): tensors first, then literals
            if len(torch_args) > 1:
                op.torch_kwargs = {**op.torch_kwargs, "dim": torch_args[1]}
            torch_args = list(torch_args[0])
        for a in torch_args:
            arg = self.torch_arg(a, n)
            if arg is _BAD:
                return None
            args.append(arg)
        for k, v in op.torch_kwargs.items():
            if isinstance(v, (torch.fx.Node, ParamRef)):
                self.graph.cover(n, "unsupported", reason=f"tensor keyword argument {k}")
                self.fail(f"{op.target} ({n.name}) passes a tensor as keyword {k}")
                return None
            try:
                kwargs.append(Kwarg(key=k, value=literal(v)))
            except ValueError as exc:
                self.graph.cover(n, "unsupported", reason=f"argument {k}: {exc}")
                self.fail(f"{op.target} ({n.name}): argument {k} is {exc}")
                return None
        # drop trailing None positional args (an absent bias)
        while args and isinstance(args[-1], LiteralArg) and args[-1].value is None:
            args.pop()
        return args, kwargs

    def _torch_outputs(self, n, fn: str) -> tuple[str, ...]:
        """The step's output names: one tensor, or each element of a tuple result."""
        tm = n.meta.get("tensor_meta")
        single = fn in ("amax", "amin")  # a torch.max(x, dim) whose indices are unused
        if fn == "module" and isinstance(tm, (list, tuple)) and not hasattr(tm, "shape"):
            # one output per tensor of the module's result; the result's nesting kept for its getitems
            def names(meta, prefix):
                if isinstance(meta, (list, tuple)) and not hasattr(meta, "shape"):
                    return tuple(names(m, f"{prefix}_{i}") for i, m in enumerate(meta))
                return self.namer(prefix)

            nested = names(tm, n.name)
            self.tuple_outputs[n] = nested
            self.tensor_name[("tuple", n)] = _first_name(nested)
            return tuple(_flat_names(nested))
        if isinstance(tm, (list, tuple)) and not hasattr(tm, "shape") and not single:  # TensorMetadata is a NamedTuple
            outs = tuple(self.namer(f"{n.name}_{i}") for i in range(len(tm)))
            self.tuple_outputs[n] = outs
            self.tensor_name[("tuple", n)] = outs[0]
        else:
            outs = (self.namer(n.name),)
            self.tensor_name[n] = outs[0]
        return outs

    def torch_arg(self, a, n):
        import torch.fx

        graph = self.graph
        if isinstance(a, torch.fx.Node) and "const" in graph.resolve(a).meta:
            return LiteralArg(value=literal(graph.resolve(a).meta["const"]))
        if isinstance(a, (list, tuple)) and any(isinstance(v, torch.fx.Node) for v in a):
            if all(not isinstance(v, torch.fx.Node) or "const" in v.meta for v in a):
                a = tuple(v.meta["const"] if isinstance(v, torch.fx.Node) else v for v in a)
        if isinstance(a, (torch.fx.Node, ParamRef)):
            name = self.value(a)
            if name is None:
                graph.cover(n, "unsupported", reason="an argument is not a tensor the program has")
                self.fail(f"{n.name}: an argument is not a tensor the program has")
                return _BAD
            return TensorArg(name=name)
        try:
            return LiteralArg(value=literal(a))
        except ValueError as exc:
            graph.cover(n, "unsupported", reason=f"argument {exc}")
            self.fail(f"{graph.ops[n].target} ({n.name}): argument {exc} has no program form")
            return _BAD

    # -- what a kernel reads -----------------------------------------------------------------
    def operand(self, x, half: str | None, layout="contiguous", extra: tuple[int, ...] | None = None) -> str | None:
        """The tensor a kernel reads for value x: in 16-bit math (``half``) a param is declared in that
        type (converted once when bound) and any other fp32 tensor is converted by a ``to`` step.
        ``extra`` zero-pads it at the end of each dim: a param once, when bound; any other tensor by a
        ``pad`` step per call (after the conversion, on the narrower copy)."""
        graph = self.graph
        if graph.is_param(x):
            return self.value(x, layout, dtype=half if graph.dtype_of(x) == "f32" else None, extra=extra)
        name = self.value(x, layout)
        if name is not None and half is not None and graph.dtype_of(x) == "f32":
            name = self.cast(name, half)
        return self.pad_step(name, extra) if name is not None else None

    def pad_step(self, name: str, extra: tuple[int, ...] | None) -> str:
        """``name`` grown (or, negative ``extra``, cut) at the end of its dims by one ``pad`` step, once
        per tensor and amount; a channels-last tensor stays channels-last."""
        if not extra or not any(extra):
            return name
        key = (name, tuple(extra))
        if key not in self.pads:
            out = self.namer(f"{name}_{'pad' if min(extra) >= 0 else 'cut'}")
            self.steps.append(TorchStep(outputs=(out,), fn="pad", args=(TensorArg(name=name), LiteralArg(value=pad_spec(extra)))))
            self.pads[key] = out
            if name in self.cl_tensors:
                self.cl_tensors.add(out)
        return self.pads[key]

    def cast(self, name: str, dtype: str) -> str:
        """``name`` converted to ``dtype`` by one ``to`` step (once per tensor); the copy keeps the layout."""
        if (name, dtype) not in self.casts:
            out = self.namer(f"{name}_{dtype}")
            self.steps.append(TorchStep(outputs=(out,), fn="to", args=(TensorArg(name=name),),
                                        kwargs=(Kwarg(key="dtype", value=dtype),)))
            self.casts[(name, dtype)] = out
            if name in self.cl_tensors:
                self.cl_tensors.add(out)
        return self.casts[(name, dtype)]

    def conv_input(self, x, half: str | None, d_c: int = 0) -> str | None:
        """A conv's activation NHWC in the kernel's type. An fp32 activation that 16-bit math reads and that is
        not NHWC yet gets one ``channels_last(x, dtype=...)`` step: layout and type in a single copy. ``d_c``
        more zero channels come first (a ``pad`` step on the narrow-channel tensor as it is stored)."""
        graph = self.graph
        if d_c and not graph.is_param(x):
            name = self.value(x)
            if name is None:
                return None
            extra = (0, d_c) + (0,) * (len(graph.shape_of(x)) - 2)
            padded = self.pad_step(name, extra)
            if half is not None and graph.dtype_of(x) == "f32":
                if padded not in self.cl_tensors:
                    return self.as_channels_last(padded, dtype=half)
                padded = self.cast(padded, half)
            return self.as_channels_last(padded)
        if d_c:
            return self.as_channels_last(self.operand(x, half, extra=(0, d_c) + (0,) * (len(graph.shape_of(x)) - 2)))
        if half is not None and graph.dtype_of(x) == "f32" and not graph.is_param(x):
            name = self.value(x)
            if name is not None and name not in self.cl_tensors and (name, half) not in self.casts:
                return self.as_channels_last(name, dtype=half)
        name = self.operand(x, half)
        return self.as_channels_last(name) if name is not None else None

    def as_channels_last(self, name: str, dtype: str | None = None) -> str:
        """The NHWC copy of a tensor (once), unless a conv kernel already wrote it NHWC."""
        if name in self.cl_tensors and dtype is None:
            return name
        key = name if dtype is None else f"{name}:{dtype}"
        if key not in self.channels_last:
            cl = self.namer(f"{name}_cl" + (f"_{dtype}" if dtype else ""))
            kwargs = (Kwarg(key="dtype", value=dtype),) if dtype else ()
            self.steps.append(TorchStep(outputs=(cl,), fn="channels_last", args=(TensorArg(name=name),), kwargs=kwargs))
            self.channels_last[key] = cl
        return self.channels_last[key]

    def k_major_copy(self, name: str) -> str:
        """A copy of a matrix with its last two dims swapped (once per tensor), so a kernel reads it K-major."""
        if name not in self.k_major:
            view, copy = self.namer(f"{name}_t"), self.namer(f"{name}_kmajor")
            self.steps.append(TorchStep(outputs=(view,), fn="transpose", args=(TensorArg(name=name), LiteralArg(value=-2), LiteralArg(value=-1))))
            self.steps.append(TorchStep(outputs=(copy,), fn="contiguous", args=(TensorArg(name=view),)))
            self.k_major[name] = copy
        return self.k_major[name]

    def reshape(self, name: str, raw: str, shape: tuple) -> str:
        """``name`` reshaped to ``shape`` by one step named after ``raw``."""
        out = self.namer(raw)
        self.steps.append(TorchStep(outputs=(out,), fn="reshape", args=(TensorArg(name=name), LiteralArg(value=tuple(shape)))))
        return out


def _whitelist_form(fn: str, args: list, kwargs: dict, shape) -> tuple[str | None, Any, dict]:
    """Rewrite a traced call into the torch-step whitelist's spelling (None, reason when impossible)."""
    fn = _TORCH_NAME.get(fn, fn)
    kwargs = {k: v for k, v in kwargs.items() if not k.startswith("_") and v is not None}
    if fn == "t":
        return "transpose", [args[0], 0, 1], {}
    if fn in ("permute", "reshape") and len(args) > 2:
        return fn, [args[0], tuple(args[1:])], kwargs
    if fn in ("permute", "reshape") and len(args) == 2 and isinstance(args[1], list):
        return fn, [args[0], tuple(args[1])], kwargs
    if fn == "flip" and len(args) > 1:  # x.flip(1), x.flip(1, 2), torch.flip(x, [1]): the dims as one tuple
        dims = args[1] if len(args) == 2 and isinstance(args[1], list | tuple) else args[1:]
        return fn, [args[0], tuple(dims)], kwargs
    if fn in ("max", "min") and (len(args) > 1 and isinstance(args[1], int) or "dim" in kwargs):
        return fn, args, kwargs  # torch.max(x, dim): (values, indices)
    if fn in ("max", "min"):
        return ("maximum" if fn == "max" else "minimum"), args, kwargs
    if fn == "linalg_vector_norm":  # torch.norm's spelling: ord -> p, every dim when dim is None
        return "norm", [args[0]], {"p": args[1] if len(args) > 1 else kwargs.get("ord", 2),
                                   **{k: v for k, v in kwargs.items() if k in ("dim", "keepdim")},
                                   **dict(zip(("dim", "keepdim"), args[2:]))}
    if fn in ("clamp_min", "clamp_max"):
        return "clamp", [args[0]], {("min" if fn == "clamp_min" else "max"): args[1]}
    if fn == "clip":
        return "clamp", args, kwargs
    if fn == "relu6":
        return "hardtanh", [args[0]], {"min_val": 0.0, "max_val": 6.0}
    if fn == "dropout":
        return None, "dropout with p > 0 in training mode is random: no program can match it", {}
    if fn in ("softmax", "log_softmax"):
        kwargs.pop("dtype", None)
    return fn, args, kwargs


# canonical torch-step names for ops whose traced name differs
_TORCH_NAME = {
    "truediv": "div", "itruediv": "div", "iadd": "add", "isub": "sub", "imul": "mul", "rsub": "rsub",
    "T": "t", "view": "reshape", "multiply": "mul", "subtract": "sub", "divide": "div", "view_as": "reshape_as", "size": "size",
    "matmul": "matmul", "mm": "matmul", "bmm": "matmul", "floordiv": "floor_divide", "negative": "neg",
}


def _torch_step_unknown(fn: str) -> str:
    """'' when the language's torch-step whitelist has ``fn`` (or no whitelist is installed)."""
    try:
        from dsl_compiler import torch_steps
    except ImportError:
        return ""
    for attr in ("is_allowed", "is_whitelisted", "allowed"):
        check = getattr(torch_steps, attr, None)
        if callable(check):
            try:
                return "" if check(fn) else f"`{fn}` is not in the torch-step whitelist"
            except Exception:
                break
    for attr in ("WHITELIST", "TORCH_STEPS", "ALLOWED", "STEPS", "FUNCTIONS"):
        table = getattr(torch_steps, attr, None)
        if table is not None:
            return "" if fn in table else f"`{fn}` is not in the torch-step whitelist"
    return ""
