"""The precision pass: the math each kernel runs, and 16-bit stores where a cast would follow.

A kernel over fp32 data runs the trace options' 16-bit math where the problem allows it (its operands converted:
params once, when bound, other tensors by a ``to`` step), except a depthwise conv: it is a memory-bound SIMT kernel
whose input conversion costs more traffic than 16-bit reads save. Otherwise the storage type's own math (tf32 over
f32) where the problem allows it; a depthwise conv says f32 (CUTLASS's direct kernel multiplies in fp32).
"""

from __future__ import annotations

from dataclasses import dataclass

from dsl_compiler.frontend.graph import KernelGroup, LoweringSettings, OpGraph
from dsl_compiler.frontend.normalize import Op
from dsl_compiler.ir import Kernel, Reduce, TensorArg, TorchStep
from dsl_compiler.precision import default_math


@dataclass(frozen=True)
class KernelMath:
    """The precision of one kernel: the 16-bit math its fp32 operands are converted to (None: none), the math it
    runs, and whether a tf32 kernel reads transposing copies of its operands (the target reads them K-major)."""

    half: str | None
    math: str | None
    kmajor: bool


def half_math(graph: OpGraph, settings: LoweringSettings, anchor_op: Op) -> str | None:
    """The 16-bit math of one kernel: the settings', except for a depthwise conv."""
    if anchor_op.kind == "conv" and graph.is_depthwise(anchor_op):
        return None
    return settings.half_math


def storage_math(dtype: str, half: str | None, allowed_precisions) -> str | None:
    """The math of a kernel over ``dtype`` data: its 16-bit math over fp32, else the storage type's own (tf32 over
    f32) when the problem allows it."""
    if half is not None and dtype == "f32":
        return half
    return default_math(dtype, allowed_precisions)


def storage_precisions(settings: LoweringSettings) -> tuple[str, ...]:
    """The precisions the storage types' own math is chosen from: the problem's, without tf32 where the options
    ask for the split-precision math over fp32 (``precision.default_math`` then gives tf32x3)."""
    if settings.options.math == "tf32x3":
        return tuple(p for p in settings.allowed_precisions if p != "tf32")
    return tuple(settings.allowed_precisions)


def kernel_math(graph: OpGraph, settings: LoweringSettings, anchor_op: Op, dtype: str) -> str | None:
    """The math knob of a kernel anchored at ``anchor_op`` writing ``dtype``."""
    math_mode = storage_math(dtype, half_math(graph, settings, anchor_op), storage_precisions(settings))
    if anchor_op.kind == "conv" and math_mode in ("tf32", "tf32x3") and graph.is_depthwise(anchor_op):
        return "f32"  # CUTLASS's depthwise kernel multiplies in fp32 on SIMT cores: say so
    return math_mode


def plan_math(graph: OpGraph, settings: LoweringSettings, group: KernelGroup) -> KernelMath:
    """A named group's precision (the options' ``kmajor`` names kernels)."""
    anchor_op = graph.ops[group.anchor]
    half = half_math(graph, settings, anchor_op)
    dtype = graph.dtype_of(group.anchor) or "f32"
    kmajor = (anchor_op.kind == "gemm" and group.kernel_name in settings.options.kmajor
              and storage_math(graph.dtype_of(anchor_op.operands[0]) or "", half, storage_precisions(settings)) == "tf32")
    return KernelMath(half, kernel_math(graph, settings, anchor_op, dtype), kmajor)


def _tensor_reads(step) -> list[str]:
    """Names of the tensors a step reads (operands, epilogue tensors, step arguments)."""
    if isinstance(step, TorchStep):
        return [a.name for a in step.args if isinstance(a, TensorArg)]
    from dsl_compiler.walk import epilogue_refs

    return [o.name for o in step.operands] + [r.name for r in epilogue_refs(step)]


def fold_store_casts(steps: list, outputs: list[str]) -> list:
    """A kernel store read only by a ``to`` step is stored in the step's element type directly:
    the epilogue's rounding is the cast's, and one copy of the tensor is saved (an MLP's hidden
    layer written in f16 for the next f16 kernel)."""
    reads: dict[str, int] = {}
    for step in steps:
        for name in _tensor_reads(step):
            reads[name] = reads.get(name, 0) + 1
    stored = {st.name: k for k in steps if isinstance(k, Kernel) for st in k.stores if not isinstance(st.expr, Reduce)}
    folded: dict[str, tuple[str, str]] = {}  # store name -> (cast output, element type)
    for step in steps:
        if not (isinstance(step, TorchStep) and step.fn == "to" and len(step.args) == 1
                and isinstance(step.args[0], TensorArg) and len(step.outputs) == 1):
            continue
        src = step.args[0].name
        dtype = next((k.value for k in step.kwargs if k.key == "dtype"), None)
        if src in stored and dtype in ("f16", "bf16") and reads.get(src) == 1 and src not in outputs:
            folded[src] = (step.outputs[0], dtype)
    if not folded:
        return steps
    out = []
    for step in steps:
        if isinstance(step, TorchStep) and step.fn == "to" and any(
                isinstance(a, TensorArg) and a.name in folded and step.outputs[0] == folded[a.name][0] for a in step.args):
            continue
        if isinstance(step, Kernel) and any(st.name in folded for st in step.stores):
            stores = tuple(st.model_copy(update={"name": folded[st.name][0], "dtype": folded[st.name][1]})
                           if st.name in folded else st for st in step.stores)
            step = step.model_copy(update={"stores": stores})
        out.append(step)
    return out
