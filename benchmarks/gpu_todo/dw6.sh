#!/usr/bin/env bash
# Shows, on one H200 in about 3 minutes: the depthwise direct conv on MobileNetV2's, EfficientNet's and builtin 28's
# shapes with MUCUTLASS_DEPTHWISE_SPLIT off (expected ~2.2 / 1.1 / 7 ms: ceil(K/64) CTAs walk every output tile) and
# on (the tiles over ~4 CTAs per SM: should approach the ~32 / 16 / 112 us of DRAM bandwidth, and stay correct),
# beside F.conv2d channels-last / contiguous; and BatchNorm's var_mean over a channels-last [2,192,224,224] by dims
# (0,2,3) (298 us profiled) against over its NHWC rows. -> $OUT/<date>-h200-depthwise.{json,md}, $OUT/dw6.log
# Run from the repository root:   OUT=... bash benchmarks/gpu_todo/dw6.sh
set -uo pipefail
export OUT=${OUT:-/tmp/mucutlass-out}
mkdir -p "$OUT"
source benchmarks/gpu_env.sh || { echo "wheel install failed"; exit 1; }
export MUCUTLASS_CACHE_DIR=$PWD/.cache/mucutlass
mkdir -p "$MUCUTLASS_CACHE_DIR"
timeout 470 python3 benchmarks/bench_depthwise.py --out "$OUT" --jobs 6 2>&1 | tee "$OUT/dw6.log"
exit "${PIPESTATUS[0]}"
