"""One evaluation on 1 GPU and on 2: the same suite and settings, the wall time of each and whether
the results are the same.

    python3 benchmarks/bench_gpus.py --out DIR [--suite smoke] [--problems 4] [--variants dsl,dsl+sol]
                                      [--max-attempts 2] [--gpus 2] [--executor local|ray]

The kernels the runs are expected to build (the offline tier's first candidates of each problem) are
built first, in parallel over the host's cores, into a kernel cache both evaluations share, so the two
times compare the spreading of the runs over the GPUs and not who paid for the builds; the evaluation
on all GPUs runs first, so anything it still had to build is a cache hit for the one on one GPU (which
can only make the measured ratio smaller). Writes DIR/gpus.json and DIR/gpus.md.

Results are "the same" when every run tried the same programs in the same order with the same
outcome (compiled, correct) and kept the same best program; times are measured on different
devices, so they are compared, not required equal.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def problems_of(suite: str, count: int | None) -> dict[str, str]:
    """The first ``count`` problems of the suite (an even count splits evenly over 2 GPUs): key -> path."""
    from evals.problems import load_suite

    problems = load_suite(suite)[:count] if count else load_suite(suite)
    return {p.key: str(p.path) for p in problems}


def prebuild(problems: dict[str, str], per_problem: int, gpu: str = "h200") -> dict:
    from dsl_compiler import build
    from evals.problems import load_problem
    from nodes.offline.policy import OfflineTier

    tier = OfflineTier()
    rounds = []
    for path in problems.values():
        progs = [c.program for c in tier.candidates(load_problem(path), gpu)[:per_problem]]
        if progs:
            rounds.append(progs)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, len(rounds))) as pool:
        results = list(pool.map(lambda ps: build.build_program(ps[0], ahead=ps[1:]), rounds))
    build.wait_ahead()
    return {"programs": sum(map(len, rounds)), "wall_s": round(time.perf_counter() - t0, 1),
            "ok": all(r.ok for r in results)}


def _child_eval(out: str, args) -> None:
    """One evaluation in this process (the parent times it): the chosen problems, the offline tier."""
    from evals.executors import LocalExecutor, RayExecutor
    from evals.runner import EvalConfig, run_evaluation

    problems = problems_of(args.suite, args.problems)
    config = EvalConfig(source={"suite": args.suite}, problems=list(problems), tiers=["offline"],
                        variants=args.variants.split(","), memory=False, policies=["fixed"],
                        max_attempts=args.max_attempts, backend=args.backend,
                        executor="ray:local" if args.executor == "ray" else "local")
    executor = RayExecutor("local") if args.executor == "ray" else LocalExecutor(args.workers)
    outcome = run_evaluation(config, problems, out, executor=executor, run_fn="graph.runner:run_spec",
                             show_progress=False)
    print(f"ran {outcome.ran}, failed {len(outcome.failed)}: {outcome.failed}", flush=True)


def evaluate(out: Path, args, gpus: int, timeout_s: float) -> dict:
    cmd = [sys.executable, __file__, "--child-eval", str(out), "--suite", args.suite, "--problems", str(args.problems),
           "--variants", args.variants, "--max-attempts", str(args.max_attempts), "--backend", args.backend,
           "--executor", args.executor, "--workers", str(gpus)]
    env = dict(os.environ)
    env["MUCUTLASS_GPU_IDS"] = ",".join(str(i) for i in range(gpus))
    if args.executor == "ray":
        env["CUDA_VISIBLE_DEVICES"] = env["MUCUTLASS_GPU_IDS"]
    t0 = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"eval-{gpus}gpu.log", "w") as log:
        # its own session: at the time limit the whole tree goes (workers, judges), not the driver alone
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    wall_s = time.perf_counter() - t0
    return {"gpus": gpus, "wall_s": round(wall_s, 1), "exit": proc.returncode, "runs": _runs(out)}


def _runs(out: Path) -> dict:
    from evals.store import ResultsStore, StoreError

    try:
        store = ResultsStore.open_existing(out)
    except StoreError:  # the evaluation never started
        return {}
    runs = {}
    for s in store.summaries(statuses=("done",)):
        runs[f"{s.problem} [{s.variant}]"] = {
            "tried": [[a.program_hash, a.compile_ok, a.correct] for a in s.attempts],
            "best": next((a.program_hash for a in s.attempts if a.index == s.best_index), None),
            "best_t_us": s.best_t_us, "kernel_cache": s.kernel_cache, "time_split_s": s.time_split_s,
        }
    return runs


def compare(one: dict, many: dict) -> dict:
    keys = sorted(set(one) | set(many))
    same = [k for k in keys if k in one and k in many and one[k]["tried"] == many[k]["tried"]
            and one[k]["best"] == many[k]["best"]]
    ratios = [many[k]["best_t_us"] / one[k]["best_t_us"] for k in same
              if one[k]["best_t_us"] and many[k]["best_t_us"]]
    return {"runs": len(keys), "identical": len(same), "differ": [k for k in keys if k not in same],
            "best_t_ratio_range": [round(min(ratios), 3), round(max(ratios), 3)] if ratios else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/mucutlass-bench-gpus"))
    ap.add_argument("--suite", default="smoke")
    ap.add_argument("--variants", default="dsl,dsl+sol")
    ap.add_argument("--max-attempts", type=int, default=2)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--executor", choices=("local", "ray"), default="local")
    ap.add_argument("--backend", default="cutlass", help="cutlass (a GPU host); interpreter checks the script on a CPU")
    ap.add_argument("--prebuild", type=int, default=3, help="candidates per problem built first (0: none)")
    ap.add_argument("--problems", type=int, default=4, help="the suite's first N problems (0: all)")
    ap.add_argument("--eval-timeout-s", type=float, default=170)
    ap.add_argument("--budget-s", type=float, default=0, help="the whole command's time: the last evaluation gets what is left")
    ap.add_argument("--child-eval", help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_eval:
        _child_eval(args.child_eval, args)
        return 0
    started = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "evals"
    data: dict = {"suite": args.suite, "variants": args.variants, "max_attempts": args.max_attempts,
                  "executor": args.executor, "host_cores": os.cpu_count()}
    if args.prebuild:
        data["prebuild"] = prebuild(problems_of(args.suite, args.problems), args.prebuild)
        print("prebuild", data["prebuild"], flush=True)
    results = {}
    for gpus in (args.gpus, 1):  # all GPUs first: what it still builds is a cache hit for the single GPU
        limit_s = args.eval_timeout_s
        if args.budget_s:  # what the command has left, less a margin to write the results
            limit_s = min(limit_s, args.budget_s - (time.perf_counter() - started) - 8)
        try:
            results[gpus] = evaluate(work / f"{gpus}gpu", args, gpus, max(1.0, limit_s))
        except subprocess.TimeoutExpired:
            results[gpus] = {"gpus": gpus, "wall_s": None, "timeout_s": round(limit_s, 1), "exit": "timeout",
                             "runs": _runs(work / f"{gpus}gpu")}
        print(gpus, "GPU(s):", results[gpus]["wall_s"], "s, exit", results[gpus]["exit"], flush=True)
        data[f"gpus_{gpus}"] = results[gpus]
        (out / "gpus.json").write_text(json.dumps(data, indent=1))
    one, many = results[1], results[args.gpus]
    data["wall_ratio"] = round(one["wall_s"] / many["wall_s"], 2) if one["wall_s"] and many["wall_s"] else None
    if one["wall_s"] is None and many["wall_s"]:  # the single GPU ran out of time: its time is at least the limit
        data["wall_ratio_at_least"] = round(one["timeout_s"] / many["wall_s"], 2)
    data["compare"] = compare(one["runs"], many["runs"])
    (out / "gpus.json").write_text(json.dumps(data, indent=1))
    c = data["compare"]
    md = [f"# {args.suite} suite (first {args.problems or 'all'} problems), offline tier, variants {args.variants}, {args.max_attempts} attempts: 1 GPU against {args.gpus}", "",
          f"| GPUs | wall s | exit | runs done |", "| ---: | ---: | --- | ---: |"]
    for g in (1, args.gpus):
        md.append(f"| {g} | {results[g]['wall_s']} | {results[g]['exit']} | {len(results[g]['runs'])} |")
    ratio = (data["wall_ratio"] if data["wall_ratio"] is not None else
             f">= {data['wall_ratio_at_least']} (1 GPU cut at its time limit)" if data.get("wall_ratio_at_least") else
             "not measured (cut at the time limit)")
    md += ["", f"Wall-time ratio (1 GPU / {args.gpus}): **{ratio}** (target >= 1.7).",
           f"Identical results (same programs tried in the same order, same outcomes, same best): {c['identical']} of {c['runs']} runs"
           + (f"; differing: {', '.join(c['differ'])}" if c["differ"] else "") + ".",
           f"Best time, {args.gpus} GPUs / 1 GPU, over the identical runs: {c['best_t_ratio_range']}."]
    if "prebuild" in data:
        md.append(f"Kernels built first: {data['prebuild']['programs']} programs in {data['prebuild']['wall_s']} s.")
    (out / "gpus.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
