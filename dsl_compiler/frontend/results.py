"""What tracing returns: the program, a coverage row per op of the reference, diagnostics."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dsl_compiler.diagnostics import Diagnostic
from dsl_compiler.ir import Program


Placement = Literal["input", "param", "kernel", "epilogue", "reduction", "torch_step", "folded", "unsupported"]


class CoverageRow(BaseModel):
    """Where one op of the reference went. ``reason`` explains every fallback, and how a kernel runs an op it
    rewrites (a transposed conv)."""

    model_config = ConfigDict(frozen=True)
    op: str  # the traced node's name, e.g. "linear", "relu_1"
    target: str  # what it calls, e.g. "nn.Linear", "torch.relu", "Tensor.sum"
    placement: Placement
    where: str = ""  # the kernel or tensor it became part of
    reason: str = ""


class TraceOptions(BaseModel):
    """Knobs for fallbacks: ``fuse`` limits epilogue fusion ("all", "bias" keeps only the bias and
    scalars of addmm, "none"); ``demote`` lists kernels (by name) to run as PyTorch steps instead;
    ``unfuse`` lists kernels whose epilogue stays in PyTorch; ``kmajor`` lists tf32 kernels whose
    operands get a transposing copy (the target reads them K-major only).

    ``math`` picks the tensor-core math of kernels over fp32 data: None is the storage type's own
    (tf32 over f32); "f16" / "bf16" compute in 16 bits: params read by a kernel are declared in
    that type (cast once when bound), every other fp32 operand is cast by one ``to`` step per call,
    accumulation and the epilogue stay fp32 and outputs keep the reference's element type; "tf32x3" computes
    fp32 data in the split-precision math (no casts), where TF32 would miss the tolerance.

    ``pad`` zero-pads a kernel's operands whose contiguous extent is not a multiple of 16 bytes."""

    model_config = ConfigDict(frozen=True)
    fuse: Literal["all", "bias", "none"] = "all"
    reductions: bool = True
    demote: tuple[str, ...] = ()
    unfuse: tuple[str, ...] = ()
    kmajor: tuple[str, ...] = ()
    math: Literal["f16", "bf16", "tf32x3"] | None = None
    # BatchNorm after a GEMM or conv kernel: "auto" folds running statistics into the kernel always, and batch
    # statistics where a second pass of the kernel pays (passes.folding.second_pass_pays); "fold" wherever it
    # can; "step" leaves every BatchNorm to a PyTorch step
    batch_norm: Literal["auto", "fold", "step"] = "auto"
    # misaligned GEMM K / N / M and conv channels: zero-padded operands (params once, when bound; other
    # tensors by a pad step) and a slice of the output, instead of the op running as a PyTorch step
    pad: bool = True
    # a 1x1 conv (stride 1, no padding) runs as a GEMM over the activation as it is stored: NCHW as a batched
    # GEMM reading [N, C, H*W] M-major, NHWC (a conv kernel's output) as one GEMM over [N*H*W, C]; no layout copy
    conv1x1_gemm: bool = True
    # a channel concatenation of kernel outputs: each kernel stores into its channels of one tensor (store y[a:b])
    # instead of a cat step copying them together
    concat_slices: bool = True


class TraceResult(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    program: Program | None
    coverage: list[CoverageRow] = Field(default_factory=list)
    diagnostics: list[Diagnostic] = Field(default_factory=list)

    @property
    def kernel_count(self) -> int:
        return len(self.program.kernels) if self.program else 0

    def summary(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self.coverage:
            counts[row.placement] = counts.get(row.placement, 0) + 1
        return counts

    def coverage_table(self) -> str:
        lines = ["op | target | placement | where | reason", "--- | --- | --- | --- | ---"]
        lines += [f"{r.op} | {r.target} | {r.placement} | {r.where} | {r.reason}" for r in self.coverage]
        return "\n".join(lines)
