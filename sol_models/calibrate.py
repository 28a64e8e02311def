"""Measure the present GPU's achievable ceilings, for bounds that no real kernel is far from:
copy bandwidth (a large device-to-device copy, read + write counted) and dense matmul rate per
precision (large square GEMMs on random data; fp32 with TF32 off, tf32 with it on, bf16, f16,
fp8 through ``torch._scaled_mm`` where present). Each figure is the median of several runs timed
with CUDA events; a matmul rate is the best median over a few sizes.

The profile is saved as JSON (``hardware/calibrated/<gpu>.json``) and replaces the datasheet's
peaks and bandwidth in ``hardware.get_gpu``."""

from __future__ import annotations

import datetime as _dt
import json
import statistics
from pathlib import Path
from typing import Any, Callable


class CalibrationError(RuntimeError):
    """Calibration cannot run here (no CUDA GPU, say); the message says why."""


def _median_ms(torch: Any, fn: Callable[[], Any], runs: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure_copy_bandwidth_gbps(torch: Any, nbytes: int = 2 << 30, runs: int = 9) -> tuple[float, float]:
    """(GB/s, median ms) of a device-to-device copy of ``nbytes``, counting the read and the write."""
    n = nbytes // 4
    src = torch.rand(n, device="cuda", dtype=torch.float32)  # random data: never zeros
    dst = torch.empty_like(src)
    ms = _median_ms(torch, lambda: dst.copy_(src), runs)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / (ms * 1e-3) / 1e9, ms


def measure_matmul_tflops(torch: Any, precision: str, n: int, runs: int = 7) -> float:
    """Dense n x n x n matmul rate at a precision, TFLOP/s (median of ``runs``)."""
    prev_precision = torch.get_float32_matmul_precision()
    try:
        if precision in ("f32", "tf32"):
            # "highest": true fp32 (TF32 off); "high": TF32 tensor cores allowed
            torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
            a = torch.randn(n, n, device="cuda", dtype=torch.float32)
            b = torch.randn(n, n, device="cuda", dtype=torch.float32)
            fn = lambda: torch.mm(a, b)  # noqa: E731
        elif precision in ("bf16", "f16"):
            dtype = torch.bfloat16 if precision == "bf16" else torch.float16
            a = torch.randn(n, n, device="cuda", dtype=dtype)
            b = torch.randn(n, n, device="cuda", dtype=dtype)
            fn = lambda: torch.mm(a, b)  # noqa: E731
        elif precision == "fp8":
            a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
            b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major B
            one = torch.tensor(1.0, device="cuda")
            fn = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
        else:
            raise ValueError(f"unknown precision {precision!r}")
        ms = _median_ms(torch, fn, runs)
        return 2.0 * n**3 / (ms * 1e-3) / 1e12
    finally:
        torch.set_float32_matmul_precision(prev_precision)
        torch.cuda.empty_cache()


def calibrate(
    gpu_name: str = "h200",
    precisions: tuple[str, ...] = ("f32", "tf32", "bf16", "f16", "fp8"),
    sizes: tuple[int, ...] = (4096, 8192),
    runs: int = 7,
    log: Callable[[str], None] = lambda _msg: None,
) -> dict[str, Any]:
    """Measure the present CUDA GPU and return a profile (see module doc). Raises CalibrationError
    when there is no CUDA GPU."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is a dependency
        raise CalibrationError(f"torch is not importable: {exc}") from None
    if not torch.cuda.is_available():
        raise CalibrationError("calibrate needs a CUDA GPU and none is visible; run it on the GPU machine")
    from sol_models.hardware import canonical_name, get_gpu

    spec = get_gpu(gpu_name, calibrated=False)
    props = torch.cuda.get_device_properties(0)
    log(f"measuring {props.name} as {spec.name}")
    bw_gbps, copy_ms = measure_copy_bandwidth_gbps(torch, runs=max(runs, 5))
    log(f"copy bandwidth {bw_gbps:,.0f} GB/s")
    peaks: dict[str, float] = {}
    detail: dict[str, dict[str, float]] = {}
    errors: dict[str, str] = {}
    for precision in precisions:
        if precision not in spec.peak_tflops:
            continue
        rates: dict[str, float] = {}
        for n in sizes:
            try:
                rates[str(n)] = measure_matmul_tflops(torch, precision, n, runs=runs)
            except Exception as exc:  # fp8 needs a recent torch and sm_89+; keep the datasheet then
                errors[precision] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
                break
        if rates:
            detail[precision] = rates
            peaks[precision] = max(rates.values())
            log(f"{precision}: {peaks[precision]:,.1f} TFLOP/s")
    return {
        "name": canonical_name(spec.name),
        "device_name": props.name,
        "measured_at": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "sm_count": props.multi_processor_count,
        "l2_mb": getattr(props, "L2_cache_size", 0) / 2**20,
        "dram_bw_gbps": bw_gbps,
        "peak_tflops": peaks,
        "detail": {"copy_ms": copy_ms, "copy_bytes_each_way": 2 << 30, "matmul_tflops_by_size": detail,
                   "runs": runs, "errors": errors},
        "method": "median of CUDA-event-timed runs after warm-up; copy counts read + write; matmul rate is "
                  "the best median over sizes; random inputs; f32 with TF32 off, tf32 with TF32 on",
    }


def save_profile(profile: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(profile, indent=2, sort_keys=True) + "\n")
    return path
