"""tf32x3 on the H200: a 4096^3 fp32 GEMM as a tf32x3 kernel (CUTLASS 2.x, OpMultiplyAddFastF32) beside the
TF32 kernel and PyTorch (eager fp32, eager TF32): TFLOP/s (median of CUDA-event timings) and the largest error
against an fp64 reference, relative to KernelBench's strict rule (|out - ref| <= 1e-4 + 1e-4 |ref|).
Writes <out>/split-gemm.json."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from dsl_compiler import build, parse, runtime

SIZE = 4096
PROGRAM = """
input a: f32[{n}, {n}]
input b: f32[{n}, {n}]
kernel mm = gemm(a, b^T) {{
  math = {math}
  store c: f32 = acc
}}
output c
"""


def _time_ms(fn, reps: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _row(name: str, fn, ref: torch.Tensor, n: int) -> dict:
    out = fn()
    err = (out.double() - ref).abs()
    ms = _time_ms(fn)
    return {"name": name, "ms": ms, "tflops": 2 * n**3 / (ms * 1e-3) / 1e12, "max_abs_error": float(err.max()),
            "strict_ratio": float((err / (1e-4 + 1e-4 * ref.abs())).max())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=".")
    ap.add_argument("--size", type=int, default=SIZE)
    args = ap.parse_args()
    n = args.size
    torch.manual_seed(0)
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    ref = a.double() @ b.double().T
    rows = []
    for math_mode in ("tf32x3", "tf32"):
        program, diags = parse(PROGRAM.format(n=n, math=math_mode))
        res = build.build_program(program)
        if not res.ok:
            rows.append({"name": f"mucutlass {math_mode}", "error": "; ".join(d.message for d in res.diagnostics)})
            continue
        module = runtime.load(program, "cutlass", {}, res.artifacts)
        rows.append(_row(f"mucutlass {math_mode}", lambda: module(a, b), ref, n))
    for name, tf32 in (("torch eager fp32", False), ("torch eager TF32", True)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        rows.append(_row(name, lambda: a @ b.T, ref, n))
    torch.backends.cuda.matmul.allow_tf32 = False
    result = {"size": n, "device": torch.cuda.get_device_name(), "rows": rows}
    path = Path(args.out) / "split-gemm.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    for r in rows:
        print(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
