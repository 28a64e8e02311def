#!/usr/bin/env bash
# The product's GPU checks beyond the backend's (benchmarks/gpu_check_backend.sh), as stages that each fit one
# 10-minute command on an H200 (run them back to back while the machine is warm: .cache/ lives between them).
#   harness: the harness's GPU tests (stage gpu-tests, GPU_TESTS_S), then the adversarial set (stage adversarial,
#            8 shards side by side, controls first, ADVERSARIAL_S per shard); under 7 minutes;
#   timing: the harness's own numbers (bench_harness.py: overhead per attempt with its stages, memory, timing spread
#           of the default method, cuda_graph, beside variants of it), on a quiet host; under 3.5 minutes
#   (harness and timing back to back fit one 10-minute command: benchmarks/gpu_todo/speed13.sh);
#   variants: hand-written CUDA ModelNew modules through the cuda variant beside the offline tier (bench_variants.py);
#   judge-scale: the judge on suite $SUITE (default builtin-huge: KernelBench's largest sizes) with honest
#            candidates (the reference's layers and the offline tier's first program), JUDGES judges (default 3)
#            sharing the GPU (bench_judge_scale.py: verdicts, overhead per attempt, peak memory per process);
#   adversarial-at: the adversarial set on another Linear + ReLU problem (PROBLEM, default the 4 GiB-output
#            builtin-huge/10_linear_bias_relu_4gib_out), 4 shards, ONLY (case files) to run a part of it;
#   offline: build the offline tier's candidate kernels for suite $SUITE (builtin or builtin-large; spread over
#            one translation unit per core), evaluate the suite (resumable: run the stage again to finish), write
#            the offline benchmark table <date>-h200-offline-$SUITE.{json,md} and the report.
# Needs the wheels of `mucutlass wheelhouse` in .whl/; kernels built elsewhere with the same nvcc and CUTLASS may
# come as .cache/kernels.tar.xz (same content hash, same cache entry). Results land in $OUT (at most 8 files).
# Environment: ATTEMPTS (default 3), PREBUILD_S (default 300), EVAL_S (seconds left for the evaluation), WORKERS
# (judges side by side on the GPU, default 1); offline
# stage: SUITE (default builtin), PREBUILD_ATTEMPTS (candidates built per problem, default ATTEMPTS + 2),
# TABLE_S and REPORT_S (default 60 each).
set -uo pipefail
stage=${1:?usage: h200_suite.sh harness|gpu-tests|adversarial|adversarial-at|judge-scale|timing|variants|offline}
OUT=${OUT:-/tmp/mucutlass-out}
ATTEMPTS=${ATTEMPTS:-3}
mkdir -p "$OUT"
t0=$(date +%s)
log="$OUT/stage-$stage.log"
say() { echo "== $(date +%T) +$(( $(date +%s) - t0 ))s $*" | tee -a "$log"; }

source benchmarks/gpu_env.sh || { echo "wheel install failed" | tee -a "$log"; exit 1; }
export MUCUTLASS_CACHE_DIR=$PWD/.cache/mucutlass MUCUTLASS_RECORD=$PWD/.cache/record.json
mkdir -p "$MUCUTLASS_CACHE_DIR"
if [ -f .cache/kernels.tar.xz ] && [ ! -f .cache/kernels.unpacked ]; then
  tar -C "$MUCUTLASS_CACHE_DIR" -xJf .cache/kernels.tar.xz && touch .cache/kernels.unpacked
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >> "$log" 2>&1
python3 -c "import torch, platform; print('python', platform.python_version(), 'torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$log" 2>&1

if [ "$stage" = harness ] || [ "$stage" = gpu-tests ]; then
  # the GPU tests first, on a quiet GPU (their spread and overhead limits), with their own budget (GPU_TESTS_S)
  timeout "${GPU_TESTS_S:-200}" python3 -m pytest -q -m gpu tests/test_harness_gpu.py -p no:cacheprovider -rfE \
    --durations=5 >> "$log" 2>&1
  say "pytest exit $?"
fi

