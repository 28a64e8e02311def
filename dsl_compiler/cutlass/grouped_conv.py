"""Grouped and depthwise convolution (1-D and 2-D) for the CUTLASS backend.

CUTLASS 4.2's sm_90 conv collectives (TMA + wgmma) take groups = 1 only, so a conv with groups > 1
is built from CUTLASS 2.x kernels, which run on sm_90 as well:

- depthwise (groups == C == K): the direct convolution ``DefaultDepthwiseDirect2dConvFprop`` (SIMT, memory-bound
  anyway: fp32 multiply-add for f32 storage; for f16 / bf16 CUTLASS rounds each product to the storage type and
  sums in fp32). Filter size, stride and dilation
  are template constants (``kFixedStrideDilation``) for filters up to 5x5 with stride and dilation up to
  2, else ``kOptimized`` reads stride and dilation at run time. It reads a filter re-laid out once per
  call into the workspace (CUTLASS's own reorder kernel). Its grid is (1, ceil(K / channels per CTA),
  ``split_k_slices``): CUTLASS's depthwise swizzle puts the N*P*Q output tiles on ``split_k_slices`` (each CTA
  then walks every ``split_k_slices``-th tile; no reduction), so with 1 a handful of CTAs walk every tile in
  turn (milliseconds on the H200 for a MobileNet layer). With ``MUCUTLASS_DEPTHWISE_SPLIT = on`` the host code
  sizes ``split_k_slices`` for about ``DEPTHWISE_SPLIT_CTAS_PER_SM`` CTAs per SM (off by default until measured).
- grouped (1 < groups < C): the implicit-GEMM ``DefaultConv2dGroupFprop`` on Ampere tensor-core
  instructions (``Sm80``: TF32 ``mma.sync`` for f32 storage, f16 / bf16 for 16-bit storage).
  ``GroupMode::kSingleGroup`` (optimized iterators) when the tile's N divides K/groups,
  ``kMultipleGroup`` (analytic iterators; one CTA computes several groups) when K/groups divides it.

The epilogue is a functor generated from the kernel's store expression (the 2.x epilogues call it
on fragments, as they call ``LinearCombination``): any element-wise expression of ``acc`` and at most
one tensor read through CUTLASS's source operand C: a per-channel vector ``b[col]`` (C with all
strides 0) or a full tensor of the output's shape (a residual). Literal constants are runtime scalars.

A 1-D conv runs as the 2-D one with H = R = 1 (the depthwise kernel then computes its 8x8 output tiles on
one valid row: correct, and memory traffic only for that row). The C ABI and ``KernelAbi`` are those of ``emit`` (conv ints, pointers x, w, d, then the
epilogue tensor), so ``cutlass_runtime`` calls these kernels unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsl_compiler.cutlass.common import (
    CONV_INTS,
    CPP_ELEMENT,
    ELEMENT_BITS,
    MU_FAIL,
    SM80_PREAMBLE,
    AbiTensor,
    EmitError,
    EmittedKernel,
    KernelAbi,
    namespace_for,
    unsupported,
)
from dsl_compiler.diagnostics import Diagnostic
from dsl_compiler.cutlass.epilogue_sm80 import Sm80Epilogue, output_operator, pow2_vector
from dsl_compiler.ops import CPP_HELPERS
from dsl_compiler.ir import ConvOp, Kernel, Program
from dsl_compiler.precision import kernel_math
from dsl_compiler.run_settings import runtime_setting

# Depthwise direct conv: (output rows, output cols, channels) per CTA, first that fits shared memory.
DEPTHWISE_TILES = ((8, 8, 64), (8, 8, 32), (8, 8, 16), (4, 4, 64), (4, 4, 32), (4, 4, 16))
DEPTHWISE_SMEM_BYTES = 200 * 1024  # of the 227 KB a block may opt into
DEPTHWISE_STAGE_TARGET_BYTES = 64 * 1024  # stages = auto: as many stages as fit here (occupancy of a memory-bound kernel)
FIXED_MAX_FILTER, FIXED_MAX_STRIDE, FIXED_MAX_DILATION = 5, 2, 2  # beyond: registers spill, kOptimized instead
# MUCUTLASS_DEPTHWISE_SPLIT = on: CTAs per SM the output tiles are spread over (a CTA of 4 warps and at most ~60 KB
# of shared memory for fp32 3x3: 4 fit an SM); each walks its share of tiles with its multistage pipeline.
DEPTHWISE_SPLIT_CTAS_PER_SM = 4
_LATER = "store the conv output and apply the rest in a later torch step"
# Grouped implicit GEMM (Sm80 tensor-op mma.sync): tile extents it is built for.
GROUPED_TILE_M = (64, 128)
GROUPED_TILE_N = (32, 64, 128)
GROUPED_TILE_K = {"f32": (16, 32), "bf16": (32, 64), "f16": (32, 64)}
GROUPED_STAGES = (3, 4, 5, 6)
SWIZZLES = (1, 2, 4, 8)


def _math(kernel: Kernel, dtype: str, w_dtype: str, depthwise: bool) -> str:
    if dtype != w_dtype:
        raise unsupported(kernel, f"operands of different types ({dtype} and {w_dtype})",
                           "convert one operand with a torch step so both match", found=f"{dtype} x {w_dtype}")
    math = kernel_math(kernel, dtype)
    if dtype == "f32":
        if depthwise and math in ("f32", "tf32"):
            return "f32"  # SIMT fp32 multiply-add: exact f32, at least as precise as tf32
        if not depthwise and math == "tf32":
            return "tf32"
        want = "math = f32 or tf32 (the depthwise kernel multiplies in fp32)" if depthwise else "math = tf32"
        hint = ("use math = tf32 (Ampere tensor-core mma.sync; about 3e-4 relative error)" if not depthwise
                else f"use math = f32 for {dtype} operands")
        raise unsupported(kernel, f"math = {math} over f32 operands" + ("" if depthwise else
                           ": a grouped conv runs on tensor cores, which have no exact-fp32 path"), hint,
                           span=kernel.config.span_of("math"), found=f"math = {math}; expected {want}")
    if math != dtype:
        raise unsupported(kernel, f"math = {math} over {dtype} operands", f"use math = {dtype} for {dtype} storage",
                           span=kernel.config.span_of("math"), found=f"math = {math}")
    if kernel.config.accum == "f16" and dtype != "f16":
        raise unsupported(kernel, "accum = f16 needs f16 operands", "use accum = f32", found="accum = f16")
    return math


def _common_config(kernel: Kernel, kind: str, allow_tile: bool, allow_swizzle: bool) -> None:
    """Knobs of the sm_90 collectives that CUTLASS 2.x kernels do not have: refused, never ignored."""
    cfg = kernel.config
    why = f"{kind} convs run CUTLASS 2.x kernels"
    knobs = {
        "cluster": (cfg.cluster != (1, 1, 1), "x".join(map(str, cfg.cluster)), f"use cluster = 1x1x1 (or leave it out): {why}, which have no clusters"),
        "schedule": (cfg.schedule != "auto", cfg.schedule, f"use schedule = auto (or leave it out): {why}, which have no warp-specialized schedules"),
        "decomposition": (cfg.decomposition != "data_parallel" or cfg.split_k != 1, f"{cfg.decomposition}, split_k = {cfg.split_k}",
                          f"use decomposition = data_parallel without split_k: CUTLASS's {kind} conv takes no split-K"),
        "raster": (cfg.raster != "auto", cfg.raster, f"use raster = auto (or leave it out): {why}"),
        "tile": (not allow_tile and cfg.tile is not None, "x".join(map(str, cfg.tile or ())),
                 "remove tile: the depthwise kernel chooses its tile from the filter, stride and channels"),
        "swizzle": (not allow_swizzle and cfg.swizzle != 1, str(cfg.swizzle), f"remove swizzle: the {kind} kernel walks its tiles in order"),
    }
    for knob, (bad, found, hint) in knobs.items():
        if bad:
            raise unsupported(kernel, f"{knob} = {found} for a {kind} convolution", hint,
                               span=cfg.span_of(knob), found=f"{knob} = {found}")


def _layouts(program: Program, kernel: Kernel, op: ConvOp) -> None:
    for o, what in ((op.x, "input"), (op.w, "filter")):
        decl = program.decl(o.name)
        if decl is not None and decl.layout != "channels_last":
            raise unsupported(kernel, f"conv {what} '{o.name}' is contiguous (NCHW); the grouped / depthwise kernels read channels-last (NHWC / KRSC)",
                               f"declare '{o.name}' channels_last, or add `torch {o.name}_cl = channels_last({o.name})` and convolve that",
                               span=o.span or kernel.span, found="layout = contiguous")


def _shapes(program: Program, kernel: Kernel):
    from dsl_compiler import shapes

    try:
        types = shapes.infer(program, upto=kernel)
        out_shape, _, _ = shapes.op_output(kernel, types)
    except Exception:  # noqa: BLE001 -- the checks report shape errors; here only the extents are needed
        return None, None
    return types, out_shape


def emit_grouped_conv(program: Program, kernel: Kernel, op: ConvOp, dtypes: dict[str, str]) -> EmittedKernel:
    """C++ for a conv with groups > 1, or raise EmitError with an ``unsupported`` Diagnostic."""
    if op.spatial_dims == 3:
        raise unsupported(kernel, f"conv3d with groups = {op.groups}: CUTLASS's grouped and depthwise kernels are 2-D",
                           f"route it to a PyTorch step: `torch y = conv3d(x, w, stride=..., padding=..., groups={op.groups})`, "
                           "then apply the epilogue in a later step", span=op.span, found=f"conv3d, groups = {op.groups}")
    _layouts(program, kernel, op)
    types, out_shape = _shapes(program, kernel)
    if types is None or op.x.name not in types or op.w.name not in types:
        raise unsupported(kernel, "the convolution's shapes do not work out", "run `mucutlass check` on the program and fix what it reports",
                           span=op.span)
    if op.spatial_dims == 1:
        # A 1-D conv is the 2-D one with H = R = 1: NWC / KSC are NHWC / KRSC with H = R = 1 in memory, and the
        # runtime's conv ints already say h = r = 1, pad_h = 0, stride_h = dil_h = 1.
        (n, c, w), (k, cg, s), h, r = types[op.x.name].shape, types[op.w.name].shape, 1, 1
        op = op.model_copy(update={"spatial_dims": 2, "stride": (1, *op.stride), "padding": (0, *op.padding),
                                   "dilation": (1, *op.dilation)})
    else:
        n, c, h, w = types[op.x.name].shape
        k, cg, r, s = types[op.w.name].shape
    x_dt, w_dt = dtypes[op.x.name], dtypes[op.w.name]
    depthwise = op.groups == c
    math = _math(kernel, x_dt, w_dt, depthwise)
    epi = output_operator(kernel, dtypes, k, "grouped / depthwise convolution", _LATER)
    if depthwise:
        return _emit_depthwise(kernel, op, x_dt, epi, (n, c, h, w), (k, r, s), math)
    return _emit_grouped(kernel, op, x_dt, epi, (n, c, h, w), (k, cg, r, s), math)


# ---------------------------------------------------------------------------------------------
# Depthwise: CUTLASS's direct convolution (SIMT)


def depthwise_plan(dtype: str, c: int, r: int, s: int, stride, dilation, stages) -> dict:
    """Tile, algorithm and stages of the depthwise direct conv for this problem."""
    nbytes = ELEMENT_BITS[dtype] // 8
    fixed = max(r, s) <= FIXED_MAX_FILTER and max(stride) <= FIXED_MAX_STRIDE and max(dilation) <= FIXED_MAX_DILATION
    for oh, ow, g in DEPTHWISE_TILES:
        if g > 16 and c < g:
            continue
        act_h = (oh - 1) * stride[0] + (r - 1) * dilation[0] + 1
        act_w = (ow - 1) * stride[1] + (s - 1) * dilation[1] + 1
        stage_bytes = act_h * act_w * g * nbytes
        filter_bytes = r * s * g * nbytes
        n_stages = stages if isinstance(stages, int) else max(2, min(4, DEPTHWISE_STAGE_TARGET_BYTES // stage_bytes))
        if n_stages * stage_bytes + filter_bytes <= DEPTHWISE_SMEM_BYTES:
            return {"oh": oh, "ow": ow, "groups_per_cta": g, "stages": n_stages, "fixed": fixed,
                    "smem_bytes": n_stages * stage_bytes + filter_bytes}
    return {}


def _emit_depthwise(kernel: Kernel, op: ConvOp, dtype: str, epi: Sm80Epilogue, xs, ws, math: str) -> EmittedKernel:
    n, c, h, w = xs
    k, r, s = ws
    if k != c:
        raise unsupported(kernel, f"depthwise conv with K = {k} = {k // c} x C (a channel multiplier above 1)",
                           "CUTLASS's depthwise kernel computes one output channel per input channel: route it to a PyTorch step "
                           f"(`torch y = conv{kernel.op.spatial_dims}d(x, w, ..., groups={op.groups})`), or repeat the input channels with a torch step first",
                           span=op.span, found=f"C = {c}, K = {k}, groups = {op.groups}")
    vec = 128 // ELEMENT_BITS[dtype]
    if c % vec:
        raise unsupported(kernel, f"depthwise conv over C = {c} channels: the kernel loads {vec} {dtype} channels (16 bytes) at a time",
                           f"pad the channels to a multiple of {vec} with a torch step, or leave this conv to a PyTorch step",
                           span=op.span, found=f"C = {c}")
    _common_config(kernel, "depthwise", allow_tile=False, allow_swizzle=False)
    stages = kernel.config.stages
    if isinstance(stages, int) and not 2 <= stages <= 6:
        raise unsupported(kernel, f"stages = {stages} for a depthwise convolution", "use stages = 2..6 or auto",
                           span=kernel.config.span_of("stages"), found=f"stages = {stages}")
    plan = depthwise_plan(dtype, c, r, s, op.stride, op.dilation, stages)
    if not plan:
        raise unsupported(kernel, f"a {r}x{s} filter with stride {op.stride} and dilation {op.dilation} needs more shared memory "
                           "per CTA than the depthwise kernel may use", "use stages = 2 or auto, or route this conv to a PyTorch step",
                           span=op.span, found=f"filter {r}x{s}, stride {op.stride}, dilation {op.dilation}")
    oh, ow, g, n_stages = plan["oh"], plan["ow"], plan["groups_per_cta"], plan["stages"]
    el = CPP_ELEMENT[dtype]
    el_acc = "cutlass::half_t" if kernel.config.accum == "f16" else "float"
    if plan["fixed"]:
        algo = (f"cutlass::conv::IteratorAlgorithm::kFixedStrideDilation, cutlass::conv::StrideSupport::kFixed,\n"
                f"    cutlass::MatrixShape<{op.stride[0]}, {op.stride[1]}>, cutlass::MatrixShape<{op.dilation[0]}, {op.dilation[1]}>")
    else:
        algo = ("cutlass::conv::IteratorAlgorithm::kOptimized, cutlass::conv::StrideSupport::kStrided,\n"
                "    cutlass::MatrixShape<-1, -1>, cutlass::MatrixShape<-1, -1>")
    body = f"""{CPP_HELPERS}
{epi.functor}
using EpilogueOp = MuOutputOp<{el_acc}>;
using ThreadBlockOutputShape = cutlass::conv::TensorNHWCShape<1, {oh}, {ow}, {g}>;  // output pixels x channels per CTA
using FilterShape = cutlass::MatrixShape<{r}, {s}>;
using ThreadblockShape = cutlass::gemm::GemmShape<{oh * ow}, {g}, {r * s}>;
using WarpShape = cutlass::gemm::GemmShape<16, {g}, {r * s}>;
using ConvKernel = typename cutlass::conv::kernel::DefaultDepthwiseDirect2dConvFprop<
    {el}, cutlass::layout::TensorNHWC, {el}, cutlass::layout::TensorNHWC, {CPP_ELEMENT[epi.d_dtype]}, cutlass::layout::TensorNHWC,
    {el_acc}, cutlass::arch::OpClassSimt, cutlass::arch::Sm80,
    ThreadblockShape, ThreadBlockOutputShape, FilterShape, WarpShape, cutlass::gemm::GemmShape<1, 1, 1>, EpilogueOp,
    cutlass::conv::threadblock::DepthwiseDirect2dConvIdentityThreadblockSwizzle<1, 1, {oh}, {ow}>,
    {n_stages},  // knob: stages
    cutlass::arch::OpMultiplyAdd,
    {algo}>::Kernel;
