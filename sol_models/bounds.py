"""Speed-of-light bounds: t_SOL = max(FLOPs / peak FLOP/s, bytes / DRAM bandwidth), per math precision.

Tensor-core FLOPs (matmul, conv, attention) run at the precision's peak; the other FLOPs
(elementwise, reductions, norms) run on the fp32 SIMT units, which work alongside the tensor
cores, so the compute time is the larger of the two (for ``f32`` both share the SIMT units and
add up). Bytes are the fused count: the program's inputs, parameters and outputs, once.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

from sol_models.counting import WorkCount
from sol_models.hardware import MATH_MODES, GpuSpec

Bound = Literal["compute", "memory"]


class PrecisionBound(BaseModel):
    precision: str
    peak_tflops: float
    t_compute_us: float
    t_memory_us: float
    t_sol_us: float
    bound: Bound
    ridge_flop_per_byte: float


class SolReport(BaseModel):
    """The speed of light of one piece of work on one GPU, at one math precision (and a table of all)."""

    name: str
    gpu: str
    calibrated: bool
    precision: str
    flops: float
    flops_tensor: float
    flops_other: float
    bytes_fused: float
    bytes_unfused: float
    peak_tflops: float
    dram_bw_gbps: float
    t_compute_us: float
    t_memory_us: float
    t_sol_us: float
    t_sol_unfused_us: float  # the bound if every op went through DRAM (eager PyTorch's traffic)
    bound: Bound
    intensity_flop_per_byte: float
    ridge_flop_per_byte: float
    kernel_count: int
    launch_floor_us: float  # kernel_count x launch latency; reported beside t_SOL, not inside it
    per_precision: dict[str, PrecisionBound] = Field(default_factory=dict)


def _precision_bound(work: WorkCount, gpu: GpuSpec, precision: str, bytes_: float) -> PrecisionBound:
    peak = gpu.peak_flops(precision)
    simt = gpu.peak_flops("f32")
    if precision == "f32":
        t_compute_s = (work.flops_tensor + work.flops_other) / simt
    else:
        t_compute_s = max(work.flops_tensor / peak, work.flops_other / simt)
    t_memory_s = bytes_ / gpu.dram_bw_bytes_per_s
    t_compute_us, t_memory_us = t_compute_s * 1e6, t_memory_s * 1e6
    return PrecisionBound(
        precision=precision,
        peak_tflops=peak / 1e12,
        t_compute_us=t_compute_us,
        t_memory_us=t_memory_us,
        t_sol_us=max(t_compute_us, t_memory_us),
        bound="compute" if t_compute_us >= t_memory_us else "memory",
        ridge_flop_per_byte=peak / gpu.dram_bw_bytes_per_s,
    )


def sol_report(work: WorkCount, gpu: GpuSpec, precision: str = "tf32") -> SolReport:
    """t_SOL of ``work`` on ``gpu`` at ``precision`` ("f32", "tf32", "bf16", "f16", "fp8"), with a
    table over every precision the GPU supports. Raises ValueError for an unsupported precision."""
    if precision not in gpu.peak_tflops:
        raise ValueError(
            f"{gpu.name} has no {precision!r} math; choose one of: "
            + ", ".join(m for m in MATH_MODES if m in gpu.peak_tflops)
        )
    table = {
        p: _precision_bound(work, gpu, p, work.bytes_fused) for p in MATH_MODES if p in gpu.peak_tflops
    }
    chosen = table[precision]
    unfused = _precision_bound(work, gpu, precision, work.bytes_unfused)
    intensity = work.flops / work.bytes_fused if work.bytes_fused > 0 else math.inf
    return SolReport(
        name=work.name,
        gpu=gpu.name,
        calibrated=gpu.calibrated,
        precision=precision,
        flops=work.flops,
        flops_tensor=work.flops_tensor,
        flops_other=work.flops_other,
        bytes_fused=work.bytes_fused,
        bytes_unfused=work.bytes_unfused,
        peak_tflops=chosen.peak_tflops,
        dram_bw_gbps=gpu.dram_bw_gbps,
        t_compute_us=chosen.t_compute_us,
        t_memory_us=chosen.t_memory_us,
        t_sol_us=chosen.t_sol_us,
        t_sol_unfused_us=unfused.t_sol_us,
        bound=chosen.bound,
        intensity_flop_per_byte=intensity,
        ridge_flop_per_byte=chosen.ridge_flop_per_byte,
        kernel_count=work.kernel_count,
        launch_floor_us=work.kernel_count * gpu.launch_latency_us,
        per_precision=table,
    )


def headroom(t_measured_us: float, t_sol_us: float) -> float:
    """t_measured / t_SOL: 1.0 is the speed of light, larger is further from it."""
    if not (t_sol_us > 0 and math.isfinite(t_sol_us)):
        raise ValueError(f"t_sol_us must be a positive finite time, got {t_sol_us}")
    if not (t_measured_us > 0 and math.isfinite(t_measured_us)):
        raise ValueError(f"t_measured_us must be a positive finite time, got {t_measured_us}")
    return t_measured_us / t_sol_us


def stored_bound_us(sol: dict, precision: str, program) -> float | None:
    """t_SOL at ``precision`` of a problem (its ``sol_report`` as a dict, with ``param_bytes``) when a program
    stores the parameters it reads at their declared types: the problem's fused bytes with its parameters'
    counted as the program holds them (``counting.count_program``'s ``param_bytes``, converted once at load),
    never more than the problem's. None where the report lacks what it needs."""
    from sol_models.counting import count_program

    per = (sol.get("per_precision") or {}).get(precision) or {}
    fused, params, bw = sol.get("bytes_fused"), sol.get("param_bytes"), sol.get("dram_bw_gbps")
    if not (per and fused and params is not None and bw):
        return None
    stored = min(float(params), float(count_program(program).param_bytes or 0.0))
    t_memory_us = (float(fused) - float(params) + stored) / (float(bw) * 1e9) * 1e6
    return max(float(per["t_compute_us"]), t_memory_us)
