#!/usr/bin/env bash
# Should show, on one H200 in about 3 minutes: f16_on_later_instances caught for precision at profile (the timed range
# probe), version_keyed_memo at profile with an honest time (graph replay), library_namespace_gemm and
# own_path_when_recorded skipped there (gpu=False), and every honest control passing with the f16 range probe
# now run at profile too (honest_program.mcu, honest_f32_exact.py, honest_prepacked_weight.py: no precision flag).
# Run from the repository root:   OUT=... bash benchmarks/gpu_todo/red7.sh   (writes $OUT/red7-h200-adversarial.*)
set -uo pipefail
OUT=${OUT:-/tmp/mucutlass-out}
mkdir -p "$OUT/shards"
source benchmarks/gpu_env.sh || { echo "wheel install failed"; exit 1; }
CASES="f16_on_later_instances.py version_keyed_memo.py f16_unless_range_probe.py precise_unless_captured.py
memo_eager_fallback.py honest.py honest_program.mcu honest_torch_step.mcu honest_f16.mcu honest_f32_exact.py
honest_view_output.py honest_prepacked_weight.py honest_compiled.py"
for k in 0 1; do
  timeout 200 python3 -m tests.adversarial.report --out "$OUT/shards" --watchdog-s 20 --shard $k/2 --only $CASES \
    > "$OUT/shards/shard$k.log" 2>&1 &
done
wait
python3 -m tests.adversarial.report --merge "$OUT"/shards/*.shard*.json --out "$OUT/merged" > "$OUT/merge.log" 2>&1
for f in "$OUT"/merged/*-adversarial.*; do mv "$f" "$OUT/red7-h200-adversarial.${f##*.}"; done
grep -hE "caught=|passed=" "$OUT"/shards/shard*.log | tee "$OUT/summary.txt"
