"""Precision rules of the language, in one place: the math a kernel runs (its ``math`` knob, else
the element type of its A operand; f32 stays exact f32) and the tensor-core math a problem's
allowed precisions permit. The checks, the emitters, the interpreter, the bounds and the graph
all ask these functions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from dsl_compiler import ir

if TYPE_CHECKING:
    from dsl_compiler.tensor_types import TensorType

# Precisions by mantissa bits: lower means less precise.
PRECISION_BITS = {"f32": 23, "tf32": 10, "f16": 10, "bf16": 7}


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
    """The tensor-core math a kernel on ``dtype`` storage may use under the problem's precisions:
    tf32 over f32, bf16 / f16 over themselves; None (exact f32) when none is allowed."""
    wanted = {"f32": "tf32", "bf16": "bf16", "f16": "f16"}.get(dtype)
    return wanted if wanted in allowed_precisions else None


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
