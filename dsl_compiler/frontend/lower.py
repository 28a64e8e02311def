"""Lowering normalised ops into a μCUTLASS program: GEMM and conv anchors become kernels, the
elementwise chains after them their epilogues, reductions row reductions, the rest PyTorch steps.

``lower`` runs the passes of ``frontend.passes`` in order over one ``OpGraph``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsl_compiler.diagnostics import Diagnostic
from dsl_compiler.frontend.concat import cat_as_slice_stores, cat_prefix_families
from dsl_compiler.frontend.graph import LoweringSettings, OpGraph
from dsl_compiler.frontend.normalize import TRANSPOSES
from dsl_compiler.frontend.passes.emission import ProgramBuilder
from dsl_compiler.frontend.passes.grouping import group_kernels
from dsl_compiler.frontend.passes.kernels import emit_group
from dsl_compiler.frontend.passes.naming import safe_base
from dsl_compiler.frontend.passes.padding import KernelPadding, plan_padding
from dsl_compiler.frontend.passes.precision import KernelMath, fold_store_casts, plan_math
from dsl_compiler.frontend.passes.row_kernels import row_kernels
from dsl_compiler.frontend.reference import LoadedReference, Traced
from dsl_compiler.frontend.results import TraceOptions, TraceResult
from dsl_compiler.ir import Program


@dataclass(frozen=True)
class KernelPlan:
    """What the precision and padding passes decided for one kernel."""

    math: KernelMath
    padding: KernelPadding


def lower(traced: Traced, options: TraceOptions, ref: LoadedReference, why: dict[str, str] | None = None) -> TraceResult:
    """The program of a traced reference, with coverage; never raises (a lowering fault is a ``trace`` diagnostic)."""
    graph = OpGraph(traced)
    try:
        return _lower(graph, options, ref, why or {})
    except Exception as exc:  # keep the promise: a value, never a traceback
        return TraceResult(
            program=None,
            coverage=[graph.coverage[n] for n in graph.nodes if n in graph.coverage],
            diagnostics=[Diagnostic(code="trace", message=f"lowering failed: {type(exc).__name__}: {exc}", hint="write the program by hand")],
        )


def _lower(graph: OpGraph, options: TraceOptions, ref: LoadedReference, why: dict[str, str]) -> TraceResult:
    # 16-bit math over fp32 data, only where the problem allows it
    settings = LoweringSettings(options, ref.allowed_precisions,
                                options.math if options.math in ref.allowed_precisions else None, why)
    graph.normalise()
    group_kernels(graph, settings)
    b = ProgramBuilder(graph, settings, emit_kernel=emit_group)
    for n in graph.nodes:
        if graph.ops[n].kind == "input":
            b.declare_input(n)
    for g in graph.groups:
        g.kernel_name = b.namer(g.kernel_name)
    plan_kernels(graph, settings)
    out_node = next(n for n in graph.nodes if n.op == "output")
    b.live = _live(out_node)
    _emit_deep_stack(b)
    outputs = _outputs(b, out_node)
    _cover_the_rest(b)
    program = _assemble(b, outputs, ref.name)
    return TraceResult(program=program, coverage=[graph.coverage[n] for n in graph.nodes if n in graph.coverage],
                       diagnostics=b.diagnostics)


def plan_kernels(graph: OpGraph, settings: LoweringSettings) -> None:
    """Each named group's precision and padding."""
    for g in graph.groups:
        kernel_math = plan_math(graph, settings, g)
        g.plan = KernelPlan(kernel_math, plan_padding(graph, settings, g, kernel_math.kmajor))


def _live(out_node) -> set[Any]:
    """The nodes the output needs: dead users do not force a kernel to store a value."""
    live: set[Any] = set()
    stack = [out_node]
    while stack:
        n = stack.pop()
        if n in live:
            continue
        live.add(n)
        stack.extend(n.all_input_nodes)
    return live


_DEEP_KERNELS = 48  # emission from the output back recurses through ~8 frames a kernel: past this, emit in order


def _emit_deep_stack(b: ProgramBuilder) -> None:
    """A model of many kernels (a 200-layer MLP or ResNet-like stack): its live kernels emitted first, in the traced
    (topological) order, so each kernel finds its operands emitted and the emission's recursion stays one layer
    deep. Shallower models keep the output-back order, which puts each step next to its reader."""
    live = [g for g in b.graph.groups if g.anchor in b.live]
    if len(live) <= _DEEP_KERNELS:
        return
    for g in live:
        if b.failed:
            return
        b.emit_kernel(b, g)


def _outputs(b: ProgramBuilder, out_node) -> list[str]:
    """The program's outputs, every step they need emitted on the way."""
    outputs = []
    ret = out_node.args[0]
    rets = list(ret) if isinstance(ret, (list, tuple)) else [ret]
    for r in rets:
        name = b.value(r)
        if name is None:
            if not b.failed:
                b.fail(f"the model returns {r!r}, which is not a tensor the program computes")
            continue
        outputs.append(name)
    return outputs


def _cover_the_rest(b: ProgramBuilder) -> None:
    """A coverage row for every node no pass placed: why it needs no step of its own."""
    graph = b.graph
    for n in graph.nodes:
        if n in graph.coverage or n.op == "output":
            continue
        op = graph.ops[n]
        if op.kind == "alias":
            graph.cover(n, "folded", where=b.tensor_name.get(graph.resolve(n), ""), reason="identity (no data movement needed)")
        elif op.kind == "const":
            graph.cover(n, "folded", reason="a size or constant, folded at trace time")
        elif op.name in TRANSPOSES:
            graph.cover(n, "folded", reason="transpose read as a kernel operand ^T")
        elif n not in b.live:
            graph.cover(n, "folded", reason="its result is unused")
        elif b.failed:
            graph.cover(n, "unsupported", reason="not lowered: an op it feeds has no program form")
        else:
            graph.cover(n, "folded", reason="folded into another op")


def _assemble(b: ProgramBuilder, outputs: list[str], name: str) -> Program | None:
    """The program of the emitted steps: 16-bit stores where a cast follows, channel concatenations as slice stores."""
    graph = b.graph
    if b.failed:
        return None
    if b.settings.half_math is not None:
        b.steps = fold_store_casts(b.steps, outputs)
    try:
        program = Program(name=safe_base(name), decls=tuple(b.decls), steps=tuple(b.steps), outputs=tuple(outputs))
    except Exception as exc:  # pydantic validation: a lowering bug shows as a diagnostic
        b.fail(f"could not assemble the program: {exc}")
        return None
    if b.settings.options.concat_slices:
        program, concatenated = cat_as_slice_stores(program)
        program, families = cat_prefix_families(program)
        concatenated.update(families)
        for n in graph.nodes:
            out = b.tensor_name.get(n)
            if out in concatenated and n in graph.coverage:
                graph.cover(n, "folded", where=out, reason=f"kernels {', '.join(concatenated[out])} store into "
                            f"their channels of {out} (slice stores): no copy")
    program, moved = row_kernels(program)
    for n in graph.nodes:
        out = b.tensor_name.get(n)
        if out in moved:
            graph.cover(n, "kernel", where=moved[out], reason="a row kernel (reduction, softmax, norm, scan or pool) or its tail")
    return program
