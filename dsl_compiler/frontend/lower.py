"""Lowering normalised ops into a μCUTLASS program: GEMM and conv anchors become kernels, the
elementwise chains after them their epilogues, reductions row reductions, the rest PyTorch steps."""

from __future__ import annotations

import math
from typing import Any

from dsl_compiler.diagnostics import Diagnostic
from dsl_compiler.ir import (
    Acc,
    Binary,
    Const,
    ConvOp,
    GemmOp,
    Kernel,
    KernelConfig,
    Kwarg,
    Let,
    LiteralArg,
    Operand,
    ParamCall,
    Program,
    Reduce,
    Ref,
    Store,
    TensorArg,
    TensorDecl,
    TorchStep,
    Unary,
)
from dsl_compiler.frontend.concat import cat_as_slice_stores, cat_prefix_families
from dsl_compiler.frontend.results import TraceOptions, TraceResult
from dsl_compiler.frontend.reference import LoadedReference, ParamRef, Traced
from dsl_compiler.frontend.graph import KernelGroup, LoweringSettings, OpGraph
from dsl_compiler.frontend.normalize import DTYPES, Op, TRANSPOSES, literal
from dsl_compiler.frontend.passes.padding import (
    TMA_BYTES, alignment, conv_padding, element_bytes, epilogue_padding, gemm_padding, gemm_shapes, pad_spec,
)
from dsl_compiler.frontend.passes.precision import fold_store_casts, half_math, storage_math
from dsl_compiler.frontend.passes.folding import emit_folded_batch_norm
from dsl_compiler.frontend.passes.grouping import group_kernels
from dsl_compiler.frontend.passes.naming import Namer, safe_base


