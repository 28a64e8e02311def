"""Sealed calls (evals/judge/sealed.py) on this machine's GPU: per candidate the reported time t, the judge-clocked
bound U, K, t / U and the verdict, for honest candidates on three kinds of problem (a compute-bound 4096
GEMM, a memory-bound elementwise problem, a tiny launch-bound one) and for the timing cheats of the
adversarial set. Shows whether ALPHA and BETA_US leave room for honest candidates (t / U well above
ALPHA where calls are long) and how far below it the cheats land.

    python benchmarks/bench_sealed.py --out $OUT        # writes sealed13-h200.{json,md}
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evals import sealed  # noqa: E402
from evals.judge import Candidate, Harness, HarnessSettings  # noqa: E402
from evals.problems import load_problem, load_suite  # noqa: E402
from tests.adversarial.cases import candidate_for, problem_for  # noqa: E402

GEMM = '''
import torch, torch.nn as nn
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, A, B):
        return torch.matmul(A, B)
'''
LINEAR_RELU = (ROOT / "tests" / "adversarial" / "honest.py").read_text()
CHEATS = ["fake_cuda_graph.py", "skips_l2_flush.py", "patch_statistics_median.py", "memo_eager_fallback.py",
          "patch_harness_timer.py", "rewrites_runner_timing.py", "patched_timer.py", "side_stream.py"]


def _suite_problem(suite: str, name: str):
    return next(p for p in load_suite(suite) if p.name == name)


def _f(v) -> str:
    return "-" if v is None else f"{v:.3g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--repeats", type=int, default=2, help="profiles of each honest candidate")
    ap.add_argument("--budget-s", type=float, default=150.0)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    harness = Harness(HarnessSettings(watchdog_s=60))
    info = harness.worker_info()
    problems_dir = ROOT / "benchmarks" / "harness_problems"
    honest = [
        ("gemm_4096 (compute-bound)", _suite_problem("builtin", "01_gemm_square"), Candidate.from_source(GEMM)),
        ("large_cheap_relu (memory-bound)", load_problem(problems_dir / "large_cheap_relu.py"),
         Candidate.from_source((problems_dir / "large_cheap_relu_candidate.py").read_text())),
        ("linear_relu_tiny (launch-bound)", _suite_problem("smoke", "02_linear_relu_tiny"),
         Candidate.from_source(LINEAR_RELU)),
        ("11_linear_relu", _suite_problem("builtin", "11_linear_relu"), Candidate.from_source(LINEAR_RELU)),
    ]
    jobs = [(f"honest {name}", p, c, True) for name, p, c in honest for _ in range(args.repeats)]
    gpu_linear = problem_for("linear_relu", True)
    jobs += [(f"cheat {f}", gpu_linear, candidate_for(f, gpu_linear), False) for f in CHEATS]
    runs = []
    for label, problem, cand, is_honest in jobs:
        if time.perf_counter() - t_start > args.budget_s:
            runs.append({"case": label, "honest": is_honest, "skipped": "budget"})
            continue
        t0 = time.perf_counter()
        try:
            t = harness.profile(problem, cand)
            s = t.sealed or {}
            row = {"case": label, "honest": is_honest, "t_reported_us": t.median_us, "U_us": s.get("bound_us"),
                   "K": s.get("k"), "t_over_U": s.get("ratio"), "beta_us": s.get("beta_us"),
                   "floor_us": s.get("floor_us"), "bounds_us": s.get("bounds_us"), "method": t.method,
                   "valid": t.valid, "rule": t.rule, "reason": (t.reason or "")[:240],
                   "wall_bound_us": t.wall_bound_us, "stages": t.stages, "wall_s": round(time.perf_counter() - t0, 2)}
        except Exception as exc:  # noqa: BLE001 - a row that says why
            row = {"case": label, "honest": is_honest, "error": f"{type(exc).__name__}: {exc}"[:300]}
        runs.append(row)
        print(json.dumps({k: row.get(k) for k in ("case", "t_reported_us", "U_us", "K", "t_over_U", "rule", "reason")}),
              flush=True)
    harness.close()
    doc = {"gpu": info.get("gpu_name"), "torch": info.get("torch"), "alpha": sealed.ALPHA, "beta_us": sealed.BETA_US,
           "k_range": [sealed.K_MIN, sealed.K_MAX], "target_us": sealed.TARGET_US, "runs": runs,
           "honest_flagged": [r["case"] for r in runs if r.get("honest") and r.get("rule") == "timing_tampered"],
           "cheats_caught": [r["case"] for r in runs if r.get("honest") is False and r.get("rule") == "timing_tampered"]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sealed13-h200.json").write_text(json.dumps(doc, indent=2))
    lines = [f"# Sealed calls on {doc['gpu']} (alpha {sealed.ALPHA}, beta {sealed.BETA_US})", "",
             "| case | t reported (us) | U (us) | K | t / U | verdict |", "| --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        verdict = r.get("rule") or ("error" if "error" in r else r.get("skipped") or "ok")
        lines.append(f"| {r['case']} | {_f(r.get('t_reported_us'))} | {_f(r.get('U_us'))} | {r.get('K') or '-'} | "
                     f"{_f(r.get('t_over_U'))} | {verdict} |")
    lines += ["", f"honest flagged: {doc['honest_flagged'] or 'none'}; cheats caught (timing_tampered): "
              f"{len(doc['cheats_caught'])}/{len(CHEATS)}"]
    (out / "sealed13-h200.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if doc["honest_flagged"] else 0


if __name__ == "__main__":
    sys.exit(main())
