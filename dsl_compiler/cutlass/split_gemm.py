"""tf32x3 GEMM (plain and batched) for the CUTLASS backend: CUTLASS 2.x ``device::GemmUniversal`` on Ampere
``mma.sync`` (arch tag ``Sm80``, compiled for sm_90a, where it runs as well) with ``arch::OpMultiplyAddFastF32``.
Each fp32 operand is split in registers into a TF32 big part (truncated) and a TF32 remainder; three TF32 MMAs
(small*big + big*small + big*big) accumulate in fp32, about fp32's accuracy at a third of the TF32 MMA rate.
CUTLASS 4.2's sm_90 wgmma collectives have no such split, so this kernel has no TMA, clusters or warp-specialized
schedules; a wgmma mainloop that splits its operands would be the faster kernel.

Every operand layout is read as stored (A [M, K] or ``a^T`` [K, M]; B [K, N] or ``b^T`` [N, K]). The epilogue is
the 2.x output operator (``epilogue_sm80``): one store over ``acc``, constants and at most one tensor read through
C, a bias ``b[col]`` (C with zero leading and batch strides) or a residual. The C ABI is ``emit``'s GEMM ABI
(pointers A, B, D, then the epilogue's tensor; ints ``M N K L`` and ``p<i>.ld`` / ``p<i>.bs``), so the runtime
calls it unchanged."""

from __future__ import annotations

from dsl_compiler import shapes
from dsl_compiler.cutlass.common import (
    CPP_ELEMENT,
    MU_FAIL,
    SM80_PREAMBLE,
    AbiTensor,
    EmittedKernel,
    KernelAbi,
    alignment,
    math_for,
    namespace_for,
    require_operands,
    unsupported,
)
from dsl_compiler.cutlass.epilogue_sm80 import output_operator
from dsl_compiler.ir import GemmOp, Kernel, Program
from dsl_compiler.ops import CPP_HELPERS

# CTA tile extents the kernel is built for; warps of at most 64x64 each, at most 8 warps a CTA.
SPLIT_TILE_M = (64, 128, 256)
SPLIT_TILE_N = (64, 128, 256)
SPLIT_TILE_K = (16, 32)
SPLIT_STAGES = (2, 3, 4, 5, 6)
SPLIT_MAX_WARPS = 8
DEFAULT_SPLIT_TILE = (128, 128, 32)
SPLIT_SMEM_BYTES = 232448  # the opt-in shared memory of one block on sm_90
_LATER = "store the GEMM output and apply the rest in a later kernel or torch step"