class Lowering:
    def __init__(self, traced: Traced, options: TraceOptions, ref: LoadedReference, why: dict[str, str] | None = None):
        self.traced = traced
        self.options = options
        self.name = ref.name
        self.allowed_precisions = ref.allowed_precisions
        # 16-bit math over fp32 data, only where the problem allows it
        self.half_math = options.math if options.math in ref.allowed_precisions else None
        self.why = why or {}  # kernel name -> why its epilogue or kernel went to PyTorch
        self.settings = LoweringSettings(options, ref.allowed_precisions, self.half_math, self.why)
        self.graph = OpGraph(traced)
        self.tuple_outputs: dict[Any, Any] = {}
        self.nodes = self.graph.nodes
        self.ops = self.graph.ops
        self.coverage = self.graph.coverage
        self.diagnostics: list[Diagnostic] = []
        self.namer = Namer()
        g = self.graph
        self.resolve, self.meta, self.shape_of, self.dtype_of, self.users = g.resolve, g.meta, g.shape_of, g.dtype_of, g.users
        self.cover, self.is_param, self.is_depthwise, self.bias_index = g.cover, g.is_param, g.is_depthwise, g.bias_index
        self.depends_on, self.group_of = g.depends_on, g.group_of

    # -- phase 1: normalise ----------------------------------------------------------------
    def normalise(self):
        self.graph.normalise()

    # -- phases 2 and 3: grouping -------------------------------------------------------------
    def run(self) -> TraceResult:
        self.normalise()
        self.member_of = self.graph.member_of
        self.groups = self.graph.groups
        self.aliases_to_reduce = self.graph.aliases_to_reduce
        group_kernels(self.graph, self.settings)
        return self.emit()

    # -- phase 4: emit -----------------------------------------------------------------------
    def emit(self) -> TraceResult:
        self.tensor_name: dict[Any, str] = {}
        self.decls: list[TensorDecl] = []
        self.steps: list[Any] = []
        self.param_names: dict[str, str] = {}
        self.emitted: set[Any] = set()
        self.channels_last: dict[str, str] = {}
        self.cl_tensors: set[str] = set()
        self.k_major: dict[str, str] = {}
        self.casts: dict[tuple[str, str], str] = {}
        self.pads: dict[tuple[str, tuple[int, ...]], str] = {}
        self.failed = False

        for n in self.nodes:
            if self.ops[n].kind == "input":
                self.declare_input(n)
        for g in self.groups:
            g.kernel_name = self.namer(g.kernel_name)
        out_node = next(n for n in self.nodes if n.op == "output")
        # live values: what the output needs; dead users do not force a kernel to store a value
        self.live: set[Any] = set()
        stack = [out_node]
        while stack:
            n = stack.pop()
            if n in self.live:
                continue
            self.live.add(n)
            stack.extend(n.all_input_nodes)
        outputs = []
        ret = out_node.args[0]
        rets = list(ret) if isinstance(ret, (list, tuple)) else [ret]
        for r in rets:
            name = self.value(r)
            if name is None:
                if not self.failed:
                    self.fail(f"the model returns {r!r}, which is not a tensor the program computes")
                continue
            outputs.append(name)
        for n in self.nodes:
            if n in self.coverage or n.op == "output":
                continue
            op = self.ops[n]
            if op.kind == "alias":
                self.cover(n, "folded", where=self.tensor_name.get(self.resolve(n), ""), reason="identity (no data movement needed)")
            elif op.kind == "const":
                self.cover(n, "folded", reason="a size or constant, folded at trace time")
            elif op.name in TRANSPOSES:
                self.cover(n, "folded", reason="transpose read as a kernel operand ^T")
            elif n not in self.live:
                self.cover(n, "folded", reason="its result is unused")
            elif self.failed:
                self.cover(n, "unsupported", reason="not lowered: an op it feeds has no program form")
            else:
                self.cover(n, "folded", reason="folded into another op")
        program = None
        if not self.failed and self.half_math is not None:
            self.steps = fold_store_casts(self.steps, outputs)
        if not self.failed:
            try:
                program = Program(name=self.namer_program(), decls=tuple(self.decls), steps=tuple(self.steps), outputs=tuple(outputs))
            except Exception as exc:  # pydantic validation: a lowering bug shows as a diagnostic
                self.fail(f"could not assemble the program: {exc}")
        if program is not None and self.options.concat_slices:
            program, concatenated = cat_as_slice_stores(program)
            program, families = cat_prefix_families(program)
            concatenated.update(families)
            for n in self.nodes:
                out = self.tensor_name.get(n)
                if out in concatenated and n in self.coverage:
                    self.cover(n, "folded", where=out, reason=f"kernels {', '.join(concatenated[out])} store into "
                               f"their channels of {out} (slice stores): no copy")
        coverage = [self.coverage[n] for n in self.nodes if n in self.coverage]
        return TraceResult(program=program, coverage=coverage, diagnostics=self.diagnostics)

    def namer_program(self) -> str:
        return safe_base(self.name)

    def fail(self, message: str, code: str = "unsupported", hint: str | None = None):
        self.failed = True
        self.diagnostics.append(Diagnostic(code=code, message=message, hint=hint or "write this part of the program by hand"))

    def declare_input(self, n):
        tm = self.meta(n)
        if tm is None:
            self.cover(n, "unsupported", reason="a non-tensor forward() argument")
            self.fail(f"forward() argument {n.name} is not a tensor")
            return
        dtype = DTYPES.get(str(tm.dtype))
        if dtype is None:
            self.cover(n, "unsupported", reason=f"element type {tm.dtype}")
            self.fail(f"input {n.name} has element type {tm.dtype}; the language has f32, bf16 and f16")
            return
        name = self.namer(n.name)
        self.tensor_name[n] = name
        self.decls.append(TensorDecl(kind="input", name=name, dtype=dtype, shape=tuple(int(s) for s in tm.shape)))
        self.cover(n, "input", where=name)

    def declare_param(self, ref: ParamRef, layout="contiguous", dtype: str | None = None,
                      extra: tuple[int, ...] | None = None) -> str | None:
        """The param holding a model tensor, declared once per layout, element type and padding
        (``dtype`` converts an fp32 tensor when it is bound: a kernel reading it in 16-bit math;
        ``extra`` declares it that much larger per dim: zero-padded once, when bound)."""
        import torch

        key = ref.key
        t = self.traced.state.get(key)
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

    def value(self, x, layout="contiguous", dtype: str | None = None, extra: tuple[int, ...] | None = None) -> str | None:
        """The program tensor name holding value x (emitting its producer first); ``dtype`` declares
        a param in that element type, ``extra`` zero-pads it (a param when bound, anything else by a
        ``pad`` step)."""
        import torch.fx

        if isinstance(x, ParamRef):
            return self.declare_param(x, layout, dtype, extra)
        if not isinstance(x, torch.fx.Node):
            return None
        x = self.resolve(x)
        op = self.ops[x]
        if extra is not None and any(extra) and op.kind != "param":
            name = self.value(x, layout, dtype)
            return self.pad_step(name, extra) if name is not None else None
        if op.kind == "param":
            name = self.declare_param(op.operands[0], layout, dtype, extra)
            if x not in self.coverage:
                self.cover(x, "param", where=name or "")
            return name
        if op.kind == "const":
            return None
        if x not in self.tensor_name:
            self.visit(x)
        return self.tensor_name.get(x)

    def visit(self, n):
        if n in self.emitted:
            return
        op = self.ops[n]
        if op.kind in ("alias", "param"):
            return
        group = self.member_of.get(n)
        if group is not None:
            self.emit_group(group)
            return
        self.emitted.add(n)
        if op.kind == "getitem":
            src = self.resolve(op.operands[0])
            self.visit(src)
            base = self.tensor_name.get(("tuple", src))
            if base is None:
                self.fail(f"{n.name} indexes a value that is not a tuple of tensors")
                return
            self.tensor_name[n] = self.tuple_outputs[src][op.index]
            self.cover(n, "folded", where=self.tensor_name[n], reason="tuple element of a PyTorch step")
            return
        if op.kind == "unsupported":
            self.cover(n, "unsupported", reason=op.reason)
            self.fail(f"{op.target} ({n.name}): {op.reason}")
            return
        self.emit_torch(n, op)

    # torch steps ------------------------------------------------------------------------------
    def emit_torch(self, n, op: Op):
        import torch.fx

        fn = op.torch_fn
        if fn is None:
            self.cover(n, "unsupported", reason=op.reason or "no PyTorch-step form")
            self.fail(f"{op.target} ({n.name}) has no PyTorch-step form")
            return
        fn, torch_args, torch_kwargs = _whitelist_form(fn, list(op.torch_args), dict(op.torch_kwargs), self.shape_of(n))
        if fn is None:
            self.cover(n, "unsupported", reason=torch_args)
            self.fail(f"{op.target} ({n.name}): {torch_args}")
            return
        op = Op(op.node, op.kind, op.target, name=op.name, torch_fn=fn, torch_args=torch_args, torch_kwargs=torch_kwargs,
                 reason=op.reason, fn=op.fn)
        args, kwargs = [], []
        pre_neg = fn == "rsub"  # c - x runs as add(neg(x), c)
        if pre_neg:
            fn = "add"
        torch_args = list(op.torch_args)
        if fn in ("cat", "stack") and torch_args and isinstance(torch_args[0], (list, tuple)):
            # the step spells cat([a, b], 1) as cat(a, b, dim=1): tensors first, then literals
            if len(torch_args) > 1:
                op.torch_kwargs = {**op.torch_kwargs, "dim": torch_args[1]}
            torch_args = list(torch_args[0])
        for a in torch_args:
            arg = self.torch_arg(a, n)
            if arg is _BAD:
                return
            args.append(arg)
        for k, v in op.torch_kwargs.items():
            if isinstance(v, (torch.fx.Node, ParamRef)):
                self.cover(n, "unsupported", reason=f"tensor keyword argument {k}")
                self.fail(f"{op.target} ({n.name}) passes a tensor as keyword {k}")
                return
            try:
                kwargs.append(Kwarg(key=k, value=literal(v)))
            except ValueError as exc:
                self.cover(n, "unsupported", reason=f"argument {k}: {exc}")
                self.fail(f"{op.target} ({n.name}): argument {k} is {exc}")
                return
        # drop trailing None positional args (an absent bias)
        while args and isinstance(args[-1], LiteralArg) and args[-1].value is None:
            args.pop()
        whitelist_reason = _torch_step_unknown(fn)
        if whitelist_reason:
            self.cover(n, "unsupported", reason=whitelist_reason)
            self.fail(f"{op.target} ({n.name}): {whitelist_reason}", hint="add the function to the torch-step whitelist or rewrite the model")
            return
        tm = n.meta.get("tensor_meta")
        single = fn in ("amax", "amin")  # a torch.max(x, dim) whose indices are unused
        if isinstance(tm, (list, tuple)) and not hasattr(tm, "shape") and not single:  # TensorMetadata is a NamedTuple
            outs = tuple(self.namer(f"{n.name}_{i}") for i in range(len(tm)))
            self.tuple_outputs[n] = outs
            self.tensor_name[("tuple", n)] = outs[0]
        else:
            outs = (self.namer(n.name),)
            self.tensor_name[n] = outs[0]
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
        self.cover(n, "torch_step", where=outs[0], reason=reason or f"{op.target} has no μCUTLASS kernel form")

    def torch_arg(self, a, n):
        import torch.fx

        if isinstance(a, torch.fx.Node) and "const" in self.resolve(a).meta:
            return LiteralArg(value=literal(self.resolve(a).meta["const"]))
        if isinstance(a, (list, tuple)) and any(isinstance(v, torch.fx.Node) for v in a):
            if all(not isinstance(v, torch.fx.Node) or "const" in v.meta for v in a):
                a = tuple(v.meta["const"] if isinstance(v, torch.fx.Node) else v for v in a)
        if isinstance(a, (torch.fx.Node, ParamRef)):
            name = self.value(a)
            if name is None:
                self.cover(n, "unsupported", reason="an argument is not a tensor the program has")
                self.fail(f"{n.name}: an argument is not a tensor the program has")
                return _BAD
            return TensorArg(name=name)
        try:
            return LiteralArg(value=literal(a))
        except ValueError as exc:
            self.cover(n, "unsupported", reason=f"argument {exc}")
            self.fail(f"{self.ops[n].target} ({n.name}): argument {exc} has no program form")
            return _BAD

    # kernels ----------------------------------------------------------------------------------
    def k_major_copy(self, name: str) -> str:
        """A copy of a matrix with its last two dims swapped (once per tensor), so a kernel reads it K-major."""
        if name not in self.k_major:
            view, copy = self.namer(f"{name}_t"), self.namer(f"{name}_kmajor")
            self.steps.append(TorchStep(outputs=(view,), fn="transpose", args=(TensorArg(name=name), LiteralArg(value=-2), LiteralArg(value=-1))))
            self.steps.append(TorchStep(outputs=(copy,), fn="contiguous", args=(TensorArg(name=view),)))
            self.k_major[name] = copy
        return self.k_major[name]

    def batch_flat(self, name: str, shape: tuple[int, ...]) -> str:
        """A rank > 3 operand as [batch, rows, cols]: its leading dims merged by a reshape step."""
        flat = self.namer(f"{name}_3d")
        self.steps.append(TorchStep(outputs=(flat,), fn="reshape", args=(TensorArg(name=name), LiteralArg(value=(-1,) + tuple(shape[-2:])))))
        return flat

    def conv_as_gemm(self, group: KernelGroup, half: str | None) -> str | None:
        """"nchw" or "nhwc" when the group's conv is a 1x1 conv (stride 1, no padding, one group) that runs as a
        GEMM over its activation as stored: "nhwc" when a conv kernel wrote it channels-last (one GEMM over
        [N*H*W, C], K-major), else "nchw" (a batched GEMM over [N, C, H*W], read M-major). None otherwise,
        and where the epilogue reads more than the conv's bias and scalars or a padding would be needed."""
        import torch.fx

        op = self.ops[group.anchor]
        if op.kind != "conv" or not self.options.conv1x1_gemm or int(op.conv.get("groups", 1)) != 1:
            return None
        if getattr(group, "batch_norm", None) is not None:
            return None  # a folded BatchNorm's statistics pass reads the conv's [N, K, H, W] output
        x, w = op.operands
        sx, sw = self.shape_of(x), self.shape_of(w)
        if sx is None or sw is None or any(int(f) != 1 for f in sw[2:]):
            return None
        if any(int(v) != 1 for v in op.conv["stride"]) or any(int(v) != 0 for v in op.conv["padding"]):
            return None
        # 16 bytes: C as the filter's (and, NHWC, the activation's) contiguous extent, K as the output's
        align = alignment(half, self.dtype_of(x))
        if self.is_param(x) or sx[1] % align or sw[0] % (TMA_BYTES // element_bytes(self.dtype_of(group.anchor))):
            return None
        if op.bias is not None and not (self.is_param(op.bias) and self.shape_of(op.bias) == (sw[0],)):
            return None
        members = set(group.members) | {group.anchor}
        for m in group.members:
            for o in self.ops[m].operands:
                if isinstance(o, (torch.fx.Node, ParamRef)):
                    r = self.resolve(o) if isinstance(o, torch.fx.Node) else o
                    if r not in members and self.bias_index(group, r) != "scalar":
                        return None
        name = self.value(x)  # its producer first: a conv kernel writes it NHWC
        if name is not None and name in self.cl_tensors:
            return "nhwc"
        spatial = math.prod(sx[2:])
        if spatial % alignment(half, self.dtype_of(x)):
            return None  # [N, C, H*W] read M-major: H*W is its contiguous extent
        return "nchw"

    def conv_gemm_operands(self, op: Op, half: str | None, mode: str) -> GemmOp:
        """The GEMM of a 1x1 conv: the activation reshaped as stored (no copy), the filter [K, C, 1, ...]
        declared [K, C] (a reshape when bound), read ``w^T``."""
        x, w = op.operands
        sx, sw = self.shape_of(x), self.shape_of(w)
        w_name = self.declare_param_as(w, (sw[0], sw[1]), half)
        x_name = self.value(x)
        if half and self.dtype_of(x) == "f32":
            x_name = self.cast(x_name, half)  # a cast keeps the layout (and folds into a producer's store)
        if mode == "nhwc":
            nhwc = self.namer(f"{x_name}_nhwc")
            perm = (0,) + tuple(range(2, len(sx))) + (1,)
            self.steps.append(TorchStep(outputs=(nhwc,), fn="permute", args=(TensorArg(name=x_name), LiteralArg(value=perm))))
            rows = self.namer(f"{x_name}_rows")
            self.steps.append(TorchStep(outputs=(rows,), fn="reshape", args=(TensorArg(name=nhwc), LiteralArg(value=(-1, sx[1])))))
            a = Operand(name=rows)
        else:
            flat = self.namer(f"{x_name}_3d")
            self.steps.append(TorchStep(outputs=(flat,), fn="reshape", args=(TensorArg(name=x_name), LiteralArg(value=(sx[0], sx[1], -1)))))
            a = Operand(name=flat, transpose=True)
        return GemmOp(a=a, b=Operand(name=w_name or "?", transpose=True))

    def declare_param_as(self, x, shape: tuple[int, ...], half: str | None) -> str | None:
        """A param declared in another shape of the same size (bound by a reshape), in the kernel's type."""
        import torch.fx

        r = self.resolve(x) if isinstance(x, torch.fx.Node) else x
        ref = r if isinstance(r, ParamRef) else self.ops[r].operands[0]
        t = self.traced.state.get(ref.key)
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
        if not isinstance(r, ParamRef) and r not in self.coverage:
            self.cover(r, "param", where=self.param_names[key])
        return self.param_names[key]

    def operand(self, x, half: str | None, layout="contiguous", extra: tuple[int, ...] | None = None) -> str | None:
        """The tensor a kernel reads for value x: in 16-bit math (``half``) a param is declared in that
        type (converted once when bound) and any other fp32 tensor is converted by a ``to`` step.
        ``extra`` zero-pads it at the end of each dim: a param once, when bound; any other tensor by a
        ``pad`` step per call (after the conversion, on the narrower copy)."""
        if self.is_param(x):
            return self.value(x, layout, dtype=half if self.dtype_of(x) == "f32" else None, extra=extra)
        name = self.value(x, layout)
        if name is not None and half is not None and self.dtype_of(x) == "f32":
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
        if d_c and not self.is_param(x):
            name = self.value(x)
            if name is None:
                return None
            extra = (0, d_c) + (0,) * (len(self.shape_of(x)) - 2)
            padded = self.pad_step(name, extra)
            if half is not None and self.dtype_of(x) == "f32":
                if padded not in self.cl_tensors:
                    return self.as_channels_last(padded, dtype=half)
                padded = self.cast(padded, half)
            return self.as_channels_last(padded)
        if d_c:
            return self.as_channels_last(self.operand(x, half, extra=(0, d_c) + (0,) * (len(self.shape_of(x)) - 2)))
        if half is not None and self.dtype_of(x) == "f32" and not self.is_param(x):
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

    def emit_group(self, group: KernelGroup):
        import torch.fx

        if group.anchor in self.emitted:
            return
        self.emitted.add(group.anchor)
        self.emitted.update(group.members)
        anchor_op = self.ops[group.anchor]
        half = half_math(self.graph, self.settings, anchor_op)
        members = set(group.members) | {group.anchor}
        gemm_1x1 = self.conv_as_gemm(group, half)

        # operands first (and everything the epilogue reads)
        d_m = d_n = d_k = d_c = d_kc = 0  # padding to 16 bytes: GEMM M, N, K; conv input and output channels
        if anchor_op.kind == "gemm":
            a, b = anchor_op.operands
            a_t, b_t = anchor_op.a_t, anchor_op.b_t
            kmajor = group.kernel_name in self.options.kmajor and storage_math(self.dtype_of(a) or "", half, self.allowed_precisions) == "tf32"
            d_m, d_n, d_k = gemm_padding(self.graph, self.settings, anchor_op, kmajor)
            shapes = gemm_shapes(self.graph, anchor_op)
            flat = anchor_op.flatten_a or anchor_op.flatten_batch
            a_extra = b_extra = None
            if shapes is not None and (d_m or d_n or d_k):
                sa, sb = shapes
                a_extra = (0,) * (len(sa) - 2) + ((d_k, d_m) if a_t else (d_m, d_k))
                b_extra = (0,) * (len(sb) - 2) + ((d_n, d_k) if b_t else (d_k, d_n))
            # a flattened operand is padded after its reshape
            a_name = self.operand(a, half, extra=None if flat else a_extra)
            b_name = self.operand(b, half, extra=None if anchor_op.flatten_batch else b_extra)
            if a_name and anchor_op.flatten_a:
                sa = self.shape_of(a)
                flat_name = self.namer(f"{a_name}_2d")
                self.steps.append(TorchStep(outputs=(flat_name,), fn="reshape", args=(TensorArg(name=a_name), LiteralArg(value=(-1, sa[-1])))))
                a_name = flat_name
            if anchor_op.flatten_batch and a_name and b_name:
                a_name = self.batch_flat(a_name, self.shape_of(a))
                b_name = self.pad_step(self.batch_flat(b_name, self.shape_of(b)), b_extra)
            if flat and a_name:
                a_name = self.pad_step(a_name, a_extra)
            if kmajor:
                # the target's tf32 wgmma reads both operands K-major: A as [M, K], B as [N, K] (written b^T)
                if a_t and a_name:
                    a_name, a_t = self.k_major_copy(a_name), False
                if not b_t and b_name:
                    b_name, b_t = self.k_major_copy(b_name), True
            op_ir = GemmOp(a=Operand(name=a_name or "?", transpose=a_t), b=Operand(name=b_name or "?", transpose=b_t))
        elif gemm_1x1:
            op_ir = self.conv_gemm_operands(anchor_op, half, gemm_1x1)
        else:
            x, w = anchor_op.operands
            d_c, d_kc = conv_padding(self.graph, self.settings, anchor_op)
            x_name = self.conv_input(x, half, d_c)
            w_extra = (d_kc, d_c) + (0,) * (len(self.shape_of(w)) - 2) if (d_c or d_kc) else None
            w_name = self.operand(w, half, layout="channels_last", extra=w_extra)
            c = anchor_op.conv
            op_ir = ConvOp(spatial_dims=c["dims"], x=Operand(name=x_name or "?"), w=Operand(name=w_name or "?"),
                           stride=tuple(c["stride"]), padding=tuple(c["padding"]), dilation=tuple(c["dilation"]), groups=c["groups"])
        folded_bias = None
        if group.batch_norm is not None:
            op_ir, folded_bias = emit_folded_batch_norm(self, group, op_ir)
        externals: dict[Any, tuple[str, str]] = {}
        for m in group.members:
            for o in self.ops[m].operands:
                if isinstance(o, (torch.fx.Node, ParamRef)):
                    r = self.resolve(o) if isinstance(o, torch.fx.Node) else o
                    if r in members:
                        continue
                    index = self.bias_index(group, r) or "full"
                    name = self.value(r, extra=epilogue_padding(self.graph, group, r, index, d_m, d_n or d_kc))
                    if anchor_op.kind == "conv" and index == "full" and name is not None:
                        name = self.as_channels_last(name)  # a residual must match the NHWC output
                    externals[r] = (name or "?", index)
        bias = anchor_op.bias if folded_bias is None else None
        bias_ref = folded_bias
        if bias is not None:
            r = self.resolve(bias) if isinstance(bias, torch.fx.Node) else bias
            index = self.bias_index(group, r)
            if anchor_op.kind == "conv" and (gemm_1x1 or self.shape_of(r) == (self.shape_of(group.anchor)[1],)):
                index = "col"  # the conv's own bias: one value per output channel
            name = self.value(r, extra=epilogue_padding(self.graph, group, r, index, d_m, d_n or d_kc))
            if index is None or name is None:
                self.fail(f"{group.anchor.name}: bias of shape {list(self.shape_of(r) or ())} does not broadcast over the output")
                return
            bias_ref = Ref(name=name, index=index)

        # expressions: a value read more than once inside the kernel becomes a `let`
        inner_uses: dict[Any, int] = {}
        for m in group.members:
            for o in self.ops[m].operands:
                if isinstance(o, torch.fx.Node) and self.resolve(o) in members:
                    inner_uses[self.resolve(o)] = inner_uses.get(self.resolve(o), 0) + 1
        outside = {v: any(u in self.live and (u not in members or u.op == "output") for u in self.users(v))
                   for v in [group.anchor] + group.members}
        lets: list[Let] = []
        stores: list[Store] = []
        kname = group.kernel_name
        dtype = self.dtype_of(group.anchor) or "f32"
        expr: dict[Any, Any] = {}

        def bind(v, e):
            if v not in group.reduces and inner_uses.get(v, 0) > 1 and not isinstance(e, (Acc, Ref, Const)):
                let_name = self.namer(f"{v.name}_v")
                lets.append(Let(name=let_name, expr=e))
                e = Ref(name=let_name, index="full")
            expr[v] = e

        base = Acc()
        if anchor_op.alpha != 1.0:
            base = Binary(fn="mul", lhs=base, rhs=Const(value=anchor_op.alpha))
        if bias_ref is not None:
            bterm = bias_ref if anchor_op.beta == 1.0 else Binary(fn="mul", lhs=bias_ref, rhs=Const(value=anchor_op.beta))
            base = Binary(fn="add", lhs=base, rhs=bterm)
        bind(group.anchor, base)
        for m in group.members:
            mop = self.ops[m]
            if mop.kind == "reduce":
                arg = expr[self.resolve(mop.operands[0])]
                if mop.scale != 1.0:
                    arg = Binary(fn="mul", lhs=arg, rhs=Const(value=mop.scale))
                if mop.shift != 0.0:
                    arg = Binary(fn="add", lhs=arg, rhs=Const(value=mop.shift))
                fn = {"sum": "row_sum", "mean": "row_sum", "max": "row_max", "min": "row_min"}[mop.fn]
                expr[m] = Reduce(fn=fn, arg=arg)
                continue
            args = []
            for o in mop.operands:
                if isinstance(o, (torch.fx.Node, ParamRef)):
                    r = self.resolve(o) if isinstance(o, torch.fx.Node) else o
                    if r in members:
                        args.append(expr[r])
                    else:
                        name, index = externals[r]
                        args.append(Ref(name=name, index=index))
                elif isinstance(o, (int, float)) and not isinstance(o, bool):
                    args.append(Const(value=float(o)))
                else:
                    self.fail(f"{m.name}: operand {o!r} is neither a tensor nor a number")
                    return
            if mop.fn in ("add", "sub", "mul", "div", "min", "max", "pow"):
                e = Binary(fn=mop.fn, lhs=args[0], rhs=args[1])
            elif mop.params:
                e = ParamCall(fn=mop.fn, arg=args[0], params=tuple(mop.params))
            else:
                e = Unary(fn=mop.fn, arg=args[0])
            bind(m, e)
        for v in [group.anchor] + group.members:
            if not outside[v]:
                continue
            name = self.namer(v.name if v is not group.anchor else f"{kname}_out")
            self.tensor_name[v] = name
            stores.append(Store(name=name, dtype=dtype, expr=expr[v]))
        # re-expand reduction stores to keepdim shapes with a reshape step after the kernel
        if stores and all(isinstance(st.expr, Reduce) for st in stores):
            # the CUTLASS epilogue writes a full output alongside its reductions
            first = stores[0].expr.arg
            if not isinstance(first, (Acc, Ref)):
                let_name = self.namer(f"{kname}_v")
                lets.append(Let(name=let_name, expr=first))
                first = Ref(name=let_name, index="full")
                stores = [Store(name=st.name, dtype=st.dtype, expr=Reduce(fn=st.expr.fn, arg=first))
                          if st.expr.arg == stores[0].expr.arg else st for st in stores]
            stores.insert(0, Store(name=self.namer(f"{kname}_tile"), dtype=dtype, expr=first))
        math_mode = storage_math(dtype, half, self.allowed_precisions)
        if anchor_op.kind == "conv" and math_mode == "tf32" and self.is_depthwise(anchor_op):
            math_mode = "f32"  # CUTLASS's depthwise kernel multiplies in fp32 on SIMT cores: say so
        kernel = Kernel(name=kname, op=op_ir, config=KernelConfig(math=math_mode), lets=tuple(lets), stores=tuple(stores))
        self.steps.append(kernel)
        if gemm_1x1:
            # the GEMM wrote [N, H*W, K] or [N*H*W, K]: the conv's output NHWC, seen as [N, K, H, W] channels-last
            out_shape = self.shape_of(group.anchor)
            nhwc = (out_shape[0],) + tuple(out_shape[2:]) + (out_shape[1],)
            for s in stores:
                v = next((k for k, nm in self.tensor_name.items() if nm == s.name), None)
                if v is None:
                    continue
                shaped = self.namer(f"{s.name}_nhwc")
                self.steps.append(TorchStep(outputs=(shaped,), fn="reshape", args=(TensorArg(name=s.name), LiteralArg(value=nhwc))))
                logical = self.namer(f"{s.name}_cl")
                perm = (0, len(nhwc) - 1) + tuple(range(1, len(nhwc) - 1))
                self.steps.append(TorchStep(outputs=(logical,), fn="permute", args=(TensorArg(name=shaped), LiteralArg(value=perm))))
                self.tensor_name[v] = logical
                self.cl_tensors.add(logical)
        elif anchor_op.kind == "conv":
            self.cl_tensors.update(s.name for s in stores if not isinstance(s.expr, Reduce))
        if d_m or d_n or d_kc:
            # the kernel computed padded rows / columns / channels: the program reads the real ones
            rank = len(self.shape_of(group.anchor))
            for s in stores:
                v = next((k for k, nm in self.tensor_name.items() if nm == s.name), None)
                if v is None:
                    continue
                if isinstance(s.expr, Reduce):
                    cut = (-d_m,)
                elif anchor_op.kind == "conv":
                    cut = (0, -d_kc) + (0,) * (rank - 2)
                elif anchor_op.flatten_a:
                    cut = (-d_m, -d_n)
                else:
                    cut = (0,) * (rank - 2) + (-d_m, -d_n)
                self.tensor_name[v] = self.pad_step(s.name, cut)
        out_shape = self.shape_of(group.anchor)
        if anchor_op.flatten_a or anchor_op.flatten_batch:
            for s in stores:
                v = next(k for k, nm in self.tensor_name.items() if nm in (s.name, self.pads.get((s.name, (-d_m, -d_n)))))
                current = self.tensor_name[v]
                shaped = self.namer(f"{s.name}_nd")
                self.steps.append(TorchStep(outputs=(shaped,), fn="reshape", args=(TensorArg(name=current), LiteralArg(value=tuple(out_shape)))))
                self.tensor_name[v] = shaped
        for m in group.reduces:
            if m in self.tensor_name and self.ops[m].keepdim:
                shaped = self.namer(f"{self.tensor_name[m]}_kd")
                self.steps.append(TorchStep(outputs=(shaped,), fn="unsqueeze", args=(TensorArg(name=self.tensor_name[m]), LiteralArg(value=-1))))
                self.tensor_name[m] = shaped
        # coverage
        self.cover(group.anchor, "kernel", where=kname)
        for m in group.members:
            self.cover(m, "reduction" if m in group.reduces else "epilogue", where=kname)
        for n_, red in self.aliases_to_reduce.items():
            if self.resolve(red) in group.reduces:
                self.cover(n_, "epilogue", where=kname, reason="")
        for x in self.nodes:
            xop = self.ops[x]
            if xop.name in TRANSPOSES and x not in self.coverage and all(
                    self.member_of.get(u) is group and u is group.anchor for u in self.users(x)):
                self.cover(x, "folded", where=kname, reason="transpose read as an operand ^T")
                self.emitted.add(x)

_BAD = object()


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
    if fn in ("max", "min"):
        return ("maximum" if fn == "max" else "minimum"), args, kwargs
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


# ---------------------------------------------------------------------------------------------
