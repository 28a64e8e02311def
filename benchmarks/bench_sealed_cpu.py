"""Sealed calls on the CPU (cpu_timing): per candidate the reported time t, the judge-clocked bound U, the floor
taken out of it, t / U and the verdict, on a 256x768x768 Linear + ReLU, with ``--busy N`` processes spinning
beside the judge (a loaded CI host). Candidates: an honest one, the rewritten-timing cheat (reports a fifth of
every time) and the cheat whose work runs in a thread it joins inside the call.

    python benchmarks/bench_sealed_cpu.py --busy 2 --out benchmarks/results   # writes <date>-cpu-sealed-bound.{json,md}
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import platform
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.results_io import write_result  # noqa: E402

PROBLEM = '''
import torch, torch.nn as nn
TOLERANCE = 1e-3
class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
    def forward(self, x):
        return torch.relu(self.fc(x))
def get_inputs():
    return [torch.rand(256, 768)]
def get_init_inputs():
    return [768, 768]
'''
CANDIDATES = {"honest": (ROOT / "tests" / "adversarial" / "honest.py"),
              "rewrites_runner_timing": ROOT / "tests" / "adversarial" / "rewrites_runner_timing.py",
              "short_lived_threads": ROOT / "tests" / "adversarial" / "short_lived_threads.py"}


def _spin() -> None:
    while True:
        pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--busy", type=int, default=0, help="processes spinning beside the judge")
    ap.add_argument("--repeats", type=int, default=3, help="profiles of each candidate")
    args = ap.parse_args(argv)

    import torch

    from evals.judge.client import Candidate, Harness, HarnessSettings
    from evals.problems import load_problem

    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for p in spinners:
        p.start()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "linear_relu_768.py"
            path.write_text(PROBLEM)
            problem = load_problem(path)
            harness = Harness(HarnessSettings(device="cpu", watchdog_s=60, cpu_timing=True, n_input_sets=3))
            try:
                for name, source in CANDIDATES.items():
                    for run in range(args.repeats):
                        t = harness.profile(problem, Candidate.from_source(source.read_text()))
                        s = t.sealed
                        rows.append({"candidate": name, "run": run + 1, "valid": t.valid, "rule": t.rule,
                                     "t_us": t.median_us, "bound_us": s.get("bound_us"), "floor_us": s.get("floor_us"),
                                     "k": s.get("k"), "ratio": s.get("ratio"), "flagged": s.get("flagged")})
                        print(rows[-1], flush=True)
            finally:
                harness.close()
    finally:
        for p in spinners:
            p.terminate()
    caught = {n: sum(not r["valid"] and r["rule"] == "timing_tampered" for r in rows if r["candidate"] == n)
              for n in CANDIDATES}
    doc = {"suite": "sealed-bound-cpu", "date": datetime.date.today().isoformat(), "gpu": None,
           "machine": f"{platform.machine()}, {multiprocessing.cpu_count()} cores, {args.busy} busy processes beside",
           "versions": {"python": platform.python_version(), "torch": torch.__version__},
           "rows": rows, "summary": {"runs_per_candidate": args.repeats, "timing_tampered": caught,
                                      "honest_valid": sum(r["valid"] for r in rows if r["candidate"] == "honest")}}
    lines = [f"# Sealed bound on the CPU ({doc['date']}, {doc['machine']})", "",
             "| candidate | run | t (us) | U (us) | floor (us) | K | t / U | verdict |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        verdict = "valid" if r["valid"] else r["rule"]
        cells = [f"{r[key]:.0f}" if r[key] is not None else "-" for key in ("t_us", "bound_us", "floor_us")]
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        lines.append(f"| {r['candidate']} | {r['run']} | {' | '.join(cells)} | {r['k']} | {ratio} | {verdict} |")
    stem = Path(args.out) / f"{doc['date']}-cpu-sealed-bound"
    lines += ["", "The cheats must not pass with a lie: rewrites_runner_timing is timing_tampered; short_lived_threads is "
              "valid only with its work's time (t close to the honest one), not the join's."]
    write_result(stem, doc, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
