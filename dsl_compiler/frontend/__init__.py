"""Trace a PyTorch reference ``Model`` into a μCUTLASS program.

The reference is traced with ``torch.fx.symbolic_trace`` (``torch.export`` when symbolic tracing
fails), shapes are propagated on meta tensors, and every op is mapped:

- linear / matmul / mm / bmm / addmm / GEMM-form einsum / ``@``  -> a ``gemm`` kernel
  (transposes folded into operands as ``^T``, nn.Linear's weight read as ``w^T``);
- conv1d/2d/3d                                                   -> a ``conv`` kernel
  (weights declared ``channels_last``, activations converted by a ``channels_last`` torch step);
- the elementwise chain after a kernel                           -> that kernel's epilogue
  (bias vectors as ``b[col]``, scalars as constants, same-shape tensors as residuals);
- sums / max / min / mean over the last dim of a GEMM output     -> row reductions;
- everything else                                                -> a named PyTorch step.

Kernels over fp32 data compute in TF32, operands read as stored (a transposing copy only where the
checks want K-major operands, or ``TraceOptions.kmajor`` asks for one), or in f16 / bf16 with
``TraceOptions.math``: params declared in that type, other operands converted by a ``to`` step.

Every op of the model gets a ``CoverageRow`` saying where it went and, for a fallback, why.
Nothing here raises on a bad problem: failures come back as diagnostics.
"""

from dsl_compiler.frontend.results import CoverageRow, Placement, TraceOptions, TraceResult
from dsl_compiler.frontend.trace import trace_problem

__all__ = ["CoverageRow", "Placement", "TraceOptions", "TraceResult", "trace_problem"]
