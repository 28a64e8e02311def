#!/usr/bin/env bash
# The product's whole check on one H200, in two stages that fit a 10-minute command each (run `two` while the
# machine from `one` is still up: the kernel cache and the evaluation live under .cache/ between them).
#   one: calibrate the GPU; build the offline tier's candidate kernels for the built-in suite (16 nvcc at a time)
#        while the harness's GPU tests and the adversarial set run; then evaluate the suite (resumable).
#   two: finish the evaluation; replay the stop rules; write the report and the offline benchmark table.
# Needs the wheels of `mucutlass wheelhouse` in .whl/; kernels built elsewhere with the same nvcc and CUTLASS may
# come as .cache/kernels.tar.xz (same content hash, same cache entry). Results land in $OUT (at most 8 files).
set -uo pipefail
stage=${1:?usage: h200_suite.sh one|two}
OUT=${OUT:-/tmp/mucutlass-out}
mkdir -p "$OUT"
t0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - t0) )); }   # seconds left before mark $1
log="$OUT/stage-$stage.log"
say() { echo "== $(date +%T) +$(( $(date +%s) - t0 ))s $*" | tee -a "$log"; }

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed" | tee -a "$log"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export MUCUTLASS_CACHE_DIR=$PWD/.cache/mucutlass MUCUTLASS_RECORD=$PWD/.cache/record.json
mkdir -p "$MUCUTLASS_CACHE_DIR"
EVAL=.cache/eval
eval_cmd() {
  timeout "$1" python3 -m mucutlass eval --suite builtin --tiers offline --policies fixed,sol+plateau \
    --max-attempts 3 --backend cutlass --out "$EVAL" --no-progress >> "$log" 2>&1
  say "eval exit $?"
}

if [ "$stage" = one ]; then
  if [ -f .cache/kernels.tar.xz ]; then tar -C "$MUCUTLASS_CACHE_DIR" -xJf .cache/kernels.tar.xz; fi
  say "kernels in cache: $(ls "$MUCUTLASS_CACHE_DIR/kernels" 2>/dev/null | wc -l)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >> "$log" 2>&1
  python3 -c "import torch, platform; print('python', platform.python_version(), 'torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$log" 2>&1
  say calibrate
  timeout 120 python3 -m mucutlass calibrate --gpu h200 --out "$OUT/h200-calibrated.json" >> "$log" 2>&1
  say "prebuild (background)"
  python3 benchmarks/bench_offline.py --suite builtin --prebuild-only --max-attempts 3 --jobs 15 > .cache/prebuild.log 2>&1 &
  pb=$!
  say "harness GPU tests"
  timeout 200 python3 -m pytest -q -m gpu tests/test_harness_gpu.py tests/test_harness_adversarial.py \
    tests/test_language_interpreter.py -p no:cacheprovider >> "$log" 2>&1
  say "pytest exit $?"
  timeout 120 python3 -m tests.adversarial.report --out "$OUT" --watchdog-s 15 >> "$log" 2>&1
  say "adversarial exit $?"
  wait $pb; cat .cache/prebuild.log >> "$log"
  say "prebuild done; kernels in cache: $(ls "$MUCUTLASS_CACHE_DIR/kernels" | wc -l)"
  eval_cmd "$(left 555)"
fi

if [ "$stage" = two ]; then
  say "resume eval"
  eval_cmd "$(left 420)"
  say replay
  timeout 60 python3 -m mucutlass replay "$EVAL" --policies sol,plateau,sol+plateau --eps 0.5,1,2.5 --w 1,2 \
    > "$EVAL/replay.md" 2>> "$log"
  say report
  timeout 90 python3 -m mucutlass report "$EVAL" --out "$EVAL/report" >> "$log" 2>&1
  timeout 120 python3 benchmarks/bench_offline.py --suite builtin --from-eval "$EVAL/results.sqlite" \
    --out "$EVAL/bench" >> "$log" 2>&1
  say "bench table exit $?"
fi
# What comes back: the evaluation's results and report (the sqlite store is small), one run's directory.
tar -czf "$OUT/eval-$stage.tgz" --exclude='*.so' --exclude='checkpoints.sqlite*' "$EVAL" 2>/dev/null
say done
