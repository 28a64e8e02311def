#!/usr/bin/env bash
# Sealed calls (evals/judge/sealed.py) on one H200, about 2.5 minutes: honest candidates on a compute-bound 4096 GEMM
# (builtin/01_gemm_square), a memory-bound elementwise problem (benchmarks/harness_problems/large_cheap_relu.py),
# a tiny launch-bound one (smoke/02_linear_relu_tiny) and builtin/11_linear_relu, each profiled twice, then the
# timing cheats of the adversarial set on 11_linear_relu, all through the judge (Harness.profile). Prints per case
# the reported time t, the judge-clocked bound U, K, t / U and the verdict; writes $OUT/sealed13-h200.{json,md}.
# Run from the repository root: OUT=... bash benchmarks/gpu_todo/sealed13.sh
# What it should show: honest rows valid (no timing_tampered), t / U near 1 for the GEMM, above 0.5 for the
# memory-bound problem, any value for the tiny one (beta covers it); the cheats timing_tampered.
set -uo pipefail
OUT=${OUT:-/tmp/mucutlass-out}
mkdir -p "$OUT"
source benchmarks/gpu_env.sh || { echo "wheel install failed"; exit 1; }
timeout 175 python3 benchmarks/bench_sealed.py --out "$OUT" --budget-s 150 2>&1 | tee "$OUT/sealed13.log"