if [ "$stage" = harness ] || [ "$stage" = adversarial ]; then
  # the adversarial set, every case at its stage, controls first, in 8 shards side by side (each its own judge),
  # merged into <date>-h200-adversarial.*; each shard starts no case past ADVERSARIAL_S and rewrites its results
  # file after every case, so one cut by its limit still counts (the cases it did not reach are listed)
  say "adversarial"
  for k in 0 1 2 3 4 5 6 7; do
    timeout $(( ${ADVERSARIAL_S:-150} + 35 )) python3 -m tests.adversarial.report --out "$OUT/shards" --watchdog-s 15 \
      --shard $k/8 --budget-s "${ADVERSARIAL_S:-150}" >> "$OUT/shards.log" 2>&1 &
  done
  wait
  python3 -m tests.adversarial.report --merge "$OUT"/shards/*.shard*.json --out "$OUT" >> "$log" 2>&1
  say "adversarial exit $?"
  grep -E "caught=False|next_clean=False|passed=False|Traceback|stopping" "$OUT/shards.log" >> "$log"
fi

if [ "$stage" = judge-scale ]; then
  say "bench_judge_scale ${SUITE:-builtin-huge}"
  timeout "${JUDGE_SCALE_S:-480}" python3 benchmarks/bench_judge_scale.py --suite "${SUITE:-builtin-huge}" \
    --judges "${JUDGES:-3}" --programs --jobs "$(nproc)" --budget-s $(( ${JUDGE_SCALE_S:-480} - 60 )) \
    --out "$OUT" >> "$log" 2>&1
  say "bench_judge_scale exit $?"
fi

if [ "$stage" = adversarial-at ]; then
  PROBLEM=${PROBLEM:-builtin-huge/10_linear_bias_relu_4gib_out}
  say "adversarial on $PROBLEM"
  for k in 0 1 2 3; do
    timeout $(( ${ADVERSARIAL_S:-240} + 60 )) python3 -m tests.adversarial.report --out "$OUT/shards-at" \
      --watchdog-s 120 --problem "$PROBLEM" --shard $k/4 --budget-s "${ADVERSARIAL_S:-240}" \
      ${ONLY:+--only $ONLY} >> "$OUT/shards-at.log" 2>&1 &
  done
  wait
  python3 -m tests.adversarial.report --merge "$OUT"/shards-at/*.shard*.json --out "$OUT" >> "$log" 2>&1
  say "adversarial-at exit $?"
  grep -E "caught=False|next_clean=False|passed=False|Traceback|stopping" "$OUT/shards-at.log" >> "$log"
fi

if [ "$stage" = timing ]; then
  say "bench_harness"
  timeout 195 python3 benchmarks/bench_harness.py --out "$OUT" --attempts 4 --memory-attempts 3 --repeats 3 \
    --pause-s 1.0 --variants cuda_graph,cuda_graph_one_call,cuda_graph_no_warmup --budget-s 175 >> "$log" 2>&1
  say "bench_harness exit $?"
fi

if [ "$stage" = variants ]; then
  say "bench_variants"
  timeout 300 python3 benchmarks/bench_variants.py --out "$OUT" --ext-dir /tmp/mucutlass-cuda-ext >> "$log" 2>&1
  say "bench_variants exit $?"
fi

if [ "$stage" = offline ]; then
  # SUITE: builtin (default) or builtin-large; the eval store is per suite, so each resumes on its own
  SUITE=${SUITE:-builtin}
  EVAL=.cache/eval-$SUITE
  # a measured time that misses its estimate re-ranks the next candidates: build a few more than are tried
  PREBUILD_ATTEMPTS=${PREBUILD_ATTEMPTS:-$(( ATTEMPTS + 2 ))}
  say "suite $SUITE: kernels in cache: $(ls "$MUCUTLASS_CACHE_DIR/kernels" 2>/dev/null | wc -l)"
  timeout "${PREBUILD_S:-300}" python3 benchmarks/bench_offline.py --suite "$SUITE" --prebuild-only \
    --max-attempts "$PREBUILD_ATTEMPTS" --jobs "$(nproc)" >> "$log" 2>&1
  say "prebuild exit $?; kernels in cache: $(ls "$MUCUTLASS_CACHE_DIR/kernels" | wc -l)"
  # WORKERS judges share the GPU: each times alone under the GPU's timing lock while the others compile
  # references, trace and validate
  timeout "${EVAL_S:-240}" python3 -m mucutlass eval --suite "$SUITE" --tiers offline --policies fixed,sol+plateau \
    --max-attempts "$ATTEMPTS" --backend cutlass --out "$EVAL" --workers "${WORKERS:-1}" --no-progress >> "$log" 2>&1
  say "eval exit $?"
  # <date>-h200-offline-$SUITE.{json,md}: ours, PyTorch's best allowed variant (the floor) and fallbacks per problem
  timeout "${TABLE_S:-60}" python3 benchmarks/bench_offline.py --suite "$SUITE" --from-eval "$EVAL/results.sqlite" \
    --out "$OUT" >> "$log" 2>&1
  say "bench table exit $?"
  timeout "${REPORT_S:-60}" python3 -m mucutlass report "$EVAL" --out "$EVAL/report" >> "$log" 2>&1
  say "report exit $?"
  tar -czf "$OUT/eval-$SUITE.tgz" --exclude='*.so' --exclude='checkpoints.sqlite*' "$EVAL" 2>/dev/null
fi
say done
