"""Precision rules of the language, in one place: the math a kernel runs (its ``math`` knob, else
the element type of its A operand; f32 stays exact f32) and the tensor-core math a problem's
allowed precisions permit. The checks, the emitters, the interpreter, the bounds and the graph
all ask these functions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsl_compiler import ir

if TYPE_CHECKING:
    from dsl_compiler.tensor_types import TensorType


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
