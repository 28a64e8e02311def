"""Static checks of a program against a target GPU description (``targets/<name>.toml``).

Each rule returns Diagnostics with a location, what was found, what is allowed and a one-line fix.
Rule classes (the ``code`` of each diagnostic): ``undefined-name``, ``duplicate-name``, ``shape-mismatch``,
``dtype``, ``layout``, ``alignment``, ``tile``, ``cluster``, ``smem``, ``reduction``, ``config``,
``unknown-function``, ``torch-step``, and ``unsupported`` (what the CUTLASS backend cannot build).
"""

from __future__ import annotations

import functools
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsl_compiler import ir, row_ops, shapes
from dsl_compiler.diagnostics import Diagnostic, has_errors
from dsl_compiler.row_checks import check_row_kernel
from dsl_compiler.parser import parse
from dsl_compiler.walk import expr_nodes

TARGETS_DIR = Path(__file__).with_name("targets")

# Codes after which a kernel's later rules would only repeat the same cause.
_BLOCKING = {"undefined-name", "shape-mismatch", "unknown-function", "torch-step", "duplicate-name"}


@dataclass(frozen=True)
class Target:
    """A GPU description (data from targets/<name>.toml)."""

    name: str
    max_memory_bytes: int
    max_smem_bytes: int
    min_stages: int
    max_cluster_size: int
    cluster_extents: tuple[int, ...]
    max_cluster_third: int
    tma_alignment_bytes: int
    m_multiple: int
    max_tile_m: int
    n_multiple: int
    n_min: int
    n_max: int
    cooperative_m_multiple: int
    mma_k: dict[str, int]
    tensor_core_math: tuple[str, ...]
    kmajor_only_math: tuple[str, ...]
    math_storage: dict[str, str]
    reductions: tuple[str, ...]
    reduction_ops: tuple[str, ...]
    swizzle: tuple[int, ...]


def available_targets() -> list[str]:
    return sorted(p.stem for p in TARGETS_DIR.glob("*.toml"))


@functools.lru_cache(maxsize=None)
def load_target(name: str = "sm90a") -> Target:
    """The target description; raises ValueError naming the available ones for an unknown name."""
    path = TARGETS_DIR / f"{name}.toml"
    if not path.is_file():
        raise ValueError(f"unknown target '{name}'; available: {', '.join(available_targets())}")
    d = tomllib.loads(path.read_text())
    return Target(
        name=d["name"],
        max_memory_bytes=int(d["memory"]["max_bytes"]),
        max_smem_bytes=d["smem"]["max_bytes_per_block"],
        min_stages=d["smem"]["min_stages"],
        max_cluster_size=d["cluster"]["max_size"],
        cluster_extents=tuple(d["cluster"]["allowed_extents"]),
        max_cluster_third=d["cluster"]["max_third_dim"],
        tma_alignment_bytes=d["tma"]["alignment_bytes"],
        m_multiple=d["wgmma"]["m_multiple"],
        max_tile_m=d["wgmma"]["max_tile_m"],
        n_multiple=d["wgmma"]["n_multiple"],
        n_min=d["wgmma"]["n_min"],
        n_max=d["wgmma"]["n_max"],
        cooperative_m_multiple=d["wgmma"]["cooperative_m_multiple"],
        mma_k=dict(d["wgmma"]["k_elements"]),
        tensor_core_math=tuple(d["wgmma"]["tensor_core_math"]),
        kmajor_only_math=tuple(d["wgmma"].get("kmajor_only_math", ())),
        math_storage=dict(d["wgmma"]["math_storage"]),
        reductions=tuple(d["epilogue"]["reductions"]),
        reduction_ops=tuple(d["epilogue"]["reduction_ops"]),
        swizzle=tuple(d["epilogue"]["swizzle"]),
    )


def _diag(code: str, message: str, span: ir.Span | None, found: Any = None, expected: Any = None,
          hint: str | None = None, severity: str = "error") -> Diagnostic:
    return Diagnostic(severity=severity, code=code, message=message, span=span,
                      found=None if found is None else str(found), expected=None if expected is None else str(expected),
                      hint=hint)


def _dims_text(t: tuple[int, ...]) -> str:
    return "x".join(str(v) for v in t)


# ---------------------------------------------------------------------------------------------
# Names


def _check_names(program: ir.Program) -> list[Diagnostic]:
    """Every name defined once, and before it is used."""
    return _NameChecker(program).run()


