"""Precision rules of the language, in one place: the math a kernel runs (its ``math`` knob, else
the element type of its A operand; f32 stays exact f32) and the tensor-core math a problem's
allowed precisions permit. The checks, the emitters, the interpreter, the bounds and the graph
all ask these functions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from dsl_compiler import ir

if TYPE_CHECKING:
    from dsl_compiler.tensor_types import TensorType


@dataclass(frozen=True)
class MathMode:
    """One value of the ``math`` knob: what it reads, how precise its products are, and what it runs on."""

    name: str
    storage: str  # the operands' element type
    mantissa_bits: int  # explicit mantissa bits a product keeps (a split's: of big + small)
    instruction: str  # the MMA (or SIMT) type it issues: tf32x3 issues tf32 MMAs
    mma_passes: int = 1  # MMAs per product: a split product big*big + big*small + small*big is three
    # the precision a problem must allow for it: a split product is as accurate as fp32, so f32 admits it
    admitted_by: str | None = None

    @property
    def split(self) -> bool:
        """Each operand as a TF32 big part and a TF32 remainder (CUTLASS's OpMultiplyAddFastF32)."""
        return self.mma_passes > 1


# Every math mode, most precise first. tf32x3 keeps 21 bits: big (11 significant) + small (the next 11)
# with small*small left out; its error is fp32's to within a few ulps.
MATH_MODES: dict[str, MathMode] = {m.name: m for m in (
    MathMode("f32", "f32", 23, "f32"),
    MathMode("tf32x3", "f32", 21, "tf32", mma_passes=3, admitted_by="f32"),
    MathMode("tf32", "f32", 10, "tf32"),
    MathMode("f16", "f16", 10, "f16"),
    MathMode("bf16", "bf16", 7, "bf16"),
)}

# Precisions by mantissa bits: lower means less precise.
PRECISION_BITS = {name: mode.mantissa_bits for name, mode in MATH_MODES.items()}


def admitted(math: str, allowed_precisions: Sequence[str]) -> bool:
    """Whether a problem allowing ``allowed_precisions`` admits ``math`` (tf32x3 wherever f32 is)."""
    mode = MATH_MODES.get(math)
    return math in allowed_precisions or (mode is not None and mode.admitted_by in allowed_precisions)


def admitted_maths(allowed_precisions: Sequence[str]) -> tuple[str, ...]:
    """The math modes a problem admits, most precise first."""
    return tuple(m for m in MATH_MODES if admitted(m, allowed_precisions))


def kernel_math(kernel: ir.Kernel, a_dtype: str) -> str:
    """The math type a kernel runs over an A operand stored as ``a_dtype``: the knob, else that type."""
    return kernel.config.math or a_dtype


def effective_math(program: ir.Program, kernel: ir.Kernel, types: dict[str, TensorType] | None = None) -> str:
    """The math type a kernel of ``program`` runs (``types``: the program's inferred types, when known)."""
    if kernel.config.math is not None:
        return kernel.config.math
    if types is None:
        from dsl_compiler import shapes

        types = shapes.infer(program)
    t = types.get(kernel.operands[0].name)
    return kernel_math(kernel, t.dtype if t is not None else "f32")


def kernel_maths(program: ir.Program) -> list[str]:
    """The math type of every kernel of ``program``, in program order."""
    if all(k.config.math is not None for k in program.kernels):
        return [k.config.math for k in program.kernels]
    from dsl_compiler import shapes

    types = shapes.infer(program)
    return [effective_math(program, k, types) for k in program.kernels]


def default_math(dtype: str, allowed_precisions: tuple[str, ...]) -> str | None:
    """The tensor-core math a kernel on ``dtype`` storage may use under the problem's precisions, fastest
    first: tf32 over f32, else tf32x3 where only f32 is allowed; bf16 / f16 over themselves; None (exact f32)
    when none is admitted."""
    wanted = {"f32": ("tf32", "tf32x3"), "bf16": ("bf16",), "f16": ("f16",)}.get(dtype, ())
    return next((m for m in wanted if admitted(m, allowed_precisions)), None)


def program_precisions(program) -> list[str]:
    """Math precisions a program really uses, following the dataflow: every tensor carries the
    lowest precision on any path into it (a torch step that casts to bf16 and back leaves bf16 in
    its output's lineage), and a kernel computes at the lowest of its math
    (``dsl_compiler.precision.effective_math``) and its operands' lineage."""
    try:
        from dsl_compiler import shapes

        types = shapes.infer(program)
    except Exception:  # noqa: BLE001 - a program whose shapes do not infer: declared types only
        types = None
    lineage: dict[str, set[str]] = {d.name: {d.dtype} for d in program.decls}

    def of(name: str) -> set[str]:
        return lineage.get(name, {"f32"})

    used: set[str] = set()
    for step in program.steps:
        if isinstance(step, ir.TorchStep):
            seen: set[str] = set()
            for arg in step.args:
                if isinstance(arg, ir.TensorArg):
                    seen |= of(arg.name)
            seen |= {str(kw.value) for kw in step.kwargs if kw.key == "dtype" and str(kw.value) in PRECISION_BITS}
            for out in step.outputs:
                t = types.get(out) if types else None
                lineage[out] = seen | ({t.dtype} if t is not None else set())
            used |= seen  # a torch step computes at what reaches it (a bf16 linear is bf16 math)
            continue
        reach = set().union(*(of(o.name) for o in step.operands))
        if isinstance(step, ir.RowKernel):  # fp32 arithmetic over what reaches it, as a torch step
            used |= reach
            for store in step.stores:
                lineage[store.name] = reach | {store.dtype}
                used.add(store.dtype)
            continue
        math = effective_math(program, step, types) if types is not None else (step.config.math or "f32")
        at = {math} | reach
        used |= at
        for store in step.stores:
            lineage[store.name] = at | {store.dtype}
            used.add(store.dtype)
    used.update(d.dtype for d in program.decls)
    used = {u for u in used if u in PRECISION_BITS and u != "f32"}
    return sorted(used or {"f32"}, key=lambda p: -PRECISION_BITS[p])


def lowest_precision(precisions: Sequence[str]) -> str:
    return min(precisions, key=lambda p: PRECISION_BITS[p]) if precisions else "f32"
