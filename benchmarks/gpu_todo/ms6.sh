#!/usr/bin/env bash
# Should show: on one H200, the GPU case of the reference-instance test passing (the references and the state_dict a program is built from come from one Model instance although the judge's device is `cuda` and its tensors' `cuda:0`), and tests/data/module_step/gated.py's 2-attempt CUTLASS optimize keeping a program (correct, no `mismatch`); about 4 minutes.
# Run from the repository root: OUT=... bash benchmarks/gpu_todo/ms6.sh
# Writes $OUT/ms6-test.log (pytest), $OUT/ms6-gated/ (the optimize's run folder) and $OUT/ms6-gated.log.
set -uo pipefail
OUT=${OUT:-/tmp/mucutlass-out}
mkdir -p "$OUT"
source benchmarks/gpu_env.sh || { echo "wheel install failed"; exit 1; }
export XDG_CACHE_HOME="$OUT/xdg" MUCUTLASS_CACHE_DIR="$OUT/kernels"
timeout 60 python3 -m pytest -q -rA -p no:cacheprovider tests/test_harness_module_steps.py \
    -k "state_a_program" 2>&1 | tail -20 | tee "$OUT/ms6-test.log"
timeout 200 python3 -m mucutlass optimize tests/data/module_step/gated.py --max-attempts 2 --tier offline \
    --backend cutlass --out "$OUT/ms6-gated" 2>&1 | tail -40 | tee "$OUT/ms6-gated.log"
