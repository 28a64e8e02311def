#!/usr/bin/env bash
# Everything the product measures on an H200 beyond the backend's checks (benchmarks/gpu_check_backend.sh), as named
# stages, each within one 10-minute command (run them back to back while the machine is warm: .cache/ lives between
# them). Run from the repository root: OUT=... bash benchmarks/h200_suite.sh STAGE. Results land in $OUT; copy them
# into benchmarks/results/ with the date and GPU in their names.
#
# The harness
#   gpu-tests       the GPU tests (GPU_TESTS: the files, default tests/test_harness_gpu.py; PYTEST_K: a -k filter),
#                   on a quiet GPU, GPU_TESTS_S seconds; e.g. GPU_TESTS=tests/test_harness_adversarial.py for the
#                   precision / attribution cases as tests
#   adversarial     the adversarial set, every case at its stage, controls first, 8 shards side by side, the
#                   namespace sandbox's availability first (ONLY: case files, to run a part of it; ADVERSARIAL_S per
#                   shard) -> <date>-h200-adversarial.{json,md}
#   adversarial-at  the adversarial set on another problem (PROBLEM, default the 4 GiB-output
#                   builtin-huge/10_linear_bias_relu_4gib_out), 4 shards, ONLY as above
#   harness         gpu-tests then adversarial (under 7 minutes)
#   timing          the harness's own numbers (bench_harness.py: overhead per attempt by stage, memory, the timing
#                   method's spread beside variants of it), on a quiet host, under 3.5 minutes; PIN_ARENA_MB: the
#                   opt-in page-locked arena, BEFORE: an earlier result to set beside it
#   fork-server     candidate processes forked from the judge's fork server on a GPU: its tests (the server holds no
#                   CUDA, a forked candidate starts its own) and bench_first_run.py (the default optimize and the
#                   judge's stages per attempt, fork server on and off) -> <date>-h200-first-run-stages.{json,md}
#   sealed          the sealed calls' t / U on honest candidates and cheats (bench_sealed.py), under 3 minutes
#   judge-scale     the judge on suite $SUITE (default builtin-huge: KernelBench's largest sizes) with honest
#                   candidates (the reference's layers and the offline tier's first program), JUDGES judges (default
#                   3) sharing the GPU (bench_judge_scale.py: verdicts, overhead per attempt, peak memory per process;
#                   ONLY: problem names, to run a part of the suite)
# The offline tier and its kernels
#   offline         build the offline tier's candidate kernels for suite $SUITE (builtin or builtin-large; one
#                   translation unit per core), evaluate the suite (resumable: run the stage again to finish), write
#                   <date>-h200-offline-$SUITE.{json,md} and the report
#   models          the models suite (14 whole models), 1 attempt, 4 judges; each kept program profiled step by step;
#                   a program with a `module` step optimized end to end; the module-step and timing GPU tests
#   variants        hand-written CUDA ModelNew modules through the cuda variant beside the offline tier
#   runtime         the runtime's CUDA graph replay and fused input casts, on and off (bench_runtime.py)
#   split           tf32x3 (three TF32 MMAs a product): a 4096^3 fp32 GEMM beside the TF32 kernel and PyTorch, TFLOP/s
#                   and the largest error against fp64 at 1e-4 (bench_split_gemm.py); the strict suites are the offline
#                   stage with SUITE=builtin-strict or builtin-large-strict
#   depthwise       the depthwise direct conv, MUCUTLASS_DEPTHWISE_SPLIT off and on (bench_depthwise.py)
#   conv-transpose  the transposed-conv suite (evals/suites/conv_transpose): the dgrad GPU tests, then the offline
#                   tier's first ATTEMPTS programs per problem built, judged and timed beside eager fp32 / TF32 and
#                   torch.compile -> <date>-h200-offline-conv-transpose.{json,md} (resumable: run it again to finish)
#   build           kernel build throughput: 8 variants in one translation unit against one each (bench_build.py),
#                   and the build-units GPU test
#   optimize        one 40-attempt optimize, cold kernel cache, to its end (PROBLEM, default
#                   builtin/20_conv2d_bias_relu): where its time goes (summary's time_split_s)
#   gpus            (on nvidia-h200-x2) an evaluation on two GPUs against one: wall-time ratio, identical results
# Needs the wheels of `mucutlass wheelhouse` in .whl/; kernels built elsewhere with the same nvcc and CUTLASS may
# come as .cache/kernels.tar.xz (same content hash, same cache entry).
# Environment: ATTEMPTS (default 3), PREBUILD_S (default 300), EVAL_S (seconds left for the evaluation), WORKERS
# (judges side by side on the GPU, default 1); offline stage: SUITE (default builtin), PREBUILD_ATTEMPTS
# (candidates built per problem, default ATTEMPTS + 2), TABLE_S and REPORT_S (default 60 each).
set -uo pipefail
stage=${1:?usage: h200_suite.sh gpu-tests|adversarial|adversarial-at|harness|timing|fork-server|sealed|judge-scale|offline|models|variants|runtime|split|depthwise|conv-transpose|build|optimize|gpus}
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
  timeout "${GPU_TESTS_S:-200}" python3 -m pytest -q -m gpu ${GPU_TESTS:-tests/test_harness_gpu.py} -p no:cacheprovider \
    -rfE --durations=5 ${PYTEST_K:+-k "$PYTEST_K"} >> "$log" 2>&1
  say "pytest exit $?"
