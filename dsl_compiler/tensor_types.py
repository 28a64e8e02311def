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
    dtype: ir.StoreType
    shape: tuple[int, ...]
    layout: ir.Layout = "contiguous"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def reads_channels_last(self) -> bool:
        """Whether the memory holds the tensor channels-last: declared so, or a rank >= 3 tensor whose
        default order is the same memory (one channel, or one pixel: [N, 1, H, W], [N, C, 1, 1])."""
        if len(self.shape) < 3:
            return False
        return self.layout == "channels_last" or self.shape[1] == 1 or math.prod(self.shape[2:]) == 1