using Op = cutlass::conv::device::DirectConvolution<ConvKernel>;
constexpr int kGroups = {op.groups};
"""
    slices_fn = _depthwise_slices(kernel, oh, ow, g)
    knobs = {"stages": f"{n_stages},  // knob: stages", "math": f"{el}, cutlass::layout::TensorNHWC"}
    return _finish(kernel, op, body + slices_fn, epi, dtype, knobs, depthwise=True,
                   slices="mu_slices(I(0), P, Q, I(5))" if slices_fn else "1")


def _depthwise_slices(kernel: Kernel, oh: int, ow: int, groups_per_cta: int) -> str:
    """C++ of ``mu_slices`` ('' when the setting is off): the ``split_k_slices`` of the depthwise problem, which for CUTLASS's direct conv
    is the number of CTAs along the N*P*Q output tiles (DepthwiseDirect2dConvIdentityThreadblockSwizzle;
    the activation iterator advances by it, the epilogue stores tile ``slice + i * split_k_slices``)."""
    try:
        split = runtime_setting("MUCUTLASS_DEPTHWISE_SPLIT")
    except ValueError as exc:
        raise EmitError(Diagnostic(code="bad-setting", message=f"kernel '{kernel.name}': {exc}", span=kernel.span,
                                   hint="set MUCUTLASS_DEPTHWISE_SPLIT to off or on, or unset it")) from None
    if split == "off":
        return ""  # split_k_slices = 1: one CTA per channel block walks every output tile
    return f"""// MUCUTLASS_DEPTHWISE_SPLIT = on: the output tiles spread over about {DEPTHWISE_SPLIT_CTAS_PER_SM} CTAs per SM