fi

if [ "$stage" = harness ] || [ "$stage" = adversarial ]; then
  # the adversarial set, every case at its stage, controls first, in 8 shards side by side (each its own judge),
  # merged into <date>-h200-adversarial.*; each shard starts no case past ADVERSARIAL_S and rewrites its results
  # file after every case, so one cut by its limit still counts (the cases it did not reach are listed)
  python3 -c "from evals.judge.sandbox import sandbox_available; print('sandbox available:', sandbox_available())" \
    >> "$log" 2>&1
  say "adversarial"
  export MUCUTLASS_JUDGES_PER_GPU=8  # eight shards' judges share the GPU: each plans for its eighth
  for k in 0 1 2 3 4 5 6 7; do
    timeout $(( ${ADVERSARIAL_S:-150} + 35 )) python3 -m tests.adversarial.report --out "$OUT/shards" --watchdog-s 15 \
      --shard $k/8 --budget-s "${ADVERSARIAL_S:-150}" ${ONLY:+--only $ONLY} >> "$OUT/shards.log" 2>&1 &
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
    ${ONLY:+--only $ONLY} --out "$OUT" >> "$log" 2>&1
  say "bench_judge_scale exit $?"
fi

if [ "$stage" = adversarial-at ]; then
  PROBLEM=${PROBLEM:-builtin-huge/10_linear_bias_relu_4gib_out}
  say "adversarial on $PROBLEM"
  export MUCUTLASS_JUDGES_PER_GPU=4  # four shards' judges share the GPU: each plans for its quarter
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
    --pause-s 1.0 --variants cuda_graph,cuda_graph_one_call,cuda_graph_no_warmup --budget-s 175 \
    ${PIN_ARENA_MB:+--pin-arena-mb "$PIN_ARENA_MB" --stem harness-opt-in --label "pin_arena_mb=$PIN_ARENA_MB"} \
    ${BEFORE:+--before "$BEFORE"} >> "$log" 2>&1
  say "bench_harness exit $?"
fi

if [ "$stage" = fork-server ]; then
  export MUCUTLASS_FORK_SERVER=1  # off by default on a GPU host until this stage has measured it
  say "fork server tests"
  timeout 200 python3 -m pytest -q tests/test_fork_server.py -p no:cacheprovider -rfEs >> "$log" 2>&1
  say "pytest exit $?"
  say "bench_first_run"
  timeout 360 python3 benchmarks/bench_first_run.py --out "$OUT" --attempts 4 >> "$log" 2>&1
  say "bench_first_run exit $?"
fi

if [ "$stage" = sealed ]; then
  say "bench_sealed"
  timeout 175 python3 benchmarks/bench_sealed.py --out "$OUT" --budget-s 150 >> "$log" 2>&1
  say "bench_sealed exit $?"
fi

