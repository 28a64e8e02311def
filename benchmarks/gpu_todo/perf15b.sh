#!/usr/bin/env bash
# Should show: the runtime's CUDA graph replay and fused input casts, on and off, on 14 built-in problems (H200):
# every setting correct and bit-identical to the plain run; graph replay faster on the launch-bound smoke problems
# (tiny GEMMs / convs, host time > GPU time) and near-neutral or slower on the large ones (it adds an input copy and
# an output clone per call: the estimate's `graph auto` column should say off there); the fused casts one launch at
# >= 3 TB/s where the torch steps take two (01_gemm_square, 03_gemm_batched, 10_gemm_irregular, 25_conv2d_residual_add,
# builtin-large 01_gemm_4096) and the NCHW -> NHWC + f16 copy (20, 26, builtin-large 12) no slower than torch's.
# Those numbers decide whether MUCUTLASS_CUDA_GRAPH / MUCUTLASS_FUSED_CASTS may default to on (docs/offline.md).
# One command, under 8 minutes on one H200 (16 cores, empty kernel cache): plans ~30 s, ~16 kernels + the fused-cast
# library built in one round (~90 s), measurements ~60 s. Run from the repository root:
#   OUT=/tmp/out bash benchmarks/gpu_todo/perf15b.sh
# Results in $OUT: <date>-h200-runtime.{json,md} and perf15b.log.
set -uo pipefail
OUT=${OUT:-/tmp/mucutlass-out}
mkdir -p "$OUT"
t0=$(date +%s)
log="$OUT/perf15b.log"
say() { echo "== $(date +%T) +$(( $(date +%s) - t0 ))s $*" | tee -a "$log"; }
source benchmarks/gpu_env.sh || { echo "wheel install failed" | tee -a "$log"; exit 1; }
export MUCUTLASS_CACHE_DIR=$PWD/.cache/mucutlass MUCUTLASS_RECORD=$PWD/.cache/record.json
mkdir -p "$MUCUTLASS_CACHE_DIR"
say "bench_runtime"
timeout 420 python3 benchmarks/bench_runtime.py --out "$OUT" --jobs "$(nproc)" --gpu h200 >> "$log" 2>&1
say "bench_runtime exit $?"
tail -n 30 "$log"
