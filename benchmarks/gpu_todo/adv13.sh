#!/usr/bin/env bash
# Shows, on one H200 in under 9 minutes: the whole adversarial set caught for its rules with every honest control
# passing (controls first in each shard), with the namespace sandbox's availability there. 8 shards side by side,
# each with a 430 s budget (a case that would end past it is listed as not reached), merged into
# <date>-h200-adversarial.{json,md}; the shards' tables and logs in shards.tgz.
# Run from the repository root:   OUT=... bash benchmarks/gpu_todo/adv13.sh
set -uo pipefail
export OUT=${OUT:-/tmp/mucutlass-out}
mkdir -p "$OUT/shards"
t0=$(date +%s)
log="$OUT/adv13.log"
say() { echo "== $(date +%T) +$(( $(date +%s) - t0 ))s $*" | tee -a "$log"; }
source benchmarks/gpu_env.sh || { say "wheel install failed"; exit 1; }
export MUCUTLASS_CACHE_DIR=$PWD/.cache/mucutlass
mkdir -p "$MUCUTLASS_CACHE_DIR"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv >> "$log" 2>&1
python3 -c "from evals.judge.sandbox import sandbox_available; print('sandbox available:', sandbox_available())" >> "$log" 2>&1
say "adversarial"
for k in 0 1 2 3 4 5 6 7; do
  timeout 470 python3 -m tests.adversarial.report --out "$OUT/shards" --watchdog-s 30 --shard $k/8 --budget-s 430 \
    > "$OUT/shards/shard$k.log" 2>&1 &
done
wait
python3 -m tests.adversarial.report --merge "$OUT"/shards/*.shard*.json --out "$OUT" >> "$log" 2>&1
say "adversarial exit $?"
grep -hE "caught=False|next_clean=False|passed=False|Traceback|stopping" "$OUT"/shards/shard*.log >> "$log"
(cd "$OUT" && tar czf shards.tgz shards && rm -rf shards)
say done
