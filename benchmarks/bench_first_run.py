"""Where the README's first command spends its time: `mucutlass optimize` on its built-in default, end to end, and
the judge's stages per attempt on the same problem, each with the fork server on and off
(``MUCUTLASS_FORK_SERVER``). Writes ``<out>/<date>-cpu-first-run-stages.{json,md}`` (or ``-<gpu>-``) and prints
the tables.

    python benchmarks/bench_first_run.py --out benchmarks/results            # a few minutes on two cores
    python benchmarks/bench_first_run.py --sections stages --attempts 4      # the judge's stages only

a. optimize: the command in a fresh process (cold: a new judge, new candidate processes), its wall time, the CPU
   its process tree spent, and each attempt's wall time (``attempts.json``).
b. stages: validate + profile of the offline tier's first program, ``--attempts`` times in one harness, with the
   judge's seconds per stage (``Validation.info['stages']``, ``Timing.stages``): process_start is the wait for a
   fresh candidate process.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from results_io import gpu_slug, write_result  # noqa: E402

PROBLEM = ROOT / "evals" / "suites" / "smoke" / "02_linear_relu_tiny.py"  # what `mucutlass optimize` runs unnamed
MODES = {"fork server": "1", "a new Python per process": "0"}


def _children_cpu_s() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def optimize_row(mode: str, flag: str) -> dict:
    """The README's first command, cold, in a fresh process."""
    env = {**os.environ, "MUCUTLASS_FORK_SERVER": flag, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    with tempfile.TemporaryDirectory(prefix="mucutlass-first-run-") as tmp:
        load = os.getloadavg()[0]
        cpu0, t0 = _children_cpu_s(), time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "mucutlass", "optimize", "--out", f"{tmp}/run", "--json"],
                              cwd=tmp, env=env, capture_output=True, text=True)
        wall_s, cpu_s = time.perf_counter() - t0, _children_cpu_s() - cpu0
        attempts_file = Path(tmp, "run", "attempts.json")
        attempts = json.loads(attempts_file.read_text()) if attempts_file.exists() else []
    walls = [round(a.get("wall_s") or 0.0, 2) for a in attempts]
    return {"section": "optimize", "mode": mode, "exit_code": done.returncode, "wall_s": round(wall_s, 1),
            "cpu_s": round(cpu_s, 1), "attempts": len(attempts), "attempt_wall_s": walls,
            "attempt_median_s": round(statistics.median(walls), 2) if walls else None,
            "attempt_max_s": max(walls) if walls else None, "load_before": round(load, 2),
            "error": done.stderr.strip().splitlines()[-1][:200] if done.returncode else ""}


def stages_row(mode: str, flag: str, attempts: int) -> dict:
    """validate + profile of the offline tier's first program, ``attempts`` times in one harness."""
    os.environ["MUCUTLASS_FORK_SERVER"] = flag
    from dsl_compiler.frontend import trace_problem
    from evals.judge import Candidate, Harness, HarnessSettings
    from evals.problems import load_problem

    problem = load_problem(PROBLEM)
    candidate = Candidate.from_program(trace_problem(problem).program)
    per_attempt, stage_sums = [], {}
    with Harness(HarnessSettings()) as harness:
        for _ in range(attempts):
            t0 = time.perf_counter()
            v = harness.validate(problem, candidate)
            t = harness.profile(problem, candidate)
            per_attempt.append(round(time.perf_counter() - t0, 3))
            for stages in (v.info.get("stages") or {}, t.stages or {}):
                for name, seconds in stages.items():
                    stage_sums.setdefault(name, []).append(seconds)
            assert v.correct, v.failure_reason
    medians = {k: round(statistics.median(v), 3) for k, v in sorted(stage_sums.items())}
    return {"section": "stages", "mode": mode, "attempts": attempts, "attempt_s": per_attempt,
            "first_attempt_s": per_attempt[0], "later_median_s": round(statistics.median(per_attempt[1:] or per_attempt), 3),
            "stage_median_s": medians}


def markdown(doc: dict) -> str:
    lines = [f"# The README's first command, where the time goes ({doc['date']})", "",
             f"{doc['versions']}; {os.cpu_count()} CPU cores; load average before each row in the table.", ""]
    opt = [r for r in doc["rows"] if r["section"] == "optimize"]
    if opt:
        lines += ["| `mucutlass optimize` (cold) | wall (s) | CPU (s) | attempts | per attempt, median / max (s) | load "
                  "| each attempt (s) |", "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        lines += [f"| {r['mode']} | {r['wall_s']} | {r['cpu_s']} | {r['attempts']} | {r['attempt_median_s']} / "
                  f"{r['attempt_max_s']} | {r['load_before']} | {', '.join(map(str, r['attempt_wall_s']))} |" for r in opt]
        lines.append("")
    st = [r for r in doc["rows"] if r["section"] == "stages"]
    if st:
        names = sorted({k for r in st for k in r["stage_median_s"]})
        lines += ["| judge, validate + profile | first attempt (s) | later, median (s) | " +
                  " | ".join(f"{n} (s)" for n in names) + " |", "| --- |" + " ---: |" * (2 + len(names))]
        lines += [f"| {r['mode']} | {r['first_attempt_s']} | {r['later_median_s']} | " +
                  " | ".join(str(r["stage_median_s"].get(n, "")) for n in names) + " |" for r in st]
        lines.append("")
    lines.append(doc["summary"]["note"])
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "mucutlass-first-run")
    ap.add_argument("--sections", default="optimize,stages")
    ap.add_argument("--modes", default=",".join(MODES), help="fork server, a new Python per process")
    ap.add_argument("--attempts", type=int, default=6)
    args = ap.parse_args(argv)
    import torch

    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES] + sorted(sections - {"optimize", "stages"})
    if bad:
        print(f"error: unknown mode or section {bad[0]!r} (modes: {', '.join(MODES)}; sections: optimize, stages)",
              file=sys.stderr)
        return 2
    rows = []
    for mode in modes:
        if "optimize" in sections:
            rows.append(optimize_row(mode, MODES[mode]))
            print(json.dumps(rows[-1]), flush=True)
        if "stages" in sections:
            rows.append(stages_row(mode, MODES[mode], args.attempts))
            print(json.dumps(rows[-1]), flush=True)
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    by = {(r["section"], r["mode"]): r for r in rows}
    fast, slow = by.get(("optimize", "fork server")), by.get(("optimize", "a new Python per process"))
    summary = {"optimize_wall_s": {m: by[("optimize", m)]["wall_s"] for m in modes if ("optimize", m) in by},
               "note": "a cold run: the judge and the fork server import torch once each; with the fork server a "
                       "candidate process is a fork of it (milliseconds), without it a new Python importing torch."}
    if fast and slow:
        summary["speedup"] = round(slow["wall_s"] / fast["wall_s"], 2)
    doc = {"date": dt.date.today().isoformat(), "gpu": gpu or "none",
           "versions": f"Python {sys.version.split()[0]}, torch {torch.__version__}", "rows": rows, "summary": summary}
    write_result(args.out / f"{doc['date']}-{gpu_slug(gpu)}-first-run-stages", doc, markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
