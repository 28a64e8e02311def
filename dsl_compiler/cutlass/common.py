"""What the three CUTLASS emitters share (``emit`` for GEMM and sm_90 conv, ``grouped_gemm``
for grouped GEMM, ``grouped_conv`` for grouped and depthwise conv): the emitted-kernel and ABI
types, the C++ preamble, element types, and the schedule, stage and alignment choices (their
epilogues: ``epilogue``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from dsl_compiler.diagnostics import Diagnostic
from dsl_compiler.precision import MATH_MODES, kernel_math
from dsl_compiler.ir import Kernel, Span


CPP_ELEMENT = {"f32": "float", "bf16": "cutlass::bfloat16_t", "f16": "cutlass::half_t"}
ELEMENT_BITS = {"f32": 32, "bf16": 16, "f16": 16}


class EmitError(Exception):
    """A kernel the backend cannot build; carries the Diagnostic to return."""

    def __init__(self, diagnostic: Diagnostic):
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


@dataclass(frozen=True)
class AbiTensor:
    """One device pointer of the C ABI.

    role: ``a``/``b`` (GEMM operands), ``x``/``w`` (conv), ``src`` (C, the first full-shape
    epilogue input), ``aux`` (further full-shape inputs), ``col``/``row``/``scalar`` (broadcast
    inputs), ``d`` (the main output), ``store`` (further full outputs), ``reduce`` (row_* / col_*).
    """

    name: str
    role: str
    dtype: str
    reduce_fn: str | None = None
    # an output stored as channels (offset, of total) of a tensor several kernels fill (``store y[a:b]``): the
    # runtime passes a view of that tensor; the kernel's C++ does not depend on it (out of repr: digests keep)
    channels: tuple[int, int] | None = field(default=None, repr=False)


@dataclass(frozen=True)
class KernelAbi:
    op_kind: str  # gemm | conv
    tensors: tuple[AbiTensor, ...]
    ints: tuple[str, ...]
    scalars: tuple[float, ...]
    spatial_dims: int = 0
    # suffix of the library's entry points: a unit that builds several kernels exports each as
    # ``mucutlass_run_<symbol>`` (a unit of one kernel exports the plain names)
    symbol: str = ""
    # values of ints that are run-time knobs, not sizes (raster order, swizzle, splits): the source reads
    # them from ``ints`` like the sizes, so kernels differing only in them share one build
    knob_values: tuple[tuple[str, int], ...] = ()
    # a row kernel's (outer, rows, inner) and its stores' shape, fixed by the program's shapes: the call reads them
    # here (a standalone ModelNew file carries no compiler to work them out)
    row_geometry: tuple[int, ...] = ()
    row_out_shape: tuple[int, ...] = ()

    def index(self, role: str, name: str | None = None) -> int:
        for i, t in enumerate(self.tensors):
            if t.role == role and (name is None or t.name == name):
                return i
        raise KeyError(role)


@dataclass
class EmittedKernel:
    kernel_name: str
    namespace: str
    source: str
    abi: KernelAbi
    # knob -> C++ fragment that carries it: maps an nvcc error back to the program's knob
    knobs: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Expressions


def unsupported(kernel: Kernel, message: str, hint: str, span: Span | None = None, found: str | None = None):
    return EmitError(
        Diagnostic(code="unsupported", message=f"kernel '{kernel.name}': {message}", span=span or kernel.span,
                   found=found, hint=hint)
    )


def alignment(kernel: Kernel, dtype: str) -> int:
    """Elements per 16-byte access unless the kernel asks for less."""
    max_align = 128 // ELEMENT_BITS[dtype]
    if kernel.config.alignment:
        return min(kernel.config.alignment, max_align)
    return max_align


def math_for(kernel: Kernel, a_dtype: str, b_dtype: str) -> str:
    if a_dtype != b_dtype:
        raise unsupported(kernel, f"operands of different types ({a_dtype} and {b_dtype})",
                           "convert one operand with a torch step (e.g. `torch b16 = to(b, dtype=\"bf16\")`) so both match",
                           found=f"{a_dtype} x {b_dtype}")
    math = kernel_math(kernel, a_dtype)  # unset: the operands' own type (f32 stays exact f32)
    if a_dtype == "f32" and math == "f32":
        raise unsupported(kernel, "math = f32 (exact fp32, also the default for f32 operands) has no Hopper tensor-core path",
                           "use math = tf32 (fp32 storage, tensor-core math; about 3e-4 relative error)",
                           found="math = f32")
    mode = MATH_MODES.get(math)
    if mode is None or mode.storage != a_dtype or (a_dtype != "f32" and math != a_dtype):
        raise unsupported(kernel, f"math = {math} over {a_dtype} operands",
                           f"use math = {'tf32 (or tf32x3, fp32-accurate)' if a_dtype == 'f32' else a_dtype} for {a_dtype} storage",
                           found=f"math = {math}")
    if kernel.config.accum == "f16" and a_dtype != "f16":
        raise unsupported(kernel, "accum = f16 needs f16 operands", "use accum = f32", found="accum = f16")
    return math


def cute_shape(dims) -> str:
    return "cute::Shape<" + ", ".join(f"cute::_{d}" for d in dims) + ">"


def namespace_for(source_body: str) -> str:
    return "mu_" + hashlib.sha256(source_body.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# Kernels

# The ints of every conv kernel's C ABI (the runtime's conv_call_args fills them in this order).
CONV_INTS = ("n", "d", "h", "w", "c", "k", "t", "r", "s", "pad_d", "pad_h", "pad_w",
             "stride_d", "stride_h", "stride_w", "dil_d", "dil_h", "dil_w")

PREAMBLE = r"""// Generated by mucutlass from a μCUTLASS program. One kernel per translation unit.
#include <cstdint>
#include <cstdio>
#include <cmath>
#include <cuda_runtime.h>
#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
"""

# The CUTLASS 2.x kernels' (grouped / depthwise conv, tf32x3 GEMM) common includes: no CuTe, no sm_90 collectives.
SM80_PREAMBLE = r"""// Generated by mucutlass from a μCUTLASS program. One kernel per translation unit.
#include <cstdint>
#include <cstdio>
#include <cmath>
#include <cuda_runtime.h>
#include "cutlass/cutlass.h"
#include "cutlass/array.h"
#include "cutlass/numeric_types.h"
#include "cutlass/numeric_conversion.h"
#include "cutlass/epilogue/thread/scale_type.h"
"""

# The GEMM device adapter also pulls in CUTLASS 2.x's GemmUniversal, whose partial
# specialization is ambiguous with the sm_90 conv kernel's: a conv unit must not include it.
GEMM_INCLUDES = r"""#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
"""

# Reports a failed stage into the caller's message buffer; every kernel's C ABI returns through it.
MU_FAIL = r"""static int mu_fail(char* msg, int msg_len, const char* stage, const char* text) {
  if (msg && msg_len > 0) snprintf(msg, msg_len, "%s: %s", stage, text);
  return 1;
}
"""


# The device's SM count for CUTLASS's persistent schedulers, queried once per device.
MU_SM_COUNT = r"""static int mu_sm_count() {
  static int count[64] = {0};
  int dev = 0;
  cudaGetDevice(&dev);
  if (!count[dev & 63]) count[dev & 63] = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(dev);
  return count[dev & 63];
}
"""


def schedules(kernel: Kernel, tile, ptr_array: bool = False) -> tuple[str, str, str]:
    """(schedule, kernel schedule, epilogue schedule); ``ptr_array``: those of the grouped (pointer-array) kernels."""
    sched = kernel.config.schedule
    if sched == "auto":
        sched = "cooperative" if tile[0] >= 128 else "pingpong"
    if sched == "cooperative" and tile[0] < 128:
        raise unsupported(kernel, f"schedule = cooperative with tile M = {tile[0]}",
                           "cooperative splits the tile's M over two warp groups: use tile M >= 128 or schedule = pingpong",
                           span=kernel.config.span_of("schedule"), found=f"tile = {'x'.join(map(str, tile))}")
    if ptr_array:
        name = "Cooperative" if sched == "cooperative" else "Pingpong"
        return sched, f"cutlass::gemm::KernelPtrArrayTmaWarpSpecialized{name}", f"cutlass::epilogue::PtrArrayTmaWarpSpecialized{name}"
    if sched == "cooperative":
        return sched, "cutlass::gemm::KernelTmaWarpSpecializedCooperative", "cutlass::epilogue::TmaWarpSpecializedCooperative"
    return sched, "cutlass::gemm::KernelTmaWarpSpecializedPingpong", "cutlass::epilogue::TmaWarpSpecialized"


def stage_count(kernel: Kernel, builder_ns: str) -> str:
    if kernel.config.stages == "auto":
        return f"{builder_ns}::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>"
    return f"{builder_ns}::StageCount<{int(kernel.config.stages)}>"


def acc_element(kernel: Kernel) -> str:
    return "cutlass::half_t" if kernel.config.accum == "f16" else "float"


def require_operands(kernel: Kernel, operands, dtypes: dict[str, str]) -> None:
    for o in operands:
        if o.name not in dtypes:
            raise EmitError(Diagnostic(code="undefined-name", message=f"kernel '{kernel.name}': operand '{o.name}' is not defined",
                                       span=o.span or kernel.span, hint="declare it, or store it in an earlier kernel"))
