#!/bin/bash
# The CUTLASS backend's whole GPU check, in one command on the H200 machine:
#   1. build the GPU test matrix and the benchmark kernels in parallel (one nvcc per core), cold;
#   2. run the GPU tests (each kernel against the interpreter into poisoned outputs, grouped GEMM, a pipeline,
#      the graph on the cutlass backend, export);
#   3. run the benchmark against torch (TF32 off and on), cached builds and cached load time.
# Results go to $OUT (gpu_matrix.json, pytest_gpu.log, <date>-h200-backend.{json,md}, bench.log).
# Kernels built elsewhere with the same nvcc and CUTLASS may come as .cache/kernels.tar.xz.
# Usage (repository root): bash benchmarks/gpu_check_backend.sh [date]
set -o pipefail
DATE=${1:-$(date -u +%F)}
OUT=${OUT:-/tmp/mucutlass-gpu-check}
mkdir -p "$OUT"
if [ -d .whl ]; then  # wheels the GPU image lacks (pydantic, lark, nvidia-cutlass, ...)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PATH=$PATH:/usr/local/cuda/bin
export MUCUTLASS_CACHE_DIR=${MUCUTLASS_CACHE_DIR:-$PWD/.cache/mucutlass} PYTHONUNBUFFERED=1
mkdir -p "$MUCUTLASS_CACHE_DIR"
[ -f .cache/kernels.tar.xz ] && tar -C "$MUCUTLASS_CACHE_DIR" -xJf .cache/kernels.tar.xz
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
python3 - <<'PY'
import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])
PY
timeout 420 python3 benchmarks/bench_backend.py --prebuild-matrix --out "$OUT" --date "$DATE" ${BENCH_ONLY:+--only=$BENCH_ONLY} 2>&1 | tee "$OUT/bench.log" | grep -v "^|"
MUCUTLASS_GPU_RESULTS="$OUT/gpu_matrix.json" timeout 300 python3 -m pytest -q -m gpu tests/gpu/test_backend_matrix.py \
  tests/test_backend_grouped.py tests/test_graph_cutlass.py -p no:cacheprovider -rfE 2>&1 | tee "$OUT/pytest_gpu.log" | tail -40
cat "$OUT/$DATE-h200-backend.md" 2>/dev/null | tail -30