if [ "$stage" = split ]; then
  say "bench_split_gemm"
  timeout 400 python3 benchmarks/bench_split_gemm.py --out "$OUT" >> "$log" 2>&1
  say "bench_split_gemm exit $?"
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
if [ "$stage" = models ]; then
  EVAL=.cache/eval-models
  timeout 60 python3 -m pytest -q -m gpu tests/test_timing_gpu.py tests/test_harness_module_steps.py -p no:cacheprovider \
    -rfE >> "$log" 2>&1
  say "pytest timing, module steps exit $?"
  # a module-step program optimized end to end; its kernel builds with the prebuild, its timings take the lock in turn
  ( timeout 300 python3 -m mucutlass optimize tests/data/module_step/gated.py --max-attempts 2 --tier offline \
      --backend cutlass --out /tmp/gated --json > "$OUT/gated-events.jsonl" 2> "$OUT/gated.err"
    say "gated optimize exit $?"; cp /tmp/gated/summary.json "$OUT/gated-summary.json" 2>/dev/null ) &
  timeout 200 python3 benchmarks/bench_models.py --prebuild-only --max-attempts 1 --jobs "$(nproc)" >> "$log" 2>&1
  say "prebuild exit $?"
  timeout 230 python3 -m mucutlass eval --suite models --tiers offline --policies fixed --max-attempts 1 \
    --backend cutlass --out "$EVAL" --workers 4 --no-progress >> "$log" 2>&1
  say "eval exit $?"
  wait  # the optimize measures on this GPU too: the profile runs after it
  timeout 90 python3 benchmarks/profile_programs.py "$EVAL" --suite models --out "$OUT" --budget-s 80 >> "$log" 2>&1
  say "profile exit $?"
  timeout 45 python3 benchmarks/bench_models.py --from-eval "$EVAL/results.sqlite" --out "$OUT" >> "$log" 2>&1
  say "table exit $?"
  tar -czf "$OUT/eval-models.tgz" --exclude="*.so" --exclude="checkpoints.sqlite*" "$EVAL" 2>/dev/null
fi

if [ "$stage" = runtime ]; then
  timeout 420 python3 benchmarks/bench_runtime.py --out "$OUT" --jobs "$(nproc)" --gpu h200 >> "$log" 2>&1
  say "bench_runtime exit $?"
fi

if [ "$stage" = depthwise ]; then
  timeout 470 python3 benchmarks/bench_depthwise.py --out "$OUT" --jobs 6 >> "$log" 2>&1
  say "bench_depthwise exit $?"
fi

if [ "$stage" = conv-transpose ]; then
  timeout "${GPU_TESTS_S:-150}" python3 -m pytest -q -m gpu tests/test_conv_transpose.py -p no:cacheprovider -rfE \
    >> "$log" 2>&1
  say "pytest conv-transpose exit $?"
  EVAL=.cache/eval-conv-transpose
  timeout "${PREBUILD_S:-200}" python3 benchmarks/bench_offline.py --suite conv-transpose --prebuild-only \
    --max-attempts "${PREBUILD_ATTEMPTS:-$(( ATTEMPTS + 2 ))}" --jobs "$(nproc)" >> "$log" 2>&1
  say "prebuild exit $?; kernels in cache: $(ls "$MUCUTLASS_CACHE_DIR/kernels" | wc -l)"
  timeout "${EVAL_S:-180}" python3 -m mucutlass eval --suite conv-transpose --tiers offline --policies fixed \
    --max-attempts "$ATTEMPTS" --backend cutlass --out "$EVAL" --workers "${WORKERS:-1}" --no-progress >> "$log" 2>&1
  say "eval exit $?"
  timeout "${TABLE_S:-50}" python3 benchmarks/bench_offline.py --suite conv-transpose \
    --from-eval "$EVAL/results.sqlite" --out "$OUT" >> "$log" 2>&1
  say "bench table exit $?"
fi

if [ "$stage" = build ]; then
  ( timeout 215 python3 benchmarks/bench_build.py --out "$OUT" --n 8 --modes unit,separate,unit-split-4 --together \
      >> "$OUT/bench_build.log" 2>&1
    say "bench_build exit $?" ) &
  ( export MUCUTLASS_CACHE_DIR=$(mktemp -d /tmp/mucutlass-units-XXXX)
    timeout 200 python3 -m pytest -q -m gpu tests/test_build_units.py -p no:cacheprovider -rfE >> "$log" 2>&1
    say "pytest build units exit $?" ) &
  wait
fi

if [ "$stage" = optimize ]; then
  PROBLEM=${PROBLEM:-evals/suites/builtin/20_conv2d_bias_relu.py}
  export MUCUTLASS_CACHE_DIR=$(mktemp -d /tmp/mucutlass-optimize-XXXX)  # cold: its builds are part of its time
  timeout 570 python3 -m mucutlass optimize "$PROBLEM" --max-attempts 40 --policy fixed --tier offline \
    --backend cutlass --out /tmp/optimize --json > "$OUT/optimize-events.jsonl" 2> "$OUT/optimize.err"
  say "optimize exit $? (optimize-events.jsonl carries the time split with every attempt, if it was cut)"
  cp /tmp/optimize/summary.json "$OUT/optimize-summary.json" 2>/dev/null
  cp /tmp/optimize/attempts.csv "$OUT/optimize-attempts.csv" 2>/dev/null
fi

if [ "$stage" = gpus ]; then
  timeout 290 python3 benchmarks/bench_gpus.py --out "$OUT" --gpus 2 --problems 4 --budget-s 280 >> "$log" 2>&1
  say "bench_gpus exit $?"
fi
say done
