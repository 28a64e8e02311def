"""Precision rules of the language: which tensor-core math a kernel may run."""

from __future__ import annotations


def default_math(dtype: str, allowed_precisions: tuple[str, ...]) -> str | None:
    """The tensor-core math a kernel on ``dtype`` storage may use under the problem's precisions:
    tf32 over f32, bf16 / f16 over themselves; None (exact f32) when none is allowed."""
    wanted = {"f32": "tf32", "bf16": "bf16", "f16": "f16"}.get(dtype)
    return wanted if wanted in allowed_precisions else None
