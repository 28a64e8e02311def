"""A stand-in for graph.runner.run_spec in evaluation tests: deterministic attempts per problem,
a checkpoint in run_dir (so a restarted run continues where it stopped), and a log of every attempt
it actually executed, so tests can prove nothing finished was redone.

FAKE_RUN_DIE_AFTER=N makes the process exit abruptly (os._exit) after N attempts in total,
as a killed evaluation would.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from run_vocabulary.records import AttemptRecord, RunSummary

EXECUTED_LOG = "FAKE_RUN_EXECUTED_LOG"  # file that gets one line per executed attempt
DIE_AFTER = "FAKE_RUN_DIE_AFTER"
_executed_here = 0


def fake_attempt(problem: str, index: int) -> AttemptRecord:
    """Attempt ``index`` on ``problem``: times fall with the index, every third attempt fails."""
    h = int(hashlib.sha256(f"{problem}:{index}".encode()).hexdigest()[:8], 16)
    correct = index % 3 != 0
    t_us = 100.0 / (1 + 0.5 * index) * (1 + (h % 7) / 100)
    ref = {"eager_fp32": 400.0, "eager_tf32": 120.0, "compile": 110.0}
    return AttemptRecord(
        index=index, hypothesis=f"try {index}", program_text=f"program p{index}",
        program_hash=hashlib.sha256(f"p{index}".encode()).hexdigest()[:16],
        reached="done" if correct else "validate", compile_ok=True, correct=correct,
        failure_reason=None if correct else "mismatch",
        t_us=t_us if correct else None, timing_source="estimate", t_sol_us=20.0,
        sol_fraction=20.0 / t_us if correct else None,
        speedup_vs_eager_fp32=ref["eager_fp32"] / t_us if correct else None,
        speedup_vs_eager_tf32=ref["eager_tf32"] / t_us if correct else None,
        speedup_vs_compile=ref["compile"] / t_us if correct else None,
        precision="tf32", tokens_in=0, tokens_out=0, wall_s=0.01,
    )


def run(spec, on_event=None) -> RunSummary:
    """An evaluation's run function: one ``RunSpec`` (problem_path, tier, policy, max_attempts, run_dir)."""
    global _executed_here
    ctx = spec
    problem = Path(spec.problem_path).stem
    ckpt = Path(spec.run_dir) / "fake_checkpoint.jsonl"
    attempts = [AttemptRecord.model_validate_json(line) for line in ckpt.read_text().splitlines()] if ckpt.exists() else []
    die_after = int(os.environ.get(DIE_AFTER, "0") or 0)
    for index in range(len(attempts) + 1, ctx.max_attempts + 1):
        if die_after and _executed_here >= die_after:
            os._exit(137)
        a = fake_attempt(problem, index)
        _executed_here += 1
        if os.environ.get(EXECUTED_LOG):
            with open(os.environ[EXECUTED_LOG], "a") as fh:
                fh.write(f"{problem} {ctx.tier} {ctx.policy} {index}\n")
        with ckpt.open("a") as fh:
            fh.write(a.model_dump_json() + "\n")
        attempts.append(a)
        if on_event:
            on_event({"attempt": a})
    good = [a for a in attempts if a.correct]
    best = min(good, key=lambda a: a.t_us) if good else None
    return RunSummary(
        problem=problem, tier=ctx.tier, policy=ctx.policy, backend="interpreter", gpu="none",
        attempts=attempts, best_index=best.index if best else None, best_t_us=best.t_us if best else None,
        t_sol_us=20.0, reference_us={"eager_fp32": 400.0, "eager_tf32": 120.0, "compile": 110.0},
        stop_reason=f"fixed: {len(attempts)} of {ctx.max_attempts} attempts used",
    )


def broken(spec, on_event=None) -> RunSummary:
    """A run function that fails on one problem: the evaluation must carry on."""
    if "gemm" in Path(spec.problem_path).stem:
        raise RuntimeError("boom in the graph")
    return run(spec, on_event)


NEEDS_KEY = "FAKE_RUN_API_KEY"


def needs_key(spec, on_event=None) -> RunSummary:
    """A run that cannot start without FAKE_RUN_API_KEY, the way the graph reports it (a summary whose
    stop reason is "setup failed: ...", no attempts); with the key it runs like ``run``."""
    if not os.environ.get(NEEDS_KEY):
        (Path(spec.run_dir) / "run.json").write_text("{}")  # what a graph run leaves before its planner fails
        return RunSummary(problem=Path(spec.problem_path).stem, tier=spec.tier, policy=spec.policy,
                          backend="interpreter", gpu="none", attempts=[],
                          stop_reason=f"setup failed: the environment variable {NEEDS_KEY} holding its API key is not set")
    return run(spec, on_event)


def pinned(spec, on_event=None) -> RunSummary:
    """``run``, noting where it ran: the device its worker was pinned to and the worker's nvcc share."""
    summary = run(spec, on_event)
    where = f"gpu={os.environ.get('CUDA_VISIBLE_DEVICES', '')} build_jobs={os.environ.get('MUCUTLASS_BUILD_JOBS', '')}"
    return summary.model_copy(update={"backend_reason": where})


PLATEAU_TIMES = (100.0, 80.0, 60.0, 50.0)  # then 55 us for every later attempt: the best stays at attempt 4


def plateau(spec, on_event=None) -> RunSummary:
    """A log whose best comes at attempt 4 and never improves after: attempt 1 takes 10 s of wall time
    (its build), every later one 1 s; t_SOL 10 us, eager fp32 120 us (beaten from attempt 2)."""
    attempts = []
    for index in range(1, spec.max_attempts + 1):
        t_us = PLATEAU_TIMES[index - 1] if index <= len(PLATEAU_TIMES) else 55.0
        a = AttemptRecord(index=index, hypothesis=f"try {index}", program_text=f"program p{index}", reached="done",
                          compile_ok=True, correct=True, t_us=t_us, timing_source="gpu", t_sol_us=10.0,
                          speedup_vs_eager_fp32=120.0 / t_us, wall_s=10.0 if index == 1 else 1.0)
        attempts.append(a)
        if on_event:
            on_event({"attempt": a})
    return RunSummary(problem=Path(spec.problem_path).stem, tier=spec.tier, policy=spec.policy, backend="cutlass",
                      gpu="h200", attempts=attempts, best_index=4, best_t_us=50.0, t_sol_us=10.0,
                      reference_us={"eager_fp32": 120.0}, stop_reason="fixed: budget spent")
