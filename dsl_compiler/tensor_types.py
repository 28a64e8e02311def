"""The type of a named tensor, and the error raised when one cannot be inferred: shared by the
shape inference (``shapes``) and the torch steps it runs on meta tensors (``torch_steps``)."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from dsl_compiler import ir


class ShapeError(ValueError):
    """A shape that cannot be inferred. ``span`` locates the cause; ``hint`` says how to fix it."""

    def __init__(self, message: str, span: ir.Span | None = None, found: str | None = None,
                 expected: str | None = None, hint: str | None = None, code: str = "shape-mismatch"):
        super().__init__(message)
        self.message = message
        self.span = span
        self.found = found
        self.expected = expected
        self.hint = hint
        self.code = code


class TensorType(BaseModel):
    """The type of a named tensor: element type, logical (PyTorch) shape and physical layout."""

    model_config = ConfigDict(frozen=True)
    dtype: ir.ElementType
    shape: tuple[int, ...]
    layout: ir.Layout = "contiguous"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)