static int mu_slices(int n, int p, int q, int k) {{
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0)
    sms = 132;
  long long tiles = (long long)n * ((p + {oh - 1}) / {oh}) * ((q + {ow - 1}) / {ow});
  int channel_blocks = (k + {groups_per_cta - 1}) / {groups_per_cta};
  long long want = ({DEPTHWISE_SPLIT_CTAS_PER_SM}LL * sms + channel_blocks - 1) / channel_blocks;
  long long slices = want < tiles ? want : tiles;
  return int(slices < 1 ? 1 : (slices > 65535 ? 65535 : slices));  // grid.z is at most 65535
}}
"""


# ---------------------------------------------------------------------------------------------
# Grouped: CUTLASS's implicit-GEMM group conv on Ampere tensor cores


def grouped_plan(dtype: str, k_per_group: int, config_tile, stages) -> dict:
    """Tile, warp shape, group mode and stages; {} with a reason when the tile cannot serve the groups."""
    ks = GROUPED_TILE_K[dtype]
    if config_tile:
        tm, tn, tk = config_tile
    else:
        tn = next((t for t in (128, 64, 32) if k_per_group % t == 0), None)
        if tn is None:  # K/groups below 32 or ragged: one CTA spans several groups
            tn = next((t for t in GROUPED_TILE_N if t % k_per_group == 0), 0)
        tm, tk = 128, ks[-1]
    plan = {"tile": (tm, tn, tk), "stages": stages if isinstance(stages, int) else (4 if ELEMENT_BITS[dtype] == 16 else 3)}
    if tm not in GROUPED_TILE_M or tn not in GROUPED_TILE_N or tk not in ks:
        plan["error"] = (f"tile = {tm}x{tn}x{tk}", f"tile M in {GROUPED_TILE_M}, N in {GROUPED_TILE_N}, K in {ks} for {dtype}")
        return plan
    if k_per_group % tn == 0:
        plan["mode"] = "kSingleGroup"
    elif tn % k_per_group == 0:
        plan["mode"] = "kMultipleGroup"
    else:
        plan["error"] = (f"tile N = {tn} with K/groups = {k_per_group}",
                         f"tile N dividing K/groups (one group per CTA) or a multiple of it (several groups per CTA)")
        return plan
    wn = 2 if tn >= 64 else 1
    wm = 2 if wn == 2 else (4 if tm >= 128 else 2)
    plan["warp"] = (tm // wm, tn // wn, tk)
    if plan["stages"] not in GROUPED_STAGES:
        plan["error"] = (f"stages = {plan['stages']}", f"stages in {GROUPED_STAGES}")
    return plan


def _emit_grouped(kernel: Kernel, op: ConvOp, dtype: str, epi: Sm80Epilogue, xs, ws, math: str) -> EmittedKernel:
    n, c, h, w = xs
    k, cg, r, s = ws
    kpg = k // op.groups
    _common_config(kernel, "grouped", allow_tile=True, allow_swizzle=True)
    cfg = kernel.config
    plan = grouped_plan(dtype, kpg, cfg.tile, cfg.stages)
    if "error" in plan:
        found, expected = plan["error"]
        raise unsupported(kernel, f"{found} for a grouped convolution (C/groups = {cg})",
                           f"expected {expected}; or leave tile and stages unset to let the compiler choose",
                           span=cfg.span_of("tile") if "tile" in found else cfg.span_of("stages"), found=found)
    tm, tn, tk = plan["tile"]
    wm, wn, wk = plan["warp"]
    align = pow2_vector(cg, dtype)
    if cfg.alignment:
        align = min(align, cfg.alignment)
    if cg % align or align & (align - 1):
        raise unsupported(kernel, f"alignment = {cfg.alignment} does not divide C/groups = {cg}", "use alignment = auto",
                           span=cfg.span_of("alignment"), found=f"alignment = {cfg.alignment}")
    if plan["mode"] == "kSingleGroup" and (align * ELEMENT_BITS[dtype]) < 32:
        align = max(align, 32 // ELEMENT_BITS[dtype])  # cp.async moves at least 4 bytes
    if cg % align:
        raise unsupported(kernel, f"C/groups = {cg} {dtype} channels: rows of a group are not 4-byte aligned",
                           "pad the channels per group to an even count with a torch step, or leave this conv to a PyTorch step",
                           span=op.span, found=f"C/groups = {cg}")
    el = CPP_ELEMENT[dtype]
    el_acc = "cutlass::half_t" if cfg.accum == "f16" else "float"
    inst_k = 8 if dtype == "f32" else 16
    algo = "kOptimized" if plan["mode"] == "kSingleGroup" else "kAnalytic"
    stages = plan["stages"]
    body = f"""{CPP_HELPERS}
{epi.functor}
using EpilogueOp = MuOutputOp<{el_acc}>;
using ThreadblockShape = cutlass::gemm::GemmShape<{tm}, {tn}, {tk}>;  // knob: tile
using WarpShape = cutlass::gemm::GemmShape<{wm}, {wn}, {wk}>;
using ConvKernel = typename cutlass::conv::kernel::DefaultConv2dGroupFprop<
    {el}, cutlass::layout::TensorNHWC, {el}, cutlass::layout::TensorNHWC, {CPP_ELEMENT[epi.d_dtype]}, cutlass::layout::TensorNHWC,
    {el_acc}, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
    ThreadblockShape, WarpShape, cutlass::gemm::GemmShape<16, 8, {inst_k}>, EpilogueOp,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<{int(cfg.swizzle)}>,  // knob: swizzle
    {stages},  // knob: stages
    cutlass::arch::OpMultiplyAdd, cutlass::conv::GroupMode::{plan['mode']}, cutlass::conv::IteratorAlgorithm::{algo},
    cutlass::conv::StrideSupport::kUnity, {align}, {align}>::Kernel;  // knob: alignment
