#!/usr/bin/env bash
# Should show: on one H200, the precision / attribution / thread-rule cases of issue 13 caught for their rule (timed-output precision: precise_unless_captured, tf32_when_captured; attribution: skip_work_when_counted, flops_hidden_from_counter, uncounted_gemm_ops, work_in_thread, fused_addmm_activation, trivial_kernel_torch_gemm as pytorch_only, not timing_tampered) and the honest controls (honest_compiled: torch.compile's idle threads) passing with no hard rule; about 6 minutes.
# Run from the repository root: OUT=... bash benchmarks/gpu_todo/probe13.sh
# Writes $OUT/probe13-gpu.xml (junit) and $OUT/probe13-gpu.log (pytest -rA: every case's verdict line on failure).
set -uo pipefail
OUT=${OUT:-/tmp/mucutlass-out}
mkdir -p "$OUT"
source benchmarks/gpu_env.sh || { echo "wheel install failed"; exit 1; }
export XDG_CACHE_HOME="$OUT/xdg" MUCUTLASS_CACHE_DIR="$OUT/kernels"
cases="precise_first_call or f16_unless_range_probe or precise_unless_captured or tf32_when_captured or bf16_on_reused_buffer"
cases="$cases or skip_work_when_counted or flops_hidden_from_counter or uncounted_gemm_ops or work_in_thread"
cases="$cases or fused_addmm_activation or trivial_kernel_torch_gemm or zeros_when_observed or background_thread"
cases="$cases or honest"
timeout 460 python3 -m pytest -q -rA -p no:cacheprovider -m gpu tests/test_harness_adversarial.py \
    -k "gpu and ($cases)" --junitxml="$OUT/probe13-gpu.xml" 2>&1 | tail -120 | tee "$OUT/probe13-gpu.log"
