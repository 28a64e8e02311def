"""Runs the adversarial set through the harness on this machine's GPU and writes what caught each
case, then checks that an honest attempt after the illegal address runs normally.

    python -m tests.adversarial.report [--out benchmarks/results]
    python -m tests.adversarial.report --suite smoke --problem 02_linear_relu_tiny --out /tmp  # a CPU dry run
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

from evals.harness import Candidate, Harness, HarnessSettings
from evals.problems import load_suite
from tests.adversarial.cases import CASES, HERE


def caught(result, case, on_gpu: bool) -> bool:
    if case.caught_by == "pytorch_only":
        return any(f.startswith("pytorch_only:") for f in result.flags)
    if case.stage == "profile":
        bad = not result.valid
    else:
        bad = not result.correct
    return bad and result.rule == case.caught_by and result.reason.startswith(case.caught_by + ":")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "benchmarks" / "results"))
    ap.add_argument("--suite", default="builtin")
    ap.add_argument("--problem", default="11_linear_relu", help="a Linear+ReLU problem of the suite")
    ap.add_argument("--watchdog-s", type=float, default=60.0)
    args = ap.parse_args(argv)
    problem = next(p for p in load_suite(args.suite) if p.name == args.problem)
    harness = Harness(HarnessSettings(watchdog_s=args.watchdog_s))
    info = harness.worker_info()
    on_gpu = bool(info.get("cuda"))
    rows = []
    honest = Candidate.from_file(HERE / "honest.py")
    for case in CASES:
        p = problem
        if case.strict:
            from evals.problems import load_problem

            p = load_problem(problem.path)
            p.tolerance, p.allowed_precisions = 1e-4, ("f32", "tf32")
        if not on_gpu and not case.cpu:
            rows.append({"case": case.file, "skipped": "needs a GPU"})
            continue
        t0 = time.perf_counter()
        cand = Candidate.from_source(case.source(), name=case.file)
        res = harness.profile(p, cand) if case.stage == "profile" else harness.validate(p, cand)
        wall = time.perf_counter() - t0
        after = harness.validate(problem, honest)
        after_t = harness.profile(problem, honest)
        rows.append({
            "case": case.file, "expected": case.caught_by, "caught": caught(res, case, on_gpu),
            "reason": res.reason, "flags": res.flags, "crashed": res.crashed, "wall_s": round(wall, 3),
            "next_attempt_correct": after.correct, "next_attempt_timed_us": after_t.median_us,
        })
        print(f"{case.file:<22} caught={rows[-1]['caught']} next_ok={after.correct} :: {res.reason[:100]}", file=sys.stderr)
    harness.close()
    doc = {"date": dt.date.today().isoformat(), "gpu_name": info.get("gpu_name"), "torch": info.get("torch"),
           "problem": problem.key, "restarts": harness.restarts, "rows": rows,
           "all_caught": all(r.get("caught", True) for r in rows),
           "all_next_attempts_ok": all(r.get("next_attempt_correct", True) for r in rows)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{doc['date']}-{'h200' if on_gpu else 'cpu'}-adversarial.json"
    path.write_text(json.dumps(doc, indent=2))
    print(f"wrote {path}: all caught {doc['all_caught']}, next attempts ok {doc['all_next_attempts_ok']}", file=sys.stderr)
    return 0 if doc["all_caught"] and doc["all_next_attempts_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