using Op = cutlass::conv::device::ImplicitGemmConvolution<ConvKernel>;
constexpr int kGroups = {op.groups};
"""
    knobs = {"tile": f"GemmShape<{tm}, {tn}, {tk}>;  // knob: tile", "stages": f"{stages},  // knob: stages",
             "swizzle": "// knob: swizzle", "alignment": "// knob: alignment", "math": f"{el}, cutlass::layout::TensorNHWC"}
    return _finish(kernel, op, body, epi, dtype, knobs, depthwise=False)


# ---------------------------------------------------------------------------------------------
# Translation unit and C ABI

_INCLUDES = SM80_PREAMBLE + r"""#include "cutlass/conv/convolution.h"
#include "cutlass/conv/conv2d_problem_size.h"
"""
_DEPTHWISE_INCLUDES = r"""#include "cutlass/conv/kernel/default_depthwise_fprop.h"
#include "cutlass/conv/threadblock/threadblock_swizzle.h"
#include "cutlass/conv/device/direct_convolution.h"
"""
_GROUPED_INCLUDES = r"""#include "cutlass/gemm/threadblock/threadblock_swizzle.h"
#include "cutlass/conv/kernel/default_conv2d_group_fprop.h"
#include "cutlass/conv/device/implicit_gemm_convolution.h"
"""

# ints: the conv ints of emit (N, D, H, W, C, K, T, R, S, pads, strides, dilations; D = T = 1 here).
_ABI = "\n" + MU_FAIL + r"""
static cutlass::conv::Conv2dProblemSize mu_problem(const int64_t* ints) {
  auto I = [&](int i) { return int(ints[i]); };
  int P = (I(2) + 2 * I(10) - I(16) * (I(7) - 1) - 1) / I(13) + 1;
  int Q = (I(3) + 2 * I(11) - I(17) * (I(8) - 1) - 1) / I(14) + 1;
  return cutlass::conv::Conv2dProblemSize(I(0), I(2), I(3), I(4), I(5), I(7), I(8), P, Q, I(10), I(11), I(13), I(14),
                                          I(16), I(17), cutlass::conv::Mode::kCrossCorrelation, @@SLICES@@, kGroups);
}

