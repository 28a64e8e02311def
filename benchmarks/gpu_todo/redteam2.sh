#!/usr/bin/env bash
# The adversarial cases added after the first 60 (tests/adversarial/cases.py, the `CASES += [...]` block) and
# their two controls, on one H200: every case at its stage (validate or profile), 4 shards side by side (each
# with its own judge), merged into $OUT/redteam2-h200-adversarial.{json,md}; shard logs in $OUT/shards/.
# About 3 minutes. Run from the repository root: OUT=... bash benchmarks/gpu_todo/redteam2.sh
# What it should show: the cases with `pending` in cases.py not caught (caught=False) until the judge gains the
# fix each pending reason names; the others caught=True; controls passed=True; next_clean=True except
# plants_next_attempt_env (it writes into the next attempts' processes) while that case is pending.
set -uo pipefail
OUT=${OUT:-/tmp/mucutlass-out}
mkdir -p "$OUT/shards"
source benchmarks/gpu_env.sh || { echo "wheel install failed"; exit 1; }
CASES="plants_next_attempt_env.py plants_compile_caches.py lazy_via_patched_to.py hides_input_mutation.py
rewrites_guard_table.py hides_output_reuse.py ring_output_buffers.py precise_first_call.py f16_unless_range_probe.py autograd_function_bf16.py
precise_unless_captured.py tf32_when_captured.py skip_work_when_counted.py flops_hidden_from_counter.py
uncounted_gemm_ops.py patch_flop_counter.py patch_channel_send.py work_in_child_process.py memo_eager_fallback.py patch_statistics_median.py freezes_supervisor.py
fake_cuda_graph.py skips_l2_flush.py plants_startup_hook.py honest_view_output.py honest_prepacked_weight.py honest_beside_writer.py"
for k in 0 1 2 3; do
  timeout 200 python3 -m tests.adversarial.report --out "$OUT/shards" --watchdog-s 20 --shard $k/4 --only $CASES \
    > "$OUT/shards/shard$k.log" 2>&1 &
done
wait
python3 -m tests.adversarial.report --merge "$OUT"/shards/*.shard*.json --out "$OUT/merged" > "$OUT/merge.log" 2>&1
for f in "$OUT"/merged/*-adversarial.*; do mv "$f" "$OUT/redteam2-h200-adversarial.${f##*.}"; done
grep -hE "caught=|passed=" "$OUT"/shards/shard*.log | tee "$OUT/summary.txt"