def split_plan(tile: tuple[int, int, int] | None, stages) -> dict:
    """Tile, warp shape and stages of the kernel; with ``error`` (found, expected) where the knobs do not fit."""
    tm, tn, tk = tile or DEFAULT_SPLIT_TILE
    wm, wn = min(64, tm // 2), min(64, tn // 2)
    n_stages = stages if isinstance(stages, int) else (4 if tk == 16 else 3)
    plan = {"tile": (tm, tn, tk), "warp": (wm, wn, tk), "stages": n_stages}
    if tm not in SPLIT_TILE_M or tn not in SPLIT_TILE_N or tk not in SPLIT_TILE_K:
        plan["error"] = (f"tile = {tm}x{tn}x{tk}", f"tile M in {SPLIT_TILE_M}, N in {SPLIT_TILE_N}, K in {SPLIT_TILE_K}")
    elif (tm // wm) * (tn // wn) > SPLIT_MAX_WARPS:
        plan["error"] = (f"tile = {tm}x{tn}x{tk}", f"at most {SPLIT_MAX_WARPS} warps of 64x64 (e.g. 256x128x16)")
    elif n_stages not in SPLIT_STAGES or n_stages * (tm + tn) * tk * 4 > SPLIT_SMEM_BYTES:
        plan["error"] = (f"stages = {n_stages}", f"stages in {SPLIT_STAGES} with stages x (M + N) x K x 4 bytes <= {SPLIT_SMEM_BYTES}")
    return plan


def _refuse_sm90_knobs(kernel: Kernel) -> None:
    """Knobs of the sm_90 collectives that this CUTLASS 2.x kernel does not have: refused, never ignored."""
    cfg = kernel.config
    why = "tf32x3 GEMMs run CUTLASS 2.x mma.sync kernels"
    knobs = {
        "cluster": (cfg.cluster != (1, 1, 1), "x".join(map(str, cfg.cluster)), f"use cluster = 1x1x1 (or leave it out): {why}, which have no clusters"),
        "schedule": (cfg.schedule != "auto", cfg.schedule, f"use schedule = auto (or leave it out): {why}, which have no warp-specialized schedules"),
        "decomposition": (cfg.decomposition != "data_parallel" or cfg.split_k != 1, f"{cfg.decomposition}, split_k = {cfg.split_k}",
                          "use decomposition = data_parallel without split_k"),
        "raster": (cfg.raster != "auto", cfg.raster, f"use raster = auto (or leave it out); {why}: set swizzle instead"),
    }
    for knob, (bad, found, hint) in knobs.items():
        if bad:
            raise unsupported(kernel, f"{knob} = {found} with math = tf32x3", hint, span=cfg.span_of(knob), found=f"{knob} = {found}")


def emit_split_gemm(program: Program, kernel: Kernel, op: GemmOp, dtypes: dict[str, str]) -> EmittedKernel:
    """C++ for a tf32x3 GEMM, or raise EmitError with an ``unsupported`` Diagnostic."""
    require_operands(kernel, (op.a, op.b), dtypes)
    a_dt, b_dt = dtypes[op.a.name], dtypes[op.b.name]
    math_for(kernel, a_dt, b_dt)
    _refuse_sm90_knobs(kernel)
    cfg = kernel.config
    plan = split_plan(cfg.tile, cfg.stages)
    if "error" in plan:
        found, expected = plan["error"]
        raise unsupported(kernel, f"{found} for a tf32x3 GEMM", f"expected {expected}; or leave tile and stages unset",
                           span=cfg.span_of("tile" if "tile" in found else "stages"), found=found)
    try:
        out_shape, _, _ = shapes.op_output(kernel, shapes.infer(program, upto=kernel))
    except Exception:  # noqa: BLE001 -- the checks report shape errors; here only N is needed
        raise unsupported(kernel, "the GEMM's shapes do not work out", "run `mucutlass check` on the program and fix what it reports",
                           span=op.span) from None
    epi = output_operator(kernel, dtypes, out_shape[-1], "tf32x3 GEMM", _LATER)
    (tm, tn, tk), (wm, wn, wk), stages = plan["tile"], plan["warp"], plan["stages"]
    lay_a = "cutlass::layout::ColumnMajor" if op.a.transpose else "cutlass::layout::RowMajor"
    lay_b = "cutlass::layout::ColumnMajor" if op.b.transpose else "cutlass::layout::RowMajor"
    align_a, align_b = alignment(kernel, a_dt), alignment(kernel, b_dt)
    body = f"""{CPP_HELPERS}
{epi.functor}
using EpilogueOp = MuOutputOp<float>;
using Op = cutlass::gemm::device::GemmUniversal<
    float, {lay_a}, float, {lay_b}, {CPP_ELEMENT[epi.d_dtype]}, cutlass::layout::RowMajor, float,
    cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
    cutlass::gemm::GemmShape<{tm}, {tn}, {tk}>,  // knob: tile
    cutlass::gemm::GemmShape<{wm}, {wn}, {wk}>, cutlass::gemm::GemmShape<16, 8, 8>, EpilogueOp,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<{int(cfg.swizzle)}>,  // knob: swizzle
    {stages},  // knob: stages
    {align_a}, {align_b},  // knob: alignment
    cutlass::arch::OpMultiplyAddFastF32>;  // knob: math
"""
    ints = ["M", "N", "K", "L", "p0.ld", "p0.bs", "p1.ld", "p1.bs", "p2.ld", "p2.bs"]
    if epi.source == "residual":
        ints += ["p3.ld", "p3.bs"]
        source = "void* c_ptr = ptrs[3]; int64_t c_bs = I(11), c_ld = I(10);"
    elif epi.source == "bias":  # element (m, n) of C at n: the bias, for every row and batch
        source = "void* c_ptr = ptrs[3]; int64_t c_bs = 0, c_ld = 0;"
    else:  # never read (is_source_needed is false)
        source = "void* c_ptr = ptrs[2]; int64_t c_bs = I(9), c_ld = I(8);"
    abi_text = _ABI.replace("@@NCONST@@", str(len(epi.scalars))).replace("@@SOURCE@@", source)
    core = body + abi_text
    ns = namespace_for(core)
    text = _INCLUDES + f"\nnamespace {ns} {{\n" + core.replace("@@NS@@", ns)
    d_name = kernel.stores[0].name
    tensors = (AbiTensor(op.a.name, "a", a_dt), AbiTensor(op.b.name, "b", b_dt), AbiTensor(d_name, "d", epi.d_dtype),
               *epi.tensors)
    abi = KernelAbi("gemm", tensors, tuple(ints), epi.scalars)
    knobs = {"tile": f"GemmShape<{tm}, {tn}, {tk}>,  // knob: tile", "stages": f"{stages},  // knob: stages",
             "swizzle": "// knob: swizzle", "alignment": "// knob: alignment", "math": "OpMultiplyAddFastF32"}
    return EmittedKernel(kernel.name, ns, text, abi, knobs)


_INCLUDES = SM80_PREAMBLE + r"""#include "cutlass/gemm/device/gemm_universal.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
"""

# ints: M N K L, then p<i>.ld / p<i>.bs of A, B, D (and of a residual C).
_ABI = "\n" + MU_FAIL + r"""
static typename Op::Arguments mu_make_args(void* const* ptrs, const int64_t* ints, const float* scalars) {
  auto I = [&](int i) { return ints[i]; };
  typename EpilogueOp::Params params;
  for (int i = 0; i < @@NCONST@@; ++i) params.c[i] = scalars[i];
  @@SOURCE@@
  return typename Op::Arguments(
      I(3) > 1 ? cutlass::gemm::GemmUniversalMode::kBatched : cutlass::gemm::GemmUniversalMode::kGemm,
      {int(I(0)), int(I(1)), int(I(2))}, int(I(3)), params, ptrs[0], ptrs[1], c_ptr, ptrs[2],
      I(5), I(7), c_bs, I(9), I(4), I(6), c_ld, I(8));
}
}  // namespace @@NS@@

extern "C" int mucutlass_workspace_size(void* const* ptrs, const int64_t* ints, const float* scalars,
                                         size_t* bytes, char* msg, int msg_len) {
  using namespace @@NS@@;
  (void)msg; (void)msg_len;
  *bytes = Op::get_workspace_size(mu_make_args(ptrs, ints, scalars));
  return 0;
}

extern "C" int mucutlass_run(void* const* ptrs, const int64_t* ints, const float* scalars, void* workspace,
                             size_t workspace_bytes, void* stream, char* msg, int msg_len) {
  using namespace @@NS@@;
  typename Op::Arguments args = mu_make_args(ptrs, ints, scalars);
  Op op;
  cutlass::Status st = op.can_implement(args);
  if (st != cutlass::Status::kSuccess) return mu_fail(msg, msg_len, "can_implement", cutlass::cutlassGetStatusString(st));
  if (Op::get_workspace_size(args) > workspace_bytes) return mu_fail(msg, msg_len, "workspace", "workspace smaller than mucutlass_workspace_size");
  st = op.initialize(args, workspace, static_cast<cudaStream_t>(stream));
  if (st != cutlass::Status::kSuccess) return mu_fail(msg, msg_len, "initialize", cutlass::cutlassGetStatusString(st));
  st = op.run(static_cast<cudaStream_t>(stream));
  if (st != cutlass::Status::kSuccess) return mu_fail(msg, msg_len, "run", cutlass::cutlassGetStatusString(st));
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return mu_fail(msg, msg_len, "launch", cudaGetErrorString(err));
  return 0;
}
"""