class _NameChecker:
    """The name check's walk over the program. A tensor filled by slices is defined by its first writer and read
    whole after its last; a read of its channels y[a:b] needs those channels written."""

    def __init__(self, program: ir.Program):
        self.program = program
        self.diags: list[Diagnostic] = []
        self.defined: dict[str, ir.Span | None] = {}
        self.later: dict[str, ir.Span | None] = {}  # names some step defines, where the first does
        for step in program.steps:
            names = [s.name for s in step.stores] if isinstance(step, ir.Kernel | ir.RowKernel) else list(step.outputs)
            for n in names:
                self.later.setdefault(n, step.span)
        self.writes_at: list[list[tuple[str, tuple[int, int]]]] = []  # per step: the slices it writes
        for step in program.steps:
            self.writes_at.append([(s.name, s.channels) for s in step.stores if s.channels is not None]
                                  if isinstance(step, ir.Kernel | ir.RowKernel) else
                                  [(step.outputs[0], step.channels)] if step.channels is not None else [])
        self.sliced = {name for w in self.writes_at for name, _ in w}
        self.last_writer = {name: i for i, w in enumerate(self.writes_at) for name, _ in w}
        self.step_index = 0  # the step being read (len(steps) at the output line)
        self.slice_defined: set[str] = set()
        self.kernel_names: set[str] = set()

    def run(self) -> list[Diagnostic]:
        for d in self.program.decls:
            self.define(d.name, d.span, d.kind)
        for self.step_index, step in enumerate(self.program.steps):
            if isinstance(step, ir.Kernel | ir.RowKernel):
                self.kernel(step)
            else:
                for a in step.args:
                    if isinstance(a, ir.TensorArg):
                        self.use(a.name, a.span or step.span, f"torch step '{step.fn}'", a.channels)
                for o in step.outputs:
                    self.define(o, step.span, "slice store" if step.channels is not None else "torch-step output")
        seen: set[str] = set()
        for o in self.program.outputs:
            if o in seen:
                self.diags.append(_diag("duplicate-name", f"'{o}' is output twice", self.program.outputs_span, found=o,
                                        expected="distinct outputs", hint="list each output once"))
            seen.add(o)
            self.step_index = len(self.program.steps)
            self.use(o, self.program.outputs_span, "the output line")
        return self.diags

    def kernel(self, step: ir.Kernel | ir.RowKernel) -> None:
        if step.name in self.kernel_names:
            self.diags.append(_diag("duplicate-name", f"two kernels are named '{step.name}'", step.span,
                                    found=step.name, expected="distinct kernel names", hint="rename one of them"))
        self.kernel_names.add(step.name)
        for o in step.operands:
            self.use(o.name, o.span or step.op.span, f"kernel '{step.name}'")
        lets: set[str] = set()
        for let in step.lets:
            for node in expr_nodes(let.expr):
                if isinstance(node, ir.Ref) and node.name not in lets:
                    self.use(node.name, node.span or let.span, f"kernel '{step.name}'")
            if let.name in lets or let.name in self.defined:
                self.diags.append(_diag("duplicate-name", f"let '{let.name}' shadows another name", let.span,
                                        found=let.name, expected="a new name", hint="choose a name not used above"))
            lets.add(let.name)
        for store in step.stores:
            for node in expr_nodes(store.expr):
                if isinstance(node, ir.Ref) and node.name not in lets:
                    self.use(node.name, node.span or store.span, f"kernel '{step.name}'")
        for store in step.stores:
            self.define(store.name, store.span, "slice store" if store.channels is not None else "store")

    def written_before(self, name: str, channels: tuple[int, int]) -> bool:
        covered = sorted(ch for w in self.writes_at[:self.step_index] for n, ch in w if n == name)
        reach = channels[0]
        for a, b in covered:
            if a <= reach < b:
                reach = b
        return reach >= channels[1]

    def define(self, name: str, span: ir.Span | None, what: str) -> None:
        if what == "slice store" and name in self.slice_defined:
            return
        if what == "slice store" and name not in self.defined:
            self.slice_defined.add(name)
        if name in self.defined:
            first = self.defined[name]
            self.diags.append(_diag("duplicate-name", f"'{name}' is defined twice", span, found=f"a second {what} '{name}'",
                                    expected="each tensor name defined once",
                                    hint=f"rename it (the first definition is at {first})" if first else "rename it"))
        else:
            self.defined[name] = span

    def use(self, name: str, span: ir.Span | None, where: str, channels: tuple[int, int] | None = None) -> None:
        diags, defined, sliced = self.diags, self.defined, self.sliced
        if channels is not None and name not in sliced:
            diags.append(_diag("shape-mismatch", f"{where} reads {name}[{channels[0]}:{channels[1]}]; '{name}' is no "
                               "tensor that slices fill", span, found=f"{name}[{channels[0]}:{channels[1]}]",
                               expected=name, hint="read channel slices of tensors written by `store y[a:b]`"))
            return
        if channels is not None and name in defined and not self.written_before(name, channels):
            diags.append(_diag("undefined-name", f"{where} reads {name}[{channels[0]}:{channels[1]}] before those "
                               "channels are written", span, found="channels not yet written",
                               expected="a read after the writers of those channels",
                               hint="move this step below the steps that write those channels"))
            return
        if channels is None and name in defined and name in sliced and self.step_index <= self.last_writer[name]:
            diags.append(_diag("undefined-name", f"'{name}' is read by {where} before all its channels are stored",
                               span, found=f"its last slice writer comes later, at {self.program.steps[self.last_writer[name]].span}",
                               expected=f"a read after every `store {name}[a:b]`",
                               hint="move this step below the last step that writes into it, or read the channels "
                                    f"written so far: {name}[0:c]"))
            return
        if name in defined:
            return
        if name in self.later:
            diags.append(_diag("undefined-name", f"'{name}' is used by {where} before it is defined", span,
                               found=f"'{name}' defined later, at {self.later[name]}", expected="a name defined above its use",
                               hint="move the step that computes it above this one"))
        else:
            diags.append(_diag("undefined-name", f"'{name}' is not defined", span, found=name,
                               expected="an input, a param, or a tensor stored or computed earlier",
                               hint=f"declare it (input {name}: f32[...]) or compute it in an earlier step"))


# ---------------------------------------------------------------------------------------------
# One kernel