// Bytes of the workspace: the depthwise kernel reads its filter re-laid out there.
static size_t mu_workspace_bytes(cutlass::conv::Conv2dProblemSize const& ps) {
  return @@WORKSPACE@@;
}

static void mu_make_args(void* const* ptrs, const float* scalars, cutlass::conv::Conv2dProblemSize const& ps,
                         void* workspace, typename Op::Arguments& args) {
  using Layout = cutlass::layout::TensorNHWC;
  using ElementA = typename Op::ElementA;
  using ElementB = typename Op::ElementB;
  using ElementC = typename Op::ElementC;
  Layout la = Layout::packed({ps.N, ps.H, ps.W, ps.C});
  Layout lb = Layout::packed({ps.K, ps.R, ps.S, ps.C / ps.groups});
  Layout ld = Layout::packed({ps.N, ps.P, ps.Q, ps.K});
  typename EpilogueOp::Params params;
  for (int i = 0; i < @@NCONST@@; ++i) params.c[i] = scalars[i];
  (void)workspace;
  ElementC* d = reinterpret_cast<ElementC*>(ptrs[2]);
  @@SOURCE@@
  args = typename Op::Arguments(ps, {reinterpret_cast<ElementA*>(ptrs[0]), la}, {reinterpret_cast<ElementB*>(ptrs[1]), lb},
                                {c_ptr, lc}, {d, ld}, params@@EXTRA@@);
}
}  // namespace @@NS@@

