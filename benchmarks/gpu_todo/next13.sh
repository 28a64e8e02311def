#!/usr/bin/env bash
# Shows, on one H200 in under 8 minutes: the adversarial set caught with clean controls (controls first, results kept
# even when a shard runs out of time), the harness overhead per attempt <= 1.5 s with its stages beside the earlier
# H200 run, and the sealed calls' t / U on honest candidates and cheats. Four stages, in order, each writing into
# $OUT as it finishes (a stage cut by its limit still leaves its files):
#   1. adversarial (<= 160 s): tests/adversarial/report.py in 8 shards side by side, each with a 130 s budget (no case
#      starts that would end past it; the rest are listed as not reached), merged into <date>-h200-adversarial.{json,md};
#      per-shard rows in shards/*.jsonl as they finish.
#   2. overhead (<= 130 s): benchmarks/bench_harness.py, sections memory and overhead, 4 attempts with a 1 s pause (the
#      model's turn), with benchmarks/results/2026-12-01-h200-harness.json beside it -> <date>-h200-harness-overhead.*
#   3. opt-in (<= 70 s): the overhead again with pin_arena_mb=512 (off until measured: the channel's arena page-locked
#      in both processes; shows in `transfer`), beside stage 2's -> <date>-h200-harness-overhead-opt-in.*
#   4. sealed (<= 90 s): benchmarks/bench_sealed.py (the calibration of benchmarks/gpu_todo/sealed13.sh) -> sealed13-h200.*
# Run from the repository root:   OUT=... bash benchmarks/gpu_todo/next13.sh
# What it should show:
#   - <date>-h200-adversarial.md: controls passed (they ran first), caught = cases, not_reached empty or short;
#   - <date>-h200-harness-overhead.md: honest.py median overhead <= 1.5 s on 02_linear_relu_tiny and on 11_linear_relu
#     (were 1.67 s and 3.08 s), the "Before and after" table showing `process_end`, `end` and `reference` down (the
#     candidate process's exit is awaited in a thread, the next input sets are drawn during the closing linger and
#     between requests) and `compare` down on the tiny problem (the sealed calls compared at once);
#     summary.overhead_under_1_5s true, all_attempts_correct true, memory growth 0;
#   - ...-opt-in.md, "Before and after": `transfer` (and `candidate`, which holds the candidate's side of the
#     copies) lower on 11_linear_relu than in stage 2 (pin_arena_mb can then be on by default), process_start not
#     higher (spares still ready in time), all attempts correct;
#   - sealed13-h200.md: honest rows valid with t / U near 1 (GEMM) / above 0.5 (memory-bound), cheats timing_tampered.
set -uo pipefail
export OUT=${OUT:-/tmp/mucutlass-out}
mkdir -p "$OUT/shards"
t0=$(date +%s)
log="$OUT/next13.log"
say() { echo "== $(date +%T) +$(( $(date +%s) - t0 ))s $*" | tee -a "$log"; }
source benchmarks/gpu_env.sh || { say "wheel install failed"; exit 1; }
export MUCUTLASS_CACHE_DIR=$PWD/.cache/mucutlass
mkdir -p "$MUCUTLASS_CACHE_DIR"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv >> "$log" 2>&1

say "adversarial"
for k in 0 1 2 3 4 5 6 7; do
  timeout 160 python3 -m tests.adversarial.report --out "$OUT/shards" --watchdog-s 15 --shard $k/8 --budget-s 130 \
    > "$OUT/shards/shard$k.log" 2>&1 &
done
wait
python3 -m tests.adversarial.report --merge "$OUT"/shards/*.shard*.json --out "$OUT" >> "$log" 2>&1
say "adversarial exit $?"
grep -hE "caught=False|next_clean=False|passed=False|Traceback|stopping" "$OUT"/shards/shard*.log >> "$log"

say "overhead"
timeout 130 python3 benchmarks/bench_harness.py --out "$OUT" --sections memory,overhead --attempts 4 \
  --memory-attempts 2 --pause-s 1.0 --budget-s 120 --stem harness-overhead \
  --before benchmarks/results/2026-12-01-h200-harness.json --label "$(git rev-parse --short HEAD 2>/dev/null)" \
  >> "$log" 2>&1
say "overhead exit $?"

say "opt-in settings"
timeout 70 python3 benchmarks/bench_harness.py --out "$OUT" --sections overhead --attempts 3 --pause-s 1.0 --no-cutlass \
  --budget-s 60 --pin-arena-mb 512 --stem harness-overhead-opt-in --label "pin_arena_mb=512" \
  --before "$(ls "$OUT"/*-h200-harness-overhead.json 2>/dev/null | head -1)" >> "$log" 2>&1
say "opt-in exit $?"

say "sealed"
timeout 90 python3 benchmarks/bench_sealed.py --out "$OUT" --budget-s 70 > "$OUT/sealed13.log" 2>&1
say "sealed exit $?"
say done
