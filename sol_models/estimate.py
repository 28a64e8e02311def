"""Config-aware time estimate of a μCUTLASS program on a GPU: good enough to rank kernel
configurations, and the "timing" on machines without a GPU (labelled as an estimate).

Per kernel (a GEMM, or a convolution by its implicit-GEMM view), the model is:

* work units: output tiles ceil(M/tm)·ceil(N/tn) per batch / group, rounded up to whole clusters,
  times split_k; they run in waves over the SMs a cluster shape can fill; stream-K spreads the
  k-iterations evenly instead (no wave quantization, a partial-tile fix-up);
* per unit, the mainloop runs at the precision's achievable peak (ACHIEVABLE_FRACTION of the
  datasheet, or the calibrated rate), less a fixed cost per k-block (small tiles pay it more
  often), less too few pipeline stages (latency not hidden), less accumulator spills (tile too
  large for the schedule's warp groups);
* operand traffic from L2: every tile re-reads its A rows and B columns, M·N·K·(1/tn + 1/tm)
  elements, divided by the cluster's multicast (cluster along M shares B, along N shares A), at an
  L2 bandwidth of L2_BYTES_PER_CLOCK_PER_SM;
* DRAM traffic: operands, epilogue tensors and stores once, plus split-K / stream-K partials;
* epilogue: each tile writes its stores and reads its aux tensors at its SM's share of DRAM
  bandwidth; ping-pong hides most of it behind the other warp group's mainloop, cooperative
  hides part, the non-persistent conv kernel none;
* the mainloop, L2 and DRAM times are combined by a soft maximum (they overlap, imperfectly),
  then the exposed epilogue, the split-K reduction and one launch latency are added.

Torch steps run at the achievable DRAM bandwidth plus a launch. The tile and schedule defaults
follow the CUTLASS emitter's (``auto`` tile: 128x256 cooperative, 128x128 ping-pong or conv).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from dsl_compiler.cutlass.grouped_conv import DEPTHWISE_SPLIT_CTAS_PER_SM, DEPTHWISE_TILES
from sol_models.hardware import GpuSpec

# Fraction of the datasheet peak a well-configured large GEMM reaches (H200: tf32 357 of 495
# TFLOP/s, bf16 762 of 989 at 4096^3, 128x256 cooperative, cluster 2x1). A calibrated profile
# already holds reached rates, so its fraction is near 1.
# tf32x3 (of its own peak, a third of TF32's) is not measured yet: CUTLASS 2.x mma.sync kernels without TMA reach
# about two thirds of what wgmma does on Hopper, and the split's conversions take issue slots of their own.
ACHIEVABLE_FRACTION = {"f32": 0.80, "tf32x3": 0.55, "tf32": 0.80, "bf16": 0.83, "f16": 0.83, "fp8": 0.80}
CALIBRATED_FRACTION = 1.0
DRAM_FRACTION = 0.9  # achievable copy bandwidth vs datasheet (H200: 4.3 of 4.8 TB/s)
L2_BYTES_PER_CLOCK_PER_SM = 40.0  # effective L2 -> SM operand bandwidth (TMA loads)
K_BLOCK_OVERHEAD_US = 0.02  # barrier, TMA issue and pipeline bookkeeping per k-block
SOFTMAX_POWER = 4.0  # how sharply overlapping times combine: 1 = sum, infinity = max
EPILOGUE_EXPOSED = {"cooperative": 0.7, "pingpong": 0.1, "conv": 1.0}
STAGE_EFFICIENCY = {1: 0.5, 2: 0.8, 3: 0.93}  # 4 or more: 1.0
EPILOGUE_SMEM_KB = 32.0  # shared memory the TMA epilogue keeps (StageCountAutoCarveout)
MAX_ACC_REGS_PER_THREAD = 128  # above this, accumulators spill (255 registers per thread in all)
SPILL_EFFICIENCY = 0.55


class KernelEstimate(BaseModel):
    name: str
    op: str
    dims: tuple[int, int, int, int]  # l, m, n, k
    math: str
    tile: tuple[int, int, int]
    cluster: tuple[int, int, int]
    schedule: str
    stages: int
    decomposition: str
    split_k: int
    tiles: int  # output tiles (cluster-rounded), before split_k
    units: int  # work units scheduled over the SMs
    waves: float
    wave_efficiency: float  # useful fraction of the SM-time the waves occupy
    padding_waste: float  # fraction of computed MACs that fall outside the problem (tile padding)
    t_mainloop_us: float
    t_l2_us: float
    t_dram_us: float
    t_epilogue_us: float
    t_reduction_us: float
    t_launch_us: float
    t_us: float
    achieved_tflops: float
    feasible: bool = True
    reasons: list[str] = Field(default_factory=list)


class StepEstimate(BaseModel):
    name: str
    op: str
    bytes_moved: float
    t_us: float
    reasons: list[str] = Field(default_factory=list)


class ProgramEstimate(BaseModel):
    """The estimated time of a whole program: kernels plus torch steps, in order."""

    gpu: str
    calibrated: bool
    t_us: float
    timing_source: Literal["estimate"] = "estimate"
    kernels: list[KernelEstimate] = Field(default_factory=list)
    torch_steps: list[StepEstimate] = Field(default_factory=list)
    fused_casts: int = 0  # input copy steps (casts, layout copies, pads) priced as one launch


def _softmax(values: list[float], p: float = SOFTMAX_POWER) -> float:
    top = max(values)
    if top <= 0:
        return 0.0
    return top * sum((v / top) ** p for v in values) ** (1.0 / p)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _fraction(gpu: GpuSpec, math_mode: str) -> float:
    return CALIBRATED_FRACTION if gpu.calibrated else ACHIEVABLE_FRACTION.get(math_mode, 0.75)


def _dram_bw(gpu: GpuSpec) -> float:
    return gpu.dram_bw_bytes_per_s * (1.0 if gpu.calibrated else DRAM_FRACTION)


def default_tile(op_kind: str, operand_bytes: int, schedule: str) -> tuple[int, int, int]:
    """The tile ``auto`` resolves to (the CUTLASS emitter's rule)."""
    k = 32 if operand_bytes == 4 else 64
    if op_kind.startswith("conv"):
        return (128, 128, k)
    return (128, 256, k) if schedule != "pingpong" else (128, 128, k)


def auto_stages(tile: tuple[int, int, int], operand_bytes: int, gpu: GpuSpec) -> int:
    """Stages that fit in shared memory after the epilogue's carve-out."""
    stage_bytes = (tile[0] + tile[1]) * tile[2] * operand_bytes
    return max(1, int((gpu.smem_per_sm_kb - EPILOGUE_SMEM_KB) * 1024 // stage_bytes))


@dataclass(frozen=True)
class _Tiling:
    """How one kernel falls into CTA tiles, pipeline stages and work units on the GPU."""

    tile: tuple[int, int, int]
    schedule: str  # cooperative | pingpong | conv
    cluster_m: int
    cluster_n: int
    sms: int  # SMs in whole clusters
    stages: int
    stage_eff: float
    feasible: bool
    tiles_mn: int
    useful_macs: int
    split: int
    k_blocks: int
    units: int
    computed_macs: int
    padding_waste: float


def _tiling(op: str, dims: tuple[int, int, int, int], config: Any, gpu: GpuSpec, es: int, groups: int,
            group_sizes: tuple[int, ...] | None, reasons: list[str]) -> _Tiling:
    l, m, n, k = dims
    schedule = config.schedule
    tile = config.tile or default_tile(op, es, schedule)
    tm, tn, tk = tile
    if op.startswith("conv"):
        schedule = "conv"
    elif schedule == "auto":
        schedule = "cooperative" if tm >= 128 else "pingpong"
    cm, cn = config.cluster[0], config.cluster[1]
    csize = max(1, cm * cn * config.cluster[2])
    sms = max(csize, (gpu.sm_count // csize) * csize)
    feasible = True

    # Shared memory and stages.
    stage_bytes = (tm + tn) * tk * es
    fit = auto_stages(tile, es, gpu)
    stages = fit if config.stages == "auto" else int(config.stages)
    if stages * stage_bytes > gpu.smem_per_sm_kb * 1024:
        feasible = False
        reasons.append(f"{stages} stages of {stage_bytes // 1024} KB exceed {gpu.smem_per_sm_kb:g} KB of shared memory")
    stage_eff = STAGE_EFFICIENCY.get(min(stages, 4), 1.0)
    if stage_eff < 1.0:
        reasons.append(f"{stages} pipeline stage(s) hide less memory latency (x{stage_eff:.2f})")

    # Tiles, rounded up to whole clusters, and the work units they make.
    n_per_group = max(1, n // max(groups, 1))
    tiles_n = _ceil_div(n_per_group, tn)
    if group_sizes:
        tiles_mn = sum(_ceil_div(_ceil_div(g, tm), cm) * cm * _ceil_div(tiles_n, cn) * cn for g in group_sizes if g > 0)
        useful_macs = sum(group_sizes) * n * k
    else:
        tiles_m = _ceil_div(_ceil_div(m, tm), cm) * cm
        tiles_mn = tiles_m * _ceil_div(tiles_n, cn) * cn * max(groups, 1) * l
        useful_macs = l * m * n * k
    split = max(1, config.split_k) if config.decomposition == "split_k" else 1
    k_per_unit = _ceil_div(_ceil_div(k, split), tk) * tk
    computed_macs = tiles_mn * tm * tn * k_per_unit * split
    padding_waste = max(0.0, 1.0 - useful_macs / computed_macs) if computed_macs else 0.0
    if padding_waste > 0.2:
        reasons.append(f"{padding_waste:.0%} of the computed tile area is padding (tile {tm}x{tn} over M={m}, N={n_per_group})")
    return _Tiling(tile, schedule, cm, cn, sms, stages, stage_eff, feasible, tiles_mn, useful_macs, split,
                   k_per_unit // tk, tiles_mn * split, computed_macs, padding_waste)


def _mainloop(t: _Tiling, math_mode: str, config: Any, gpu: GpuSpec, mainloop_factor: float, mainloop_reason: str,
              reasons: list[str]) -> tuple[float, float, float, int, bool]:
    """(mainloop time in us, waves, wave efficiency, ways the K sum is split, feasible)."""
    tm, tn, tk = t.tile
    schedule, units, sms, k_blocks, feasible = t.schedule, t.units, t.sms, t.k_blocks, t.feasible
    peak_per_sm = gpu.peak_flops(math_mode) * _fraction(gpu, math_mode) / gpu.sm_count * t.stage_eff * mainloop_factor
    if mainloop_factor < 1.0:
        reasons.append(f"{mainloop_reason} (x{mainloop_factor:.2f})")
    threads = 256 if schedule == "cooperative" else 128
    acc_regs = tm * tn // threads
    if acc_regs > MAX_ACC_REGS_PER_THREAD:
        peak_per_sm *= SPILL_EFFICIENCY
        reasons.append(f"{acc_regs} accumulator registers per thread spill ({schedule} holds a {tm}x{tn} tile in {threads} threads)")
    if schedule == "cooperative" and tm < 128:
        peak_per_sm *= 0.5
        feasible = False
        reasons.append("cooperative splits tile M over two warp groups: tile M < 128 leaves one idle")
    t_kblock_us = 2.0 * tm * tn * tk / peak_per_sm * 1e6
    t_unit_us = k_blocks * (t_kblock_us + K_BLOCK_OVERHEAD_US)
    if config.decomposition == "stream_k":
        waves = units * k_blocks / (sms * k_blocks) if k_blocks else 0.0
        t_mainloop_us = units * t_unit_us / sms
        wave_eff = 1.0
        fixup_splits = max(1, _ceil_div(sms, units)) if units < sms else 1
        reasons.append("stream-K: k-iterations spread evenly over the SMs")
    else:
        waves = float(_ceil_div(units, sms))
        t_mainloop_us = waves * t_unit_us
        wave_eff = units / (waves * sms) if waves else 0.0
        fixup_splits = t.split
        if wave_eff < 0.7:
            reasons.append(f"{units} work units on {sms} SMs: {waves:.0f} wave(s) at {wave_eff:.0%} occupancy")
    return t_mainloop_us, waves, wave_eff, fixup_splits, feasible


def estimate_kernel(
    *,
    name: str,
    op: str,
    dims: tuple[int, int, int, int],
    math_mode: str,
    config: Any,
    gpu: GpuSpec,
    operand_bytes_per_element: int,
    dram_bytes: float,
    epilogue_bytes_per_output: float,
    groups: int = 1,
    group_sizes: tuple[int, ...] | None = None,
    mainloop_factor: float = 1.0,
    mainloop_reason: str = "",
) -> KernelEstimate:
    """Estimate one kernel from its GEMM view and configuration (an ``ir.KernelConfig``).

    ``dram_bytes``: operands, epilogue tensors and stores, once. ``epilogue_bytes_per_output``:
    bytes the epilogue moves per output element (stores and full-size aux reads). ``groups``: a
    grouped convolution's groups (N and the tiles are per group)."""
    l, m, n, k = dims
    reasons: list[str] = []
    is_conv = op.startswith("conv")
    if is_conv and groups > 1 and n // groups == 1:
        return _estimate_depthwise(name, op, dims, math_mode, config, gpu, dram_bytes)
    es = operand_bytes_per_element
    t = _tiling(op, dims, config, gpu, es, groups, group_sizes, reasons)
    (tm, tn, tk), schedule, cm, cn, sms = t.tile, t.schedule, t.cluster_m, t.cluster_n, t.sms
    t_mainloop_us, waves, wave_eff, fixup_splits, feasible = _mainloop(t, math_mode, config, gpu, mainloop_factor,
                                                                       mainloop_reason, reasons)

    # Operand traffic through L2 (multicast within a cluster), and DRAM.
    l2_bw = L2_BYTES_PER_CLOCK_PER_SM * gpu.sm_count * gpu.boost_clock_mhz * 1e6
    a_reads = t.computed_macs / tn * es / max(cn, 1)
    b_reads = t.computed_macs / tm * es / max(cm, 1)
    t_l2_us = (a_reads + b_reads) / l2_bw * 1e6
    partial_bytes = 0.0
    if fixup_splits > 1:
        partial_bytes = 2.0 * fixup_splits * l * m * n * 4  # fp32 partials written and read back
    dram_bw = _dram_bw(gpu)
    t_dram_us = (dram_bytes + partial_bytes) / dram_bw * 1e6
    t_reduction_us = partial_bytes / dram_bw * 1e6 if fixup_splits > 1 else 0.0
    if fixup_splits > 1:
        reasons.append(f"{fixup_splits}-way K reduction moves {partial_bytes / 1e6:.1f} MB of fp32 partials")

    # Epilogue per tile at its SM's share of DRAM bandwidth; how much of it is hidden depends on the schedule.
    tile_epilogue_bytes = tm * tn * epilogue_bytes_per_output
    t_epi_tile_us = tile_epilogue_bytes / (dram_bw / sms) * 1e6
    epi_waves = waves if config.decomposition != "stream_k" else _ceil_div(t.tiles_mn, sms)
    t_epilogue_us = epi_waves * t_epi_tile_us * EPILOGUE_EXPOSED[schedule]

    t_overlapped = _softmax([t_mainloop_us, t_l2_us, t_dram_us])
    if t_l2_us > t_mainloop_us:
        reasons.append(f"operand reloads from L2 ({(a_reads + b_reads) / 1e9:.2f} GB) outweigh the math: use a larger tile or a cluster")
    if t_dram_us > t_mainloop_us:
        reasons.append("memory-bound: DRAM traffic exceeds the math")
    t_launch_us = gpu.launch_latency_us
    t_us = t_overlapped + t_epilogue_us + t_reduction_us + t_launch_us
    if not feasible:
        reasons.append("infeasible configuration: ranked last")
    flops = 2.0 * t.useful_macs
    return KernelEstimate(
        name=name, op=op, dims=(l, m, n, k), math=math_mode, tile=(tm, tn, tk),
        cluster=tuple(config.cluster), schedule=schedule, stages=t.stages,
        decomposition=config.decomposition, split_k=t.split, tiles=t.tiles_mn, units=t.units,
        waves=waves, wave_efficiency=wave_eff, padding_waste=t.padding_waste,
        t_mainloop_us=t_mainloop_us, t_l2_us=t_l2_us, t_dram_us=t_dram_us,
        t_epilogue_us=t_epilogue_us, t_reduction_us=t_reduction_us, t_launch_us=t_launch_us,
        t_us=t_us if feasible else math.inf,
        achieved_tflops=flops / (t_us * 1e-6) / 1e12 if t_us > 0 else 0.0,
        feasible=feasible, reasons=reasons,
    )


# A depthwise conv (one output channel per group) runs as CUTLASS's direct SIMT kernel (cutlass.grouped_conv). Its grid
# is (1, ceil(K / groups per CTA), split_k_slices): DepthwiseDirect2dConvIdentityThreadblockSwizzle puts the N*P*Q
# output tiles on split_k_slices, which the emitter leaves at 1 unless MUCUTLASS_DEPTHWISE_SPLIT = on, so 3-4 CTAs
# each walk every 8x8 output tile of their 64 channels in turn. Measured on an H200 (fp32, 3x3, stride 1): the step
# profiles of 2026-12-01 (models 11_mobilenetv2 [2,192,224,224]: 2213 and 2430 us, 3 CTAs; 12_efficientnet
# [4,192,112,112]: 1098 us, and 2692 us with a SiLU epilogue, 3 CTAs) and the offline run of 2026-11-30
# (builtin 28 [16,256,128,128]: 6955 us, 4 CTAs): 43-53 GFLOP/s per CTA (2*R*S FLOP per output), 65-77 GB/s in all.
DEPTHWISE_DIRECT_FLOPS_PER_S_PER_CTA = 47e9  # FLOP/s one CTA of the direct kernel sustains, fitted to the above
# the emitter's CTA tiles (output rows, cols, channels; the widest that K fills) and, with the split, the CTAs per
# SM its grid is sized for
DEPTHWISE_GROUPS_PER_CTA = tuple(c for r, q, c in DEPTHWISE_TILES if (r, q) == DEPTHWISE_TILES[0][:2])  # 64, 32, 16
DEPTHWISE_TILE_OUTPUTS = DEPTHWISE_TILES[0][0] * DEPTHWISE_TILES[0][1]  # output pixels of a CTA tile (8x8)
# With the split the kernel is memory-bound like any streaming kernel (unmeasured): this share of the fp32 peak
DEPTHWISE_SIMT_EFFICIENCY = 0.5


def _setting_or_off(name: str) -> str:
    try:
        return _setting(name)
    except ValueError:  # a bad value is reported where the setting is used (the build); here: the default
        return "off"


def _estimate_depthwise(name: str, op: str, dims, math_mode: str, config: Any, gpu: GpuSpec, dram_bytes: float) -> KernelEstimate:
    l, m, n, k = dims
    flops = 2.0 * l * m * n * k
    groups_per_cta = next((g for g in DEPTHWISE_GROUPS_PER_CTA if n >= g), DEPTHWISE_GROUPS_PER_CTA[-1])
    channel_blocks = -(-n // groups_per_cta)
    tiles = l * -(-m // DEPTHWISE_TILE_OUTPUTS)
    split = _setting_or_off("MUCUTLASS_DEPTHWISE_SPLIT") == "on"
    if split:
        slices = max(1, min(tiles, -(-DEPTHWISE_SPLIT_CTAS_PER_SM * gpu.sm_count // channel_blocks), 65535))
        ctas = channel_blocks * slices
        t_math_us = flops / (gpu.peak_flops("f32") * DEPTHWISE_SIMT_EFFICIENCY * min(1.0, ctas / gpu.sm_count)) * 1e6
        how = (f"depthwise: the direct SIMT kernel, output tiles split over {ctas} CTAs (MUCUTLASS_DEPTHWISE_SPLIT = on; "
               "its rate is unmeasured: estimated as a streaming kernel)")
    else:
        ctas = channel_blocks
        t_math_us = flops / (ctas * DEPTHWISE_DIRECT_FLOPS_PER_S_PER_CTA) * 1e6
        how = (f"depthwise: the direct SIMT kernel on {ctas} CTA(s) (one per {groups_per_cta} channels, each walking "
               f"all {tiles} output tiles) at the measured {DEPTHWISE_DIRECT_FLOPS_PER_S_PER_CTA / 1e9:.0f} GFLOP/s per CTA "
               "(H200, 2026-12-01)")
    t_dram_us = dram_bytes / _dram_bw(gpu) * 1e6
    t_launch_us = 2 * gpu.launch_latency_us  # CUTLASS re-lays out the filter in a launch of its own every call
    t_us = _softmax([t_math_us, t_dram_us]) + t_launch_us
    reasons = [how, "memory-bound: DRAM traffic exceeds the math" if t_dram_us >= t_math_us
               else f"bound by the kernel's rate ({ctas} CTAs), not DRAM"]
    return KernelEstimate(
        name=name, op=op, dims=(l, m, n, k), math=math_mode, tile=tuple(config.tile or (0, 0, 0)),
        cluster=tuple(config.cluster), schedule="direct", stages=0, decomposition=config.decomposition, split_k=1,
        tiles=tiles * channel_blocks, units=ctas, waves=1.0, wave_efficiency=min(1.0, ctas / gpu.sm_count),
        padding_waste=0.0, t_mainloop_us=t_math_us, t_l2_us=0.0, t_dram_us=t_dram_us, t_epilogue_us=0.0,
        t_reduction_us=0.0, t_launch_us=t_launch_us, t_us=t_us,
        achieved_tflops=flops / (t_us * 1e-6) / 1e12 if t_us > 0 else 0.0, feasible=True, reasons=reasons,
    )


# A CTA streams at most this share of an SM's bandwidth; several per SM keep enough loads in flight.
ROW_CTAS_PER_SM_FOR_FULL_BW = 4


def estimate_row_kernel(kernel: Any, types: dict[str, Any], dram_bytes: float, flops: float, gpu: GpuSpec) -> KernelEstimate:
    """A row kernel (reduction, softmax, norm, scan) is memory-bound: its bytes over the DRAM bandwidth it reaches. The
    knobs set how much of it: narrow vectors issue more loads per byte, a CTA on a row shorter than its threads
    idles the rest, too few CTAs leave SMs without loads in flight; a split adds the combining launch."""
    from dsl_compiler import row_ops
    from dsl_compiler.ir import ELEMENT_BYTES

    tx = types[kernel.op.x.name]
    plan = row_ops.plan(kernel, tuple(tx.shape), tx.dtype, gpu.sm_count)
    es = ELEMENT_BYTES[tx.dtype]
    if row_ops.is_pool(kernel.op):  # a thread per output element, scalar loads
        outs = math.prod(row_ops.output_shape(kernel.op, tuple(tx.shape)))
        busy = 1.0
        ctas = -(-outs // row_ops.THREADS)
    elif plan.inner == 1:
        lanes = (row_ops.THREADS if plan.rows_per_block == 1 else 32) * plan.vector
        busy = min(1.0, plan.rows / plan.split / lanes)  # threads with elements to load
        ctas = -(-plan.outer // plan.rows_per_block) * plan.split
    else:
        busy = min(1.0, plan.inner / plan.vector / 32)  # a warp's columns
        ctas = -(-plan.segments // (row_ops.THREADS * plan.vector))
    fill = min(1.0, ctas / (gpu.sm_count * ROW_CTAS_PER_SM_FOR_FULL_BW))
    width = 0.75 + 0.25 * min(1.0, plan.vector * es / 16)  # 16-byte loads reach the bandwidth, scalar ones 3/4
    efficiency = max(1e-3, busy * fill * width)
    t_dram_us = dram_bytes / (_dram_bw(gpu) * efficiency) * 1e6
    t_launch_us = gpu.launch_latency_us * (2 if plan.split > 1 else 1)
    t_us = t_dram_us + t_launch_us
    reasons = [f"memory-bound row kernel: {dram_bytes / 1e6:.3g} MB at {efficiency:.0%} of DRAM bandwidth "
               + ("(a pool: a thread per output element)" if row_ops.is_pool(kernel.op) else
                  f"(vector {plan.vector}, rows_per_block {plan.rows_per_block}, passes {plan.passes}, split {plan.split})")]
    return KernelEstimate(
        name=kernel.name, op=kernel.op.fn, dims=(1, plan.outer, plan.rows, plan.inner), math="f32", tile=(0, 0, 0),
        cluster=(1, 1, 1), schedule="row", stages=plan.passes, decomposition="data_parallel", split_k=plan.split,
        tiles=plan.segments, units=ctas, waves=max(1.0, ctas / gpu.sm_count), wave_efficiency=fill, padding_waste=0.0,
        t_mainloop_us=0.0, t_l2_us=0.0, t_dram_us=t_dram_us, t_epilogue_us=0.0, t_reduction_us=0.0,
        t_launch_us=t_launch_us, t_us=t_us, achieved_tflops=flops / (t_us * 1e-6) / 1e12 if t_us > 0 else 0.0,
        feasible=True, reasons=reasons,
    )


def best_row_config(program: Any, kernel: Any, gpu: GpuSpec) -> Any:
    """The legal knobs (``row_checks``) of a row kernel with the lowest estimate: what the offline tier writes."""
    import itertools

    from dsl_compiler import ir, row_ops, shapes
    from dsl_compiler.row_checks import check_row_kernel
    from sol_models.counting import row_traffic

    if row_ops.is_pool(kernel.op):
        return kernel.config  # a pool has no knobs
    types = shapes.infer(program, upto=kernel)
    best, best_t = kernel.config, float("inf")
    passes = (None,) if row_ops.is_reduction(kernel.op) or row_ops.is_scan(kernel.op) else (1, 2)
    for vector, rpb, npass, split in itertools.product(row_ops.VECTORS, row_ops.ROWS_PER_BLOCK, passes, (1, 4, 16, 64)):
        config = ir.RowConfig(vector=vector, rows_per_block=rpb, passes=npass, split=split)
        candidate = kernel.model_copy(update={"config": config})
        diags, _ = check_row_kernel(candidate, types)
        if diags:
            continue
        traffic = row_traffic(candidate, types)
        t = estimate_row_kernel(candidate, types, traffic.bytes_read + traffic.bytes_written, traffic.flops_other, gpu).t_us
        if t < best_t - 1e-9:
            best, best_t = config, t
    return best


def estimate_program(program: Any, gpu: GpuSpec, fused_casts: bool | None = None) -> ProgramEstimate:
    """Estimated time of a μCUTLASS program (an ``ir.Program``) on ``gpu``: kernels by the
    config-aware model above, torch steps at memory bandwidth. With ``fused_casts`` (default: the
    ``MUCUTLASS_FUSED_CASTS`` setting) the input casts the runtime fuses (``dsl_compiler.fused_cast``)
    share one launch. Raises counting.ProgramCountError when the program's shapes cannot be inferred."""
    from dsl_compiler import fused_cast, ir
    from dsl_compiler.precision import effective_math
    from dsl_compiler.ir import ELEMENT_BYTES

    from sol_models.counting import program_traffic

    steps, types = program_traffic(program)
    if fused_casts is None:
        fused_casts = _setting("MUCUTLASS_FUSED_CASTS") == "on"
    jobs = fused_cast.plan_input_casts(program) if fused_casts else ()
    if sum(len(j.steps) for j in jobs) < 2:
        jobs = ()  # one cast is one launch either way
    fused = {i for j in jobs for i in j.steps}
    # a job reads its source and writes its result once (a cast then a pad: no intermediate copy)
    job_bytes = {j.steps[0]: ELEMENT_BYTES[types[j.src].dtype] * types[j.src].numel
                 + ELEMENT_BYTES[types[j.dst].dtype] * types[j.dst].numel for j in jobs}
    by_name = {s.name: s for s in steps if s.kind == "kernel"}
    kernels: list[KernelEstimate] = []
    torch_rows: list[StepEstimate] = []
    torch_iter = iter([s for s in steps if s.kind == "torch"])
    first_fused = min(fused, default=-1)
    rows = {s.name: s for s in steps if s.kind == "row"}
    for index, step in enumerate(program.steps):
        if isinstance(step, ir.RowKernel):
            kernels.append(estimate_row_kernel(step, types, rows[step.name].bytes_read + rows[step.name].bytes_written,
                                               rows[step.name].flops_other, gpu))
        elif isinstance(step, ir.Kernel):
            traffic = by_name[step.name]
            math_mode = effective_math(program, step, types)
            op = step.op
            a_name = op.x.name if isinstance(op, ir.ConvOp) else op.a.name
            es = ELEMENT_BYTES[types[a_name].dtype]  # operands move in their storage type
            l, m, n, k = traffic.dims
            out_elems = (sum(op.group_sizes) if isinstance(op, ir.GroupedGemmOp) else l * m) * n
            full_aux = sum(
                ELEMENT_BYTES[types[name].dtype] * types[name].numel
                for name in _full_aux(step) if name in types
            )
            epi_per_output = (traffic.store_bytes + full_aux) / out_elems if out_elems else 0.0
            kernels.append(estimate_kernel(
                name=step.name, op=traffic.op, dims=traffic.dims, math_mode=math_mode,
                config=step.config, gpu=gpu, operand_bytes_per_element=es,
                dram_bytes=traffic.bytes_read + traffic.bytes_written,
                epilogue_bytes_per_output=epi_per_output,
                groups=op.groups if isinstance(op, ir.ConvOp) else 1,
                group_sizes=op.group_sizes if isinstance(op, ir.GroupedGemmOp) else None,
                **_register_sourced_tf32(op, math_mode),
            ))
        else:
            traffic = next(torch_iter)
            moved = traffic.bytes_read + traffic.bytes_written
            t = 0.0 if traffic.launches == 0 else gpu.launch_latency_us + moved / _dram_bw(gpu) * 1e6
            reasons = ["torch step at DRAM bandwidth"] if t else ["metadata only: no copy, no launch"]
            if index in fused:  # one launch moves every job's bytes, charged to each job's first step
                moved = job_bytes.get(index, 0.0)
                t = moved / _dram_bw(gpu) * 1e6 + (gpu.launch_latency_us if index == first_fused else 0.0)
                reasons = [f"one of {len(fused)} input copy steps fused into one launch"]
            torch_rows.append(StepEstimate(name=traffic.name, op=traffic.op, bytes_moved=moved, t_us=t, reasons=reasons))
    total = sum(k.t_us for k in kernels) + sum(s.t_us for s in torch_rows)
    return ProgramEstimate(gpu=gpu.name, calibrated=gpu.calibrated, t_us=total, kernels=kernels, torch_steps=torch_rows,
                           fused_casts=len(fused))


def _setting(name: str) -> str:
    from dsl_compiler.run_settings import runtime_setting

    return runtime_setting(name)


# Host time of one eager call of a program: Python, torch's dispatcher and the ctypes call of each step run on the
# CPU while the GPU works; where they take longer than the GPU, the GPU waits between launches (the program is
# launch-bound) and a CUDA graph replay removes that wait. Fitted to the H200 run of benchmarks/bench_runtime.py
# (benchmarks/results/2026-12-01-h200-runtime.md): one kernel's program 37-40 us a call eager, two kernels' 69-73,
# a kernel and a channels-last cast 105; graph replays of those 29-35 us. With these the `auto` decision matches the
# measured winner on 13 of its 14 programs (the exception: a tiny bmm + scale, 57 us replayed vs 38 eager).
HOST_US_PER_CALL = 7.0  # binding inputs and params, the module call
HOST_US_PER_KERNEL = 33.0  # call plan, pointers, output allocation, the ctypes launch
HOST_US_PER_TORCH_STEP = 25.0  # a whitelisted PyTorch function through torch_steps.run (a cast, a re-layout)
HOST_US_GRAPH_REPLAY = 11.0  # the signature check and cudaGraphLaunch
HOST_US_PER_COPY = 4.0  # one copy_ / clone (inputs into the graph's buffers, outputs out of them)
GRAPH_MIN_GAIN = 0.9  # capture only when the graph's estimate is under this share of the eager one


class GraphEstimate(BaseModel):
    """Eager calls against CUDA-graph replays of one program (``dsl_compiler.cutlass_runtime.ProgramGraphs``)."""

    t_gpu_us: float  # the program's GPU time (ProgramEstimate.t_us)
    t_host_us: float  # host time of one eager call
    t_eager_us: float  # max(GPU, host): whichever the other waits for
    t_copies_us: float  # GPU time of the per-call input copies and output clones a replay adds
    t_graph_us: float
    launches: int
    launch_bound: bool  # host time over GPU time
    pays: bool  # t_graph_us < GRAPH_MIN_GAIN * t_eager_us
    reason: str


def graph_estimate(program: Any, estimate: ProgramEstimate, gpu: GpuSpec) -> GraphEstimate:
    """Whether replaying ``program`` from a CUDA graph beats eager calls, by the estimate and the host costs above.
    A replay adds a copy of every input into the graph's buffers and a clone of every output (an output must be
    new memory each call); it pays where the host time of the eager steps exceeds the GPU's."""
    from dsl_compiler import shapes
    from dsl_compiler.ir import ELEMENT_BYTES

    types = shapes.infer(program)
    kernels = len(program.kernels)
    torch_launches = sum(1 for s in estimate.torch_steps if s.t_us > 0)
    if estimate.fused_casts:
        torch_launches -= estimate.fused_casts - 1
    host_us = HOST_US_PER_CALL + kernels * HOST_US_PER_KERNEL + (len(program.steps) - kernels) * HOST_US_PER_TORCH_STEP
    in_bytes = sum(types[d.name].numel * ELEMENT_BYTES[d.dtype] for d in program.inputs)
    out_bytes = sum(types[name].numel * ELEMENT_BYTES[types[name].dtype] for name in program.outputs)
    copies = len(program.inputs) + len(program.outputs)
    t_copies_us = 2 * (in_bytes + out_bytes) / _dram_bw(gpu) * 1e6 + copies * gpu.launch_latency_us
    t_eager_us = max(estimate.t_us, host_us)
    t_graph_us = max(estimate.t_us + t_copies_us, HOST_US_PER_CALL + HOST_US_GRAPH_REPLAY + copies * HOST_US_PER_COPY)
    pays = t_graph_us < GRAPH_MIN_GAIN * t_eager_us
    reason = (f"host {host_us:.0f} us for {kernels + torch_launches} launches vs GPU {estimate.t_us:.0f} us: "
              f"graph {t_graph_us:.0f} us (copies {t_copies_us:.0f}) vs eager {t_eager_us:.0f} us")
    return GraphEstimate(t_gpu_us=estimate.t_us, t_host_us=host_us, t_eager_us=t_eager_us, t_copies_us=t_copies_us,
                         t_graph_us=t_graph_us, launches=kernels + torch_launches, launch_bound=host_us > estimate.t_us,
                         pays=pays, reason=reason)


def runtime_options(program: Any, gpu: GpuSpec | str = "h200", cuda_graph: str | None = None,
                    fused_casts: str | None = None):
    """The ``dsl_compiler.runtime.RuntimeOptions`` of ``program`` from its settings (default: the environment's
    ``MUCUTLASS_CUDA_GRAPH`` and ``MUCUTLASS_FUSED_CASTS``): ``on`` / ``off`` as said, a CUDA graph on ``auto``
    where ``graph_estimate`` says it pays. A program whose shapes cannot be counted runs eagerly."""
    from dsl_compiler.run_settings import RUNTIME_SETTINGS, RuntimeOptions

    from sol_models.counting import ProgramCountError
    from sol_models.hardware import get_gpu

    cuda_graph = cuda_graph or _setting("MUCUTLASS_CUDA_GRAPH")
    fused_casts = fused_casts or _setting("MUCUTLASS_FUSED_CASTS")
    for name, value in (("MUCUTLASS_CUDA_GRAPH", cuda_graph), ("MUCUTLASS_FUSED_CASTS", fused_casts)):
        if value not in RUNTIME_SETTINGS[name]:
            raise ValueError(f"{name}={value!r}: use one of {', '.join(RUNTIME_SETTINGS[name])}")
    fused = fused_casts == "on"
    if cuda_graph != "auto":
        return RuntimeOptions(cuda_graph=cuda_graph == "on", fused_casts=fused, reason=f"cuda graph {cuda_graph} (setting)")
    spec = get_gpu(gpu) if isinstance(gpu, str) else gpu
    try:
        decision = graph_estimate(program, estimate_program(program, spec, fused_casts=fused), spec)
    except (ProgramCountError, ValueError) as exc:
        return RuntimeOptions(cuda_graph=False, fused_casts=fused, reason=f"cuda graph off: no estimate ({exc})")
    return RuntimeOptions(cuda_graph=decision.pays, fused_casts=fused,
                          reason=f"cuda graph {'on' if decision.pays else 'off'} (auto): {decision.reason}")


# tf32 operands that are not K-major go through CUTLASS's register-sourced mainloop (A through registers,
# B transposed in shared memory, or A and B swapped). Measured on the H200, 4096^3 + bias + ReLU, 128x256x32,
# cluster 2x1: 0.594 ms with B stored [K, N] against 0.407 ms K-major (2026-11-30).
REGISTER_SOURCED_TF32_FACTOR = 0.407 / 0.594


def _register_sourced_tf32(op: Any, math_mode: str) -> dict:
    from dsl_compiler import ir

    if math_mode != "tf32" or not isinstance(op, ir.GemmOp) or (not op.a.transpose and op.b.transpose):
        return {}
    return {"mainloop_factor": REGISTER_SOURCED_TF32_FACTOR,
            "mainloop_reason": "tf32 operand not K-major: register-sourced mainloop"}


def _full_aux(kernel: Any) -> set[str]:
    """Epilogue tensors read at full output size (residuals), which cost per-tile traffic."""
    from dsl_compiler.walk import epilogue_refs

    return {ref.name for ref in epilogue_refs(kernel) if ref.index == "full"}
