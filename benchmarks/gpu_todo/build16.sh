#!/usr/bin/env bash
# Build throughput and several GPUs (issue 16). Two commands, one per machine; results in $OUT.
#   one H200 (nvidia-h200), under 4 minutes:      bash benchmarks/gpu_todo/build16.sh one
#     - cold builds of 8 kernel variants (the offline tier's for builtin/20_conv2d_bias_relu) in one translation
#       unit against one unit each, and one unit with --split-compile=4 (side by side: 13 nvcc threads on 16 cores)
#       -> build.{json,md}: wall s per kernel
#       (target <= 15 s with >= 8 variants in one unit), nvcc CPU s per kernel;
#     - at the same time, a cold-cache `mucutlass optimize evals/suites/builtin/20_conv2d_bias_relu.py
#       --max-attempts 40 --policy fixed` (offline tier; 16 candidates, so it stops when they are spent)
#       -> opt20-summary.json (time_split_s: build / validate / profile / model / graph; kernel_cache hit rate),
#       opt20-events.jsonl (one line per attempt, kept if the run is cut short), opt20-attempts.csv;
#     - the nvcc + GPU test: one library built once runs two GEMM shapes like the interpreter -> pytest-units.log.
#     (run on 2026-12-01: benchmarks/results/2026-12-01-h200-build.{json,md}; the optimize was cut at 220 s)
#   two H200s (nvidia-h200-x2), under 5 minutes:  bash benchmarks/gpu_todo/build16.sh two
#     - the smoke suite's first 4 problems, offline tier, variants dsl and dsl+sol (8 runs), 2 attempts, on 2 GPUs
#       then on 1 (problems dealt round-robin, 2 a GPU), kernels built first into a shared cache -> gpus.{json,md}:
#       wall-time ratio (target >= 1.7) and whether every run tried the same programs with the same outcomes and
#       kept the same best.
#   one H200, about 7 minutes (a fix-up slot):       bash benchmarks/gpu_todo/build16.sh opt
#     - the 40-attempt optimize of builtin/20 alone, cold cache, to its end (16 candidates, ~18 s of harness each
#       after the first unit) -> opt20-summary.json with time_split_s and kernel_cache; opt20-events.jsonl carries
#       the split so far with every attempt, so a cut run still says where its time went.
# Needs the wheels of `mucutlass wheelhouse` in .whl/ (as benchmarks/h200_suite.sh).
set -uo pipefail
stage=${1:?usage: build16.sh one|two}
OUT=${OUT:-/tmp/mucutlass-out}
mkdir -p "$OUT"
t0=$(date +%s)
say() { echo "== $(date +%T) +$(( $(date +%s) - t0 ))s $*" | tee -a "$OUT/build16-$stage.log"; }
source benchmarks/gpu_env.sh || { say "wheel install failed"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$OUT/build16-$stage.log" 2>&1
say "start ($(nproc) cores)"

if [ "$stage" = one ]; then
  ( timeout 215 python3 benchmarks/bench_build.py --out "$OUT" --n 8 --modes unit,separate,unit-split-4 --together > "$OUT/bench_build.log" 2>&1
    say "bench_build exit $?" ) &
  ( export MUCUTLASS_CACHE_DIR=$(mktemp -d /tmp/mucutlass-opt20-XXXX)
    timeout 220 python3 -m mucutlass optimize evals/suites/builtin/20_conv2d_bias_relu.py --max-attempts 40 \
      --policy fixed --tier offline --backend cutlass --out /tmp/opt20 --json > "$OUT/opt20-events.jsonl" 2> "$OUT/opt20.err"
    say "optimize exit $?"
    cp /tmp/opt20/summary.json "$OUT/opt20-summary.json" 2>/dev/null
    cp /tmp/opt20/attempts.csv "$OUT/opt20-attempts.csv" 2>/dev/null ) &
  ( export MUCUTLASS_CACHE_DIR=$(mktemp -d /tmp/mucutlass-units-XXXX)
    timeout 200 python3 -m pytest -q -m gpu tests/test_build_units.py -p no:cacheprovider -rfE > "$OUT/pytest-units.log" 2>&1
    say "pytest exit $?" ) &
  wait
  python3 - "$OUT" <<'PY' | tee -a "$OUT/build16-one.log"
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
s = out / "opt20-summary.json"
if s.exists():
    d = json.loads(s.read_text())
    print("optimize:", d.get("attempts"), "attempts,", round(d.get("wall_s", 0), 1), "s wall; split", d.get("time_split_s"),
          "; cache", d.get("kernel_cache"), "; best", d.get("best_t_us"), "us")
else:
    ev = [json.loads(l) for l in (out / "opt20-events.jsonl").read_text().splitlines() if l.startswith("{")]
    att = [e for e in ev if e.get("event") == "attempt"]
    print("optimize cut short:", len(att), "attempts done;", [round(e["record"].get("build_s") or 0, 1) for e in att])
b = out / "build.md"
print(b.read_text() if b.exists() else "no build.md")
PY
fi

if [ "$stage" = two ]; then
  timeout 290 python3 benchmarks/bench_gpus.py --out "$OUT" --gpus 2 --problems 4 --budget-s 280 > "$OUT/bench_gpus.log" 2>&1
  say "bench_gpus exit $?"
  cat "$OUT/gpus.md" 2>/dev/null | tee -a "$OUT/build16-two.log"
fi

if [ "$stage" = opt ]; then
  export MUCUTLASS_CACHE_DIR=$(mktemp -d /tmp/mucutlass-opt20-XXXX)
  timeout 570 python3 -m mucutlass optimize evals/suites/builtin/20_conv2d_bias_relu.py --max-attempts 40 \
    --policy fixed --tier offline --backend cutlass --out /tmp/opt20 --json > "$OUT/opt20-events.jsonl" 2> "$OUT/opt20.err"
  say "optimize exit $?"
  cp /tmp/opt20/summary.json "$OUT/opt20-summary.json" 2>/dev/null
  cp /tmp/opt20/attempts.csv "$OUT/opt20-attempts.csv" 2>/dev/null
  python3 - "$OUT" <<'PY' | tee -a "$OUT/build16-opt.log"
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
ev = [json.loads(l) for l in (out / "opt20-events.jsonl").read_text().splitlines() if l.startswith("{")]
att = [e for e in ev if e.get("event") == "attempt"]
if att:
    last = att[-1]
    print(len(att), "attempts; split so far", last.get("time_split_s"), "; cache", last.get("kernel_cache"))
s = out / "opt20-summary.json"
if s.exists():
    d = json.loads(s.read_text())
    print("done:", d.get("attempts"), "attempts,", round(d.get("wall_s", 0), 1), "s;", d.get("stop_reason"))
PY
fi

say "done"