extern "C" int mucutlass_workspace_size(void* const* ptrs, const int64_t* ints, const float* scalars,
                                         size_t* bytes, char* msg, int msg_len) {
  using namespace @@NS@@;
  (void)ptrs; (void)scalars; (void)msg; (void)msg_len;
  *bytes = mu_workspace_bytes(mu_problem(ints));
  return 0;
}

extern "C" int mucutlass_run(void* const* ptrs, const int64_t* ints, const float* scalars, void* workspace,
                             size_t workspace_bytes, void* stream, char* msg, int msg_len) {
  using namespace @@NS@@;
  cutlass::conv::Conv2dProblemSize ps = mu_problem(ints);
  if (mu_workspace_bytes(ps) > workspace_bytes || (mu_workspace_bytes(ps) && !workspace))
    return mu_fail(msg, msg_len, "workspace", "workspace smaller than mucutlass_workspace_size");
  typename Op::Arguments args;
  mu_make_args(ptrs, scalars, ps, workspace, args);
  Op op;
  cutlass::Status st = op.can_implement(args);
  if (st != cutlass::Status::kSuccess) return mu_fail(msg, msg_len, "can_implement", cutlass::cutlassGetStatusString(st));
  st = op.initialize(args, nullptr, static_cast<cudaStream_t>(stream));
  if (st != cutlass::Status::kSuccess) return mu_fail(msg, msg_len, "initialize", cutlass::cutlassGetStatusString(st));
  st = op.run(static_cast<cudaStream_t>(stream));
  if (st != cutlass::Status::kSuccess) return mu_fail(msg, msg_len, "run", cutlass::cutlassGetStatusString(st));
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return mu_fail(msg, msg_len, "launch", cudaGetErrorString(err));
  return 0;
}
"""


def _finish(kernel: Kernel, op: ConvOp, body: str, epi: Sm80Epilogue, dtype: str, knobs: dict[str, str], depthwise: bool,
            slices: str = "1") -> EmittedKernel:
    if epi.source == "bias":  # C with every stride 0: element (n, p, q, k) reads bias[k]
        source = "ElementC* c_ptr = reinterpret_cast<ElementC*>(ptrs[3]);\n  Layout lc = Layout(typename Layout::Stride(0));"
    elif epi.source == "residual":
        source = "ElementC* c_ptr = reinterpret_cast<ElementC*>(ptrs[3]);\n  Layout lc = ld;"
    else:  # no source: the epilogue never reads C
        source = "ElementC* c_ptr = d;\n  Layout lc = ld;"
    if depthwise:
        workspace = "(size_t(ps.K) * ps.R * ps.S * (ps.C / ps.groups) * sizeof(typename Op::ElementB) + 255) / 256 * 256"
        extra = ", {reinterpret_cast<ElementB*>(workspace), lb}"
    else:
        workspace = "0"
        extra = ""
    abi_text = (_ABI.replace("@@WORKSPACE@@", workspace).replace("@@SLICES@@", slices).replace("@@NCONST@@", str(len(epi.scalars)))
                .replace("@@SOURCE@@", source).replace("@@EXTRA@@", extra))
    core = body + abi_text
    ns = namespace_for(core)
    source_text = (_INCLUDES + (_DEPTHWISE_INCLUDES if depthwise else _GROUPED_INCLUDES)
                   + f"\nnamespace {ns} {{\n" + core.replace("@@NS@@", ns))
    tensors = (AbiTensor(op.x.name, "x", dtype), AbiTensor(op.w.name, "w", dtype),
               AbiTensor(kernel.stores[0].name, "d", epi.d_dtype), *epi.tensors)
    abi = KernelAbi("conv", tensors, CONV_INTS, epi.scalars, spatial_dims=kernel.op.spatial_dims)
    return EmittedKernel(kernel.name, ns, source_text, abi, knobs)