class _KernelChecker:
    def __init__(self, program: ir.Program, kernel: ir.Kernel, types: dict[str, shapes.TensorType], target: Target,
                 strict_math: bool):
        self.p = program
        self.k = kernel
        self.cfg = kernel.config
        self.types = types
        self.t = target
        self.strict_math = strict_math
        self.diags: list[Diagnostic] = []
        self.is_conv = isinstance(kernel.op, ir.ConvOp)
        # the op's output, its GEMM view and layout; stays None when the op's shapes do not work out
        self.out_shape: tuple[int, ...] | None = None

    def err(self, code: str, message: str, span: ir.Span | None, **kw: Any) -> None:
        self.diags.append(_diag(code, f"kernel '{self.k.name}': {message}", span or self.k.span, **kw))

    def run(self) -> list[Diagnostic]:
        try:
            out_shape, dims, layout = shapes.op_output(self.k, self.types)
        except shapes.ShapeError as exc:
            return [_diag(exc.code, f"kernel '{self.k.name}': {exc.message}", exc.span or self.k.span, exc.found,
                          exc.expected, exc.hint)]
        self.out_shape, self.dims, self.out_layout = out_shape, dims, layout
        self.check_epilogue()
        math = self.check_dtypes()
        self.check_layout_and_alignment()
        self.check_operand_majorness(math)
        self.check_config(math)
        return self.diags

    # ---- epilogue: operand shapes, lets, reductions
    def check_epilogue(self) -> None:
        lets = {let.name for let in self.k.lets}
        m_rows = self.dims.m if not isinstance(self.k.op, ir.GroupedGemmOp) else self.out_shape[0]
        n_cols = self.dims.n
        row = "pixel" if self.is_conv else "row"  # what one epilogue row is
        view = "output pixels N*P*Q" if self.is_conv else "output rows M"
        for owner, expr, top_reduce_ok in ([(let, let.expr, False) for let in self.k.lets]
                                           + [(s, s.expr, True) for s in self.k.stores]):
            for node in expr_nodes(expr):
                if isinstance(node, ir.Reduce) and not (top_reduce_ok and node is expr):
                    self.err("reduction", f"{node.fn} inside an expression", node.span or owner.span,
                             found=f"{node.fn}(...) nested", expected="a reduction only at the top of a store",
                             hint=f"write it as its own store: store s: f32 = {node.fn}(...)")
                if not isinstance(node, ir.Ref):
                    continue
                span = node.span or owner.span
                if node.name in lets:
                    if node.index != "full":
                        self.err("shape-mismatch", f"let '{node.name}' is a full tile; it cannot be indexed [{node.index}]",
                                 span, found=f"{node.name}[{node.index}]", expected=node.name,
                                 hint=f"write {node.name} without an index")
                    continue
                t = self.types.get(node.name)
                if t is None:
                    continue  # reported by the name check
                if node.index == "full":
                    if t.shape != self.out_shape:
                        self.err("shape-mismatch", f"'{node.name}' is read whole but its shape is not the output's", span,
                                 found=f"{node.name} {list(t.shape)}", expected=f"{list(self.out_shape)}",
                                 hint=f"for a vector write {node.name}[col] (length {n_cols}) or {node.name}[row] "
                                 f"(length {m_rows})")
                    elif (self.is_conv and len(t.shape) >= 3 and t.layout != self.out_layout
                          and not (self.out_layout == "channels_last" and t.reads_channels_last)):
                        self.err("layout", f"'{node.name}' is {t.layout} but the conv output is {self.out_layout}", span,
                                 found=t.layout, expected=self.out_layout,
                                 hint=f"convert it first: torch {node.name}_cl = channels_last({node.name})")
                elif node.index == "col" and t.numel != n_cols:
                    self.err("shape-mismatch", f"'{node.name}[col]' needs one value per output "
                             f"{'channel' if self.is_conv else 'column'}", span,
                             found=f"{node.name} {list(t.shape)} ({t.numel} values)", expected=f"{n_cols} values",
                             hint=(f"{node.name} has {m_rows} values, as many as the output {row}s: write "
                                   f"{node.name}[row] if it holds one value per {row}; if it is per output "
                                   f"{'channel' if self.is_conv else 'column'}, declare it with {n_cols} values")
                             if t.numel == m_rows else
                             f"declare {node.name} with {n_cols} values, one per output "
                             f"{'channel' if self.is_conv else 'column'} ({t.numel} values fit neither the {n_cols} "
                             f"{'channels' if self.is_conv else 'columns'} nor the {m_rows} {row}s)")
                elif node.index == "row" and t.numel != m_rows:
                    self.err("shape-mismatch", f"'{node.name}[row]' needs one value per {view}", span,
                             found=f"{node.name} {list(t.shape)} ({t.numel} values)", expected=f"{m_rows} values",
                             hint=(f"{node.name} has {n_cols} values, as many as the output columns: write "
                                   f"{node.name}[col] if it holds one value per column; if it is per {row}, "
                                   f"declare it with {m_rows} values")
                             if t.numel == n_cols else
                             f"declare {node.name} with {m_rows} values, one per {row} ({t.numel} values fit neither "
                             f"the {m_rows} {row}s nor the {n_cols} columns)")
                elif node.index == "scalar" and t.numel != 1:
                    self.err("shape-mismatch", f"'{node.name}[scalar]' needs a one-element tensor", span,
                             found=f"{node.name} {list(t.shape)}", expected="a tensor of one element",
                             hint="write a literal number instead, or index it [col] / [row]")
        reduces = [s for s in self.k.stores if isinstance(s.expr, ir.Reduce)]
        for s in reduces:
            op_kind = "conv" if self.is_conv else self.k.op.kind
            if s.expr.fn not in self.t.reductions or op_kind not in self.t.reduction_ops:
                self.err("reduction", f"{s.expr.fn} is not supported on a {op_kind} epilogue", s.span,
                         found=f"{s.expr.fn} in a {op_kind} kernel",
                         expected=f"reductions {', '.join(self.t.reductions)} on {', '.join(self.t.reduction_ops)} kernels",
                         hint="store the full output and reduce it in a torch step (e.g. torch s = sum(y, dim=1))")
            elif self.cfg.decomposition != "data_parallel":
                self.err("reduction", f"{s.expr.fn} with decomposition = {self.cfg.decomposition}", s.span,
                         found=f"decomposition = {self.cfg.decomposition}", expected="decomposition = data_parallel",
                         hint="partial K sums cannot feed a reduction: use decomposition = data_parallel")
        if reduces and len(reduces) == len(self.k.stores):
            self.err("reduction", "every store is a reduction", self.k.span, found="no full output",
                     expected="at least one full store beside the reductions",
                     hint="add a full store, e.g. store y: f32 = acc")

    # ---- element and math types
    def check_dtypes(self) -> str:
        a, b = self.k.operands
        ta, tb = self.types[a.name], self.types[b.name]
        math = self.cfg.math or ta.dtype
        math_span = self.cfg.span_of("math") if self.cfg.math else self.k.span
        if ta.dtype != tb.dtype:
            self.err("dtype", f"operands of different element types ({ta.dtype} and {tb.dtype})", b.span or self.k.span,
                     found=f"{a.name}: {ta.dtype}, {b.name}: {tb.dtype}", expected="both operands of one element type",
                     hint=f"declare both {ta.dtype}, or convert one in a torch step before the kernel")
            return math
        depthwise = (self.is_conv and not isinstance(self.k.op, ir.ConvTransposeOp) and self.k.op.groups > 1
                     and self.k.op.groups == ta.shape[1])
        if math == "f32" and depthwise:
            pass  # the depthwise kernel is CUTLASS's direct SIMT conv: exact fp32 multiply-add, no tensor cores needed
        elif math == "f32":
            where = "math = f32" if self.cfg.math else "f32 operands with no math knob (exact f32)"
            self.diags.append(_diag(
                "dtype", f"kernel '{self.k.name}': {where} has no tensor-core path on {self.t.name}"
                + ("; the CUTLASS backend cannot build it" if self.strict_math else "; it would run on SIMT cores, slowly"),
                math_span, found=where, expected=f"math = one of {', '.join(self.t.tensor_core_math)}",
                hint="set math = tf32 (f32 storage, tensor-core math, about 3e-4 relative error)",
                severity="error" if self.strict_math else "warning"))
        elif math in self.t.math_storage and self.t.math_storage[math] != ta.dtype:
            self.err("dtype", f"math = {math} over {ta.dtype} operands", math_span,
                     found=f"math = {math}, operands {ta.dtype}", expected=f"math = {math} reads {self.t.math_storage[math]}",
                     hint=f"use math = {'tf32' if ta.dtype == 'f32' else ta.dtype}, or convert the operands first")
        if self.cfg.accum == "f16" and ta.dtype != "f16":
            self.err("dtype", "accum = f16 needs f16 operands", self.cfg.span_of("accum"), found=f"operands {ta.dtype}",
                     expected="accum = f32", hint="use accum = f32")
        return math

    # ---- layout and TMA alignment
    def check_layout_and_alignment(self) -> None:
        a, b = self.k.operands
        nchw: set[str] = set()  # conv tensors already reported as NCHW: their alignment follows from the fix
        for o in (a, b):
            t = self.types[o.name]
            if self.is_conv and not t.reads_channels_last:
                nchw.add(o.name)
                what = "input" if o is a else "filter"
                self.err("layout", f"conv {what} '{o.name}' is contiguous (NCHW); the kernel reads channels-last", o.span,
                         found=f"{o.name}: contiguous", expected="channels_last (NHWC / KRSC)",
                         hint=(f"declare it: param {o.name}: ... channels_last = \"...\"" if self.p.decl(o.name)
                               and self.p.decl(o.name).kind == "param"
                               else f"add torch {o.name}_cl = channels_last({o.name}) and convolve {o.name}_cl"))
            elif not self.is_conv and t.layout == "channels_last" and len(t.shape) >= 3:
                self.err("layout", f"gemm operand '{o.name}' is declared channels_last", o.span,
                         found="channels_last", expected="contiguous (row-major; read transposed with ^T)",
                         hint="channels_last applies to conv tensors; drop it here")
        # TMA's rule binds the TMA kernels (GEMM, groups = 1 conv). A grouped or depthwise conv runs a CUTLASS 2.x
        # kernel (cutlass.grouped_conv) whose vector widths follow the extents; that emitter states its own limits.
        tma_operands = not (self.is_conv and self.k.op.groups > 1)
        tensors: list[tuple[str, shapes.TensorType, ir.Span | None]] = [
            (o.name, self.types[o.name], o.span) for o in (a, b) if tma_operands and o.name not in nchw]
        # a conv's output takes its input's layout: an NCHW input's output is checked once the input is channels-last
        outputs_follow_fix = a.name in nchw
        for s in self.k.stores if tma_operands and not outputs_follow_fix else ():
            if not isinstance(s.expr, ir.Reduce):
                tensors.append((s.name, shapes.TensorType(dtype=s.dtype, shape=self.out_shape, layout=self.out_layout),
                                s.span))
        lets = {let.name for let in self.k.lets}
        for owner in [*self.k.lets, *self.k.stores] if tma_operands and not outputs_follow_fix else ():
            for node in expr_nodes(owner.expr):
                if isinstance(node, ir.Ref) and node.index == "full" and node.name not in lets and node.name in self.types:
                    tensors.append((node.name, self.types[node.name], node.span or owner.span))
        unit = self.t.tma_alignment_bytes
        for name, t, span in tensors:
            if not t.shape:
                continue
            extent = _contiguous_extent(t, self.is_conv)
            nbytes = ir.ELEMENT_BYTES[t.dtype]
            if (extent * nbytes) % unit:
                per = unit // nbytes
                self.err("alignment", f"'{name}' has a contiguous extent of {extent} {t.dtype} = {extent * nbytes} bytes, "
                         f"not a multiple of TMA's {unit} bytes", span,
                         found=f"{extent} elements", expected=f"a multiple of {per} elements ({unit} bytes)",
                         hint=f"pad that dim to a multiple of {per} with a torch step (pad), or leave this op to a torch step")
        if self.cfg.alignment is not None and tma_operands:
            span = self.cfg.span_of("alignment")
            nbytes = ir.ELEMENT_BYTES[self.types[a.name].dtype]
            if (self.cfg.alignment * nbytes) % unit:
                self.err("alignment", f"alignment = {self.cfg.alignment} elements is {self.cfg.alignment * nbytes} bytes; "
                         f"TMA needs {unit}-byte units", span, found=f"alignment = {self.cfg.alignment}",
                         expected=f"a multiple of {unit // nbytes} elements", hint=f"use alignment = {unit // nbytes} or auto")
            for name, t, _ in tensors[:2] if tma_operands else []:
                extent = _contiguous_extent(t, self.is_conv)
                if extent % self.cfg.alignment:
                    self.err("alignment", f"alignment = {self.cfg.alignment} does not divide the contiguous extent "
                             f"{extent} of '{name}'", span, found=f"alignment = {self.cfg.alignment}",
                             expected=f"a divisor of {extent}", hint="use alignment = auto")

    def check_operand_majorness(self, math: str) -> None:
        """tf32 wgmma reads K-major shared memory only; CUTLASS's register-sourced mainloop takes the other
        layouts (A stored [K, M], B stored [K, N]) but sizes its own stages, and transposes B in 128-byte
        K slices when both are M/N-major."""
        if self.is_conv or math not in self.t.kmajor_only_math:
            return
        a, b = self.k.operands
        not_k_major = [f"{a.name}^T"] * a.transpose + [b.name] * (not b.transpose)
        if not not_k_major:
            return
        which = " and ".join(not_k_major)
        if self.cfg.stages != "auto":
            self.err("config", f"stages = {self.cfg.stages} with a {math} operand that is not K-major ({which})",
                     self.cfg.span_of("stages") or self.k.span, found=f"stages = {self.cfg.stages}", expected="stages = auto",
                     hint="the register-sourced mainloop that reads M/N-major tf32 operands sizes its stages itself: "
                          "use stages = auto, or store the operands K-major")
        if len(not_k_major) == 2 and self.cfg.tile is not None and self.cfg.tile[2] * 4 != 128:
            self.err("config", f"tile K = {self.cfg.tile[2]} with both {math} operands M/N-major",
                     self.cfg.span_of("tile") or self.k.span, found=f"tile = {'x'.join(map(str, self.cfg.tile))}",
                     expected="tile K = 32", hint="B is transposed in shared memory 32 elements of K at a time: use tile K = 32")

    # ---- tile, cluster, stages, schedule, decomposition
    def check_config(self, math: str) -> None:
        cfg, t = self.cfg, self.t
        if cfg.tile is not None:
            tm, tn, tk = cfg.tile
            span = cfg.span_of("tile")
            mma_k = t.mma_k.get(math)
            problems = []
            if tm % t.m_multiple or tm > t.max_tile_m:
                problems.append((f"tile M = {tm}", f"M a multiple of {t.m_multiple} up to {t.max_tile_m}",
                                 f"use tile M = {min(t.max_tile_m, max(t.m_multiple, tm // t.m_multiple * t.m_multiple))}"))
            if tn % t.n_multiple or not t.n_min <= tn <= t.n_max:
                fixed = min(t.n_max, max(t.n_min, tn // t.n_multiple * t.n_multiple))
                problems.append((f"tile N = {tn}", f"N a multiple of {t.n_multiple} in {t.n_min}..{t.n_max}",
                                 f"use tile N = {fixed}"))
            if mma_k and tk % mma_k:
                problems.append((f"tile K = {tk}", f"K a multiple of {mma_k} (the {math} MMA K)",
                                 f"use tile K = {max(mma_k, tk // mma_k * mma_k)}"))
            for found, expected, hint in problems:
                self.err("tile", f"{found} breaks the wgmma tile rules", span, found=found, expected=expected, hint=hint)
            coop = cfg.schedule == "cooperative"
            if coop and tm % t.cooperative_m_multiple:
                self.err("tile", f"schedule = cooperative with tile M = {tm}", span, found=f"tile = {_dims_text(cfg.tile)}",
                         expected=f"tile M a multiple of {t.cooperative_m_multiple} for cooperative",
                         hint="cooperative splits M over two warpgroups: use tile M = 128 or 256, or schedule = pingpong")
            self.check_smem(cfg.tile)
            self.check_conv_tile_k(tk, mma_k, span)
        cl = cfg.cluster
        span = cfg.span_of("cluster")
        size = cl[0] * cl[1] * cl[2]
        if any(c not in t.cluster_extents for c in cl[:2]) or cl[2] > t.max_cluster_third:
            self.err("cluster", f"cluster = {_dims_text(cl)} is not a legal cluster shape", span, found=_dims_text(cl),
                     expected=f"M and N each one of {', '.join(map(str, t.cluster_extents))}, third dim {t.max_cluster_third}",
                     hint="use cluster = 2x1x1 or 1x2x1")
        elif size > t.max_cluster_size:
            self.err("cluster", f"cluster = {_dims_text(cl)} has {size} blocks", span, found=f"{size} blocks",
                     expected=f"at most {t.max_cluster_size} (the portable cluster size)",
                     hint=f"shrink it, e.g. cluster = {min(cl[0], t.max_cluster_size)}x1x1")
        if cfg.swizzle not in t.swizzle:
            self.err("config", f"swizzle = {cfg.swizzle}", cfg.span_of("swizzle"), found=cfg.swizzle,
                     expected=f"one of {', '.join(map(str, t.swizzle))}", hint="use swizzle = 1, 2, 4 or 8")
        if cfg.split_k > 1 and cfg.decomposition == "data_parallel":
            self.err("config", f"split_k = {cfg.split_k} with decomposition = data_parallel", cfg.span_of("split_k"),
                     found=f"split_k = {cfg.split_k}", expected="decomposition = split_k (or stream_k)",
                     hint="add decomposition = split_k, or remove split_k")
        if cfg.decomposition == "split_k" and cfg.split_k < 2:
            self.err("config", "decomposition = split_k with split_k = 1", cfg.span_of("decomposition"),
                     found="split_k = 1", expected="split_k >= 2", hint="set split_k = 2 (or more)")
        if cfg.decomposition != "data_parallel" and cfg.schedule == "pingpong":
            self.err("config", f"decomposition = {cfg.decomposition} with schedule = pingpong", cfg.span_of("schedule"),
                     found="schedule = pingpong", expected="schedule = cooperative or auto",
                     hint="split-K and stream-K run on the cooperative schedule")
        if isinstance(cfg.stages, int) and cfg.stages < t.min_stages:
            self.err("smem", f"stages = {cfg.stages}", cfg.span_of("stages"), found=f"stages = {cfg.stages}",
                     expected=f"at least {t.min_stages}", hint=f"use stages = {t.min_stages} or auto")

    def check_conv_tile_k(self, tk: int, mma_k: int | None, span: ir.Span | None) -> None:
        """A TMA conv's K tile runs over the channels of one filter tap; channels past C are zero fill."""
        if not self.is_conv or self.k.op.groups != 1:
            return
        channels = self.types[self.k.operands[0].name].shape[1]
        if tk > channels and tk > (mma_k or 0):
            fit = max(mma_k or 8, -(-channels // (mma_k or 8)) * (mma_k or 8))
            self.diags.append(_diag(
                "tile", f"kernel '{self.k.name}': tile K = {tk} is larger than the {channels} input channels", span,
                found=f"tile K = {tk}, C = {channels}", expected=f"tile K <= C, or the smallest legal K ({fit})",
                hint=f"each K step reads {tk} channels of one filter tap, {tk - channels} of them zero fill: "
                     f"use tile K = {fit}", severity="warning"))

    def check_smem(self, tile: tuple[int, int, int]) -> None:
        a, _ = self.k.operands
        nbytes = ir.ELEMENT_BYTES[self.types[a.name].dtype]
        tm, tn, tk = tile
        stage_bytes = (tm + tn) * tk * nbytes
        stages = self.cfg.stages if isinstance(self.cfg.stages, int) else self.t.min_stages
        total = stages * stage_bytes
        if total > self.t.max_smem_bytes:
            fit = self.t.max_smem_bytes // stage_bytes
            what = f"stages = {stages}" if isinstance(self.cfg.stages, int) else f"the minimum {stages} stages"
            self.err("smem", f"{what} x {stage_bytes} bytes per stage = {total} bytes of shared memory",
                     self.cfg.span_of("stages") if isinstance(self.cfg.stages, int) else self.cfg.span_of("tile"),
                     found=f"{total} bytes", expected=f"at most {self.t.max_smem_bytes} bytes per block on {self.t.name}",
                     hint=(f"use stages = {fit} or auto" if fit >= self.t.min_stages
                           else f"use a smaller tile (K = {max(8, tk // 2)}) or smaller M / N"))


def _contiguous_extent(t: shapes.TensorType, conv: bool = False) -> int:
    if t.layout == "channels_last" and len(t.shape) >= 3 or conv and t.reads_channels_last:
        return t.shape[1]
    return t.shape[-1]


# ---------------------------------------------------------------------------------------------
# Program


def check(program: ir.Program, target: str = "sm90a", backend: str | None = "cutlass",
          max_output_bytes: float | None = None) -> list[Diagnostic]:
    """All static checks of ``program`` for ``target``. With ``backend="cutlass"`` (the default) what the
    CUTLASS backend cannot build is an error; with ``backend=None`` or ``"interpreter"`` only the language and
    target rules apply (f32 math is then a warning). Every tensor must fit the target's memory, and with
    ``max_output_bytes`` (the problem's outputs) no program output may be larger. Never raises."""
    try:
        diags = _check(program, target, backend, max_output_bytes)
        return sorted(diags, key=lambda d: (d.span.line, d.span.column) if d.span else (10**9, 0))
    except Exception as exc:  # noqa: BLE001 - checks report, they do not crash
        return [_diag("internal", f"the checker failed on this program ({type(exc).__name__}: {exc})", None,
                      hint="simplify the program around the last change; this is a checker fault")]


_DTYPE_BYTES = {"f32": 4, "tf32": 4, "f16": 2, "bf16": 2, "i32": 4, "i64": 8, "i8": 1, "u8": 1, "bool": 1}


def _tensor_bytes(t: shapes.TensorType) -> int:
    return math.prod(t.shape) * _DTYPE_BYTES.get(str(t.dtype), 4)


def _gib(n: float) -> str:
    """A byte count in the unit that reads best (B, KiB, MiB or GiB)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            try:
                return f"{n / scale:.3g} {unit}"
            except OverflowError:  # a count past any float (dimensions of hundreds of digits)
                return f"{_three_digits(int(n) // scale)} {unit}"
    return f"{n:.0f} B"


def _three_digits(n: int) -> str:
    """An integer of 1000 or more, of any size, in ``.3g``'s scientific form (three digits, rounded half up)."""
    exponent = int(math.log10(n))
    while 10**exponent > n:  # log10 of a huge integer can land one off
        exponent -= 1
    while 10 ** (exponent + 1) <= n:
        exponent += 1
    lead = (n + 5 * 10 ** (exponent - 3)) // 10 ** (exponent - 2)
    if lead == 1000:  # 9.995e+k rounds up to 1e+(k+1)
        lead, exponent = 100, exponent + 1
    mantissa = f"{lead // 100}.{lead % 100:02d}".rstrip("0").rstrip(".")
    return f"{mantissa}e+{exponent:02d}"


def _size_bounds(names: list[str], types: dict[str, shapes.TensorType], span: ir.Span | None, tgt: Target,
                 program: ir.Program, max_output_bytes: float | None) -> list[Diagnostic]:
    """Every tensor fits the target's memory; a program output is no larger than the problem's outputs."""
    diags = []
    for name in names:
        t = types.get(name)
        if t is None:
            continue
        nbytes = _tensor_bytes(t)
        where = span or (program.decl(name).span if program.decl(name) else None)
        if any(d < 0 for d in t.shape):
            diags.append(_diag("size", f"'{name}' has a negative dimension ({_dims_text(t.shape)})", where,
                               found=_dims_text(t.shape), hint="dimensions are positive element counts"))
        elif nbytes > tgt.max_memory_bytes:
            diags.append(_diag("size", f"'{name}' ({_dims_text(t.shape)} {t.dtype}) needs {_gib(nbytes)}, more than "
                               f"the {_gib(tgt.max_memory_bytes)} of device memory on {tgt.name}", where,
                               found=_gib(nbytes), expected=f"at most {_gib(tgt.max_memory_bytes)}",
                               hint="check the sizes: no tensor of a program may exceed the GPU's memory"))
        elif max_output_bytes and name in program.outputs and nbytes > max_output_bytes:
            diags.append(_diag("size", f"output '{name}' ({_dims_text(t.shape)} {t.dtype}) needs {_gib(nbytes)}, more "
                               f"than all of the problem's outputs together ({_gib(max_output_bytes)})",
                               where or program.outputs_span, found=_gib(nbytes),
                               expected=f"at most {_gib(max_output_bytes)}",
                               hint="the program's outputs must have the shapes of the problem's outputs"))
    return diags


def _check(program: ir.Program, target: str, backend: str | None,
           max_output_bytes: float | None = None) -> list[Diagnostic]:
    try:
        tgt = load_target(target)
    except ValueError as exc:
        return [_diag("target", str(exc), None, found=target, expected=", ".join(available_targets()),
                      hint="pass one of the available targets")]
    diags = _check_names(program)
    if has_errors(diags):
        return diags
    types = shapes.declared_types(program)
    diags += _size_bounds(list(types), types, None, tgt, program, max_output_bytes)
    if has_errors(diags):
        return diags  # shape inference on such sizes would only overflow
    strict = backend == "cutlass"
    totals = shapes.slice_totals(program)
    diags += _slice_gaps(program, totals)
    if has_errors(diags):
        return diags
    written: dict[str, list[tuple[int, int, ir.Span | None]]] = {}  # slices stored so far, by tensor
    for step in program.steps:
        if isinstance(step, ir.RowKernel):
            kd, out = check_row_kernel(step, types)
            diags += kd
            if out is None or any(d.code in _BLOCKING and d.severity == "error" for d in kd):
                return diags
            types.update(row_ops.store_types(step, types))
            produced = [s.name for s in step.stores]
        elif isinstance(step, ir.Kernel):
            diags += _index_stores(step)
            checker = _KernelChecker(program, step, types, tgt, strict)
            kd = checker.run()
            diags += kd
            if checker.out_shape is None or any(d.code in _BLOCKING and d.severity == "error" for d in kd):
                return diags  # later steps would only repeat this cause
            for s in step.stores:
                t = shapes.store_type(step, s, checker.out_shape, checker.dims, checker.out_layout)
                if s.channels is not None:
                    sd = _check_slice_store(step, s, t, types.get(s.name), totals[s.name], written, tgt)
                    diags += sd
                    if has_errors(sd):
                        return diags
                    t = types.get(s.name) or shapes.sliced_type(t, totals[s.name], isinstance(step.op, ir.ConvOp))
                types[s.name] = t
            produced = [s.name for s in step.stores]
        else:
            try:
                before = types.get(step.outputs[0]) if step.channels is not None else None
                produced_types = shapes.torch_step_types(step, types, totals)
                if step.channels is not None:
                    sd = _check_torch_slice(step, before, totals, written, types)
                    diags += sd
                    if has_errors(sd):
                        return diags
                types.update(produced_types)
            except shapes.ShapeError as exc:
                diags.append(_diag(exc.code, exc.message, exc.span or step.span, exc.found, exc.expected, exc.hint))
                return diags
            except (RuntimeError, OverflowError, MemoryError) as exc:  # torch on sizes it cannot represent
                diags.append(_diag("size", f"torch {step.fn}: its result cannot be sized "
                                   f"({' '.join(str(exc).split())[:160]})", step.span,
                                   hint="check the sizes this step's arguments produce"))
                return diags
            produced = list(step.outputs)
        sized = _size_bounds(produced, types, step.span, tgt, program, max_output_bytes)
        if sized:
            return diags + sized  # later steps would compute on it
    if strict and not has_errors(diags):
        diags += _backend_limits(program)
    return diags


def _index_stores(kernel: ir.Kernel) -> list[Diagnostic]:
    """i64 is the index type of argmax / argmin row kernels; a GEMM or conv epilogue stores floating point."""
    return [_diag("dtype", f"kernel '{kernel.name}': an i64 store from a {kernel.op.kind} epilogue", s.span, found="i64",
                  expected="f32, bf16 or f16", hint="only argmax and argmin row kernels store i64 indices")
            for s in kernel.stores if s.dtype == "i64"]


def _slice_gaps(program: ir.Program, totals: dict[str, int]) -> list[Diagnostic]:
    """Every channel of a tensor filled by slice stores is stored by some kernel."""
    diags = []
    writes = shapes.slice_writes(program)
    for name, total in totals.items():
        parts = sorted(((ch[0], ch[1], span) for n, ch, span in writes if n == name), key=lambda p: p[:2])
        covered = 0
        for start, end, span in parts:
            if start > covered:
                diags.append(_diag("shape-mismatch", f"no kernel stores channels {covered}..{start} of '{name}'", span,
                                   found=f"slices {', '.join(f'[{a}:{b}]' for a, b, _ in parts)}",
                                   expected=f"slices covering 0..{total}",
                                   hint="write the missing channels (a kernel's store or a torch step), or renumber the slices"))
            covered = max(covered, end)
    return diags


def _check_torch_slice(step: ir.TorchStep, filled: shapes.TensorType | None, totals: dict[str, int],
                       written: dict[str, list[tuple[int, int, ir.Span | None]]],
                       types: dict[str, shapes.TensorType]) -> list[Diagnostic]:
    """``torch y[a:b] = ...``: the writers of y agree on rows and element type, and slices do not overlap."""
    from dsl_compiler import torch_steps

    name, (start, end) = step.outputs[0], step.channels
    where = f"torch {name}[{start}:{end}]"
    (t,) = torch_steps.infer(step, types)
    width = end - start
    if filled is not None:
        if filled.dtype != t.dtype:
            return [_diag("dtype", f"{where} is {t.dtype}; '{name}' is {filled.dtype}", step.span, found=t.dtype,
                          expected=filled.dtype, hint="every slice of a tensor has its element type")]
        rows, filled_rows = math.prod(t.shape) // width, math.prod(filled.shape) // totals[name]
        if rows != filled_rows:
            return [_diag("shape-mismatch", f"{where} writes {rows} rows; '{name}' has {filled_rows}", step.span,
                          found=f"{rows} rows", expected=f"{filled_rows} rows",
                          hint="slices of one tensor have the same rows (pixels)")]
    for a, b, span in written.get(name, []):
        if a < end and start < b:
            return [_diag("shape-mismatch", f"{where} overlaps [{a}:{b}], written at {span}", step.span,
                          found=f"[{start}:{end}] and [{a}:{b}]", expected="disjoint channel ranges",
                          hint="give each writer its own channels")]
    written.setdefault(name, []).append((start, end, step.span))
    return []


def _check_slice_store(kernel: ir.Kernel, store: ir.Store, t: shapes.TensorType, filled: shapes.TensorType | None,
                       total: int, written: dict[str, list[tuple[int, int, ir.Span | None]]], tgt: Target) -> list[Diagnostic]:
    """``store y[a:b]``: b - a is the kernel's output channel count, the writers of y agree on rows and element type,
    slices do not overlap, and each starts and ends on TMA's 16-byte boundary."""
    start, end = store.channels
    where = f"kernel '{kernel.name}': store {store.name}[{start}:{end}]"
    conv = isinstance(kernel.op, ir.ConvOp)
    if isinstance(store.expr, ir.Reduce):
        return [_diag("reduction", f"{where} is a reduction", store.span, found=store.expr.fn,
                      expected="a full store", hint="slice stores write full outputs; store the reduction by name")]
    n = t.shape[1] if conv else t.shape[-1]
    if end - start != n:
        return [_diag("shape-mismatch", f"{where} names {end - start} channels; the kernel computes {n}", store.span,
                      found=f"[{start}:{end}]", expected=f"[{start}:{start + n}]",
                      hint="a slice store writes all of the kernel's output channels")]
    rows = shapes.output_rows(kernel, t.shape)
    if filled is not None:
        if filled.dtype != store.dtype:
            return [_diag("dtype", f"{where} is {store.dtype}; '{store.name}' is {filled.dtype}", store.span,
                          found=store.dtype, expected=filled.dtype, hint="every slice store of a tensor has its type")]
        filled_rows = math.prod(filled.shape) // total
        if filled_rows != rows:
            return [_diag("shape-mismatch", f"{where} writes {rows} rows; '{store.name}' has {filled_rows}", store.span,
                          found=f"{rows} rows ({_dims_text(t.shape)})", expected=f"{filled_rows} rows",
                          hint="kernels fill one tensor only when their outputs have the same rows (pixels)")]
    for a, b, span in written.get(store.name, []):
        if a < end and start < b:
            return [_diag("shape-mismatch", f"{where} overlaps [{a}:{b}], stored at {span}", store.span,
                          found=f"[{start}:{end}] and [{a}:{b}]", expected="disjoint channel ranges",
                          hint="give each kernel its own channels")]
    written.setdefault(store.name, []).append((start, end, store.span))
    unit, nbytes = tgt.tma_alignment_bytes, ir.ELEMENT_BYTES[store.dtype]
    if conv and kernel.op.groups > 1:
        return []  # the grouped conv kernels are no TMA kernels (and have no slice store: the backend says so)
    for what, value in (("starts at channel", start), ("fills a tensor of", total)):
        if value * nbytes % unit:
            return [_diag("alignment", f"{where} {what} {value}: {value * nbytes} bytes, not a multiple of TMA's "
                          f"{unit} bytes", store.span, found=f"{value} {store.dtype}",
                          expected=f"a multiple of {unit // nbytes} channels",
                          hint="concatenate in a torch step (cat), or pad the channels")]
    return []


def _backend_limits(program: ir.Program) -> list[Diagnostic]:
    """What the CUTLASS emitter itself refuses to build (knob combinations its kernels do not take)."""
    try:
        from dsl_compiler.cutlass.emit import emit_program
    except ImportError:
        return []
    try:
        _, diags = emit_program(program)
    except Exception as exc:  # noqa: BLE001
        return [_diag("unsupported", f"the CUTLASS emitter cannot handle this program ({type(exc).__name__}: {exc})",
                      None, hint="try the interpreter backend, or simplify the kernel")]
    return list(diags)


def check_text(text: str, target: str = "sm90a", backend: str | None = "cutlass",
               max_output_bytes: float | None = None) -> tuple[ir.Program | None, list[Diagnostic]]:
    """Parse, then (when it parses) check."""
    program, diagnostics = parse(text)
    if program is None or has_errors(diagnostics):
        return program, diagnostics
    return program, diagnostics + check(program, target, backend, max_output_bytes)
