#!/usr/bin/env bash
# Isolation and containment (issue 13, properties 2 and 8) on one H200: whether the namespace sandbox is on there
# ($OUT/iso13-sandbox.txt: "sandbox True" where the container lets a process make PID and mount namespaces,
# "False" where it falls back to snapshots), then the isolation/containment cases and every control, each at its
# stage, 4 shards side by side, merged into $OUT/iso13-h200-adversarial.{json,md}; shard logs in $OUT/shards/.
# About 4 minutes. Run from the repository root: OUT=... bash benchmarks/gpu_todo/iso13.sh
# What it should show: every case caught=True with next_clean=True, every control passed=True (honest_beside_writer
# only where the sandbox is on), and the CUDA controls (honest_program.mcu, honest_f16.mcu) correct and timed inside
# the sandbox (CUDA, the driver's JIT cache and the profiler work with read-only file systems but the candidate's folder).
set -uo pipefail
OUT=${OUT:-/tmp/mucutlass-out}
mkdir -p "$OUT/shards"
source benchmarks/gpu_env.sh || { echo "wheel install failed"; exit 1; }
python3 -c "from evals.judge.sandbox import sandbox_available; print('sandbox', sandbox_available())" > "$OUT/iso13-sandbox.txt" 2>&1
CASES="plants_next_attempt_env.py plants_compile_caches.py hides_output_reuse.py freezes_supervisor.py
plants_startup_hook.py reads_ancestor_environ.py writes_via_proc_root.py plants_sitecustomize.py plants_nv_compute_cache.py
stops_next_attempt.py writes_project.py writes_kernel_cache.py daemon_child.py reads_secrets.py gpu_memory_hog.py
tf32_env_override.py honest.py honest_program.mcu honest_torch_step.mcu honest_f16.mcu honest_f32_exact.py
honest_view_output.py honest_prepacked_weight.py honest_beside_writer.py"
for k in 0 1 2 3; do
  timeout 220 python3 -m tests.adversarial.report --out "$OUT/shards" --watchdog-s 20 --shard $k/4 --only $CASES \
    > "$OUT/shards/shard$k.log" 2>&1 &
done
wait
python3 -m tests.adversarial.report --merge "$OUT"/shards/*.shard*.json --out "$OUT/merged" > "$OUT/merge.log" 2>&1
for f in "$OUT"/merged/*-adversarial.*; do mv "$f" "$OUT/iso13-h200-adversarial.${f##*.}"; done
cat "$OUT/iso13-sandbox.txt"
grep -hE "caught=|passed=" "$OUT"/shards/shard*.log | tee "$OUT/summary.txt"
