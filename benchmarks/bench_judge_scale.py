"""The judge at KernelBench's largest sizes: every problem of a suite (``builtin-huge`` by default) judged with
honest candidates, ``--judges`` judges sharing one GPU (each keeps to its share: ``judges_per_gpu``), and per
problem and candidate the verdict, the judge's overhead per attempt beside its target, and the peak memory of the
judge and the candidate processes. Honest candidates: the reference's own PyTorch layers as a ``ModelNew``
(rightly flagged ``pytorch_only``, never rejected) and, with ``--programs``, the offline tier's first program on
the cutlass backend (built first, one nvcc per core).

    OUT=... python3 benchmarks/bench_judge_scale.py --suite builtin-huge --judges 3 --programs --out $OUT

Overhead per attempt: validate and profile wall time less the candidate process's own handlers and the timed
calls (``stages``); its target is 2 s plus twice the reference's eager time for each reference call the checks
need (the sets, the reordered set, the range probes, the profile's sets and sealed calls). Writes
``<date>-<gpu>-judge-scale.{json,md}``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import queue
import sys
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from results_io import gpu_slug, write_result  # noqa: E402

from evals.environment import collect_environment  # noqa: E402
from evals.judge import Candidate, Harness, HarnessSettings  # noqa: E402
from evals.problems import load_suite  # noqa: E402

GB = 1 << 30
BASE_OVERHEAD_S = 2.0
REFERENCE_CALLS_PER_ATTEMPT = 20  # 5 sets, the reordered one, ~4 range probes; 3 timed + 3 more sets, sealed K


def pytorch_candidate(problem) -> Candidate:
    """The reference's own layers as a ModelNew: honest, and all PyTorch's work."""
    return Candidate.from_source(problem.source + "\n\nclass ModelNew(Model):\n    pass\n", name="pytorch")


def offline_program(problem, gpu: str):
    """The offline tier's first program for ``problem`` (None where it has none)."""
    from dsl_compiler.parser import parse
    from nodes.offline.policy import OfflineTier

    for c in OfflineTier(use_record=False).candidates(problem, gpu)[:1]:
        program = parse(c.program_text)[0]
        if program is not None and program.kernels:
            return program
    return None


def _listed(args: tuple[str, str, str]) -> tuple[str, str | None, str]:
    """One problem's first program as JSON, in a process of its own (tracing is not shared between threads)."""
    suite, name, gpu = args
    problem = next(p for p in load_suite(suite) if p.name == name)
    try:
        program = offline_program(problem, gpu)
    except Exception as exc:  # noqa: BLE001 - a problem without a program is a row that says why
        return name, None, f"no program: {type(exc).__name__}: {exc}"[:200]
    if program is None:
        return name, None, "the offline tier listed no program with a kernel"
    return name, program.model_dump_json(), ""


def build_programs(suite: str, problems: list, gpu: str, jobs: int) -> dict:
    """name -> (Candidate or None, why): each problem's first program (listed in processes side by side), built on
    the cutlass backend as soon as it is listed (one nvcc per core)."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from dsl_compiler.build import build_program
    from dsl_compiler.ir import Program

    def build(name: str, text: str):
        program = Program.model_validate_json(text)
        result = build_program(program, jobs=1)
        if not result.ok:
            why = result.diagnostics[0].message if result.diagnostics else "build failed"
            return name, (None, f"build failed: {why}"[:200])
        return name, (Candidate.from_program(program, backend="cutlass", artifacts=result.artifacts), "")

    start = time.perf_counter()
    out: dict = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as builders, \
            ProcessPoolExecutor(max_workers=max(1, min(jobs, len(problems), 8))) as listers:
        builds = []
        for done in as_completed([listers.submit(_listed, (suite, p.name, gpu)) for p in problems]):
            name, text, why = done.result()
            if text is None:
                out[name] = (None, why)
            else:
                builds.append(builders.submit(build, name, text))
        out.update(b.result() for b in builds)
    print(f"programs listed and built in {time.perf_counter() - start:.0f} s", flush=True)
    return out


def _mb(n) -> float | None:
    return round(n / (1 << 20), 1) if isinstance(n, (int, float)) else None


def judge_one(harness: Harness, problem, kind: str, candidate: Candidate, eager_us: float | None) -> dict:
    v = harness.validate(problem, candidate)
    t = harness.profile(problem, candidate) if v.correct else None
    stages_v, stages_p = v.info.get("stages") or {}, (t.stages if t is not None else {})
    own_s = sum(s.get(k, 0.0) for s in (stages_v, stages_p) for k in ("candidate", "timed", "process_start"))
    wall_s = v.wall_s + (t.wall_s if t is not None else 0.0)
    target_s = BASE_OVERHEAD_S + 2 * (eager_us or 0.0) * 1e-6 * REFERENCE_CALLS_PER_ATTEMPT
    plan = v.info.get("memory_plan") or {}
    mem_v, mem_p = v.info, (t.memory if t is not None else {})
    judge_peak = max(mem_v.get("judge_peak_device_bytes") or 0, mem_p.get("judge_peak_device_bytes") or 0)
    cand_peak = max(mem_v.get("candidate_peak_device_bytes") or 0, mem_p.get("candidate_peak_device_bytes") or 0)
    cand_host = max(mem_v.get("candidate_peak_host_bytes") or 0, mem_p.get("candidate_peak_host_bytes") or 0)
    flags = [f.split(":", 1)[0] for f in (*v.flags, *(t.flags if t is not None else []))]
    # an honest candidate is correct and timed, flagged at most pytorch_only (which the reference's own layers are)
    honest_ok = v.correct and (t is None or t.valid) and all(f == "pytorch_only" for f in flags)
    return {
        "problem": problem.name, "candidate": kind, "correct": bool(v.correct),
        "timing_valid": bool(t is not None and t.valid), "rule": v.rule if not v.correct else (t.rule if t else None),
        "reason": (v.reason or (t.reason if t is not None else ""))[:900], "flags": flags,
        "memory_steps_mb": v.info.get("memory_steps_mb"),
        "verdict_right": bool(honest_ok),
        "t_us": t.median_us if t is not None else None, "eager_fp32_us": eager_us,
        "validate_s": round(v.wall_s, 2), "profile_s": round(t.wall_s, 2) if t is not None else None,
        "overhead_s": round(max(0.0, wall_s - own_s), 2), "overhead_target_s": round(target_s, 2),
        "overhead_ok": wall_s - own_s <= target_s,
        "judge_peak_gpu_mb": _mb(judge_peak), "candidate_peak_gpu_mb": _mb(cand_peak),
        "candidate_peak_host_mb": _mb(cand_host), "judge_rss_mb": _mb(v.worker_rss_bytes),
        "hold_references": plan.get("hold_references"), "timing_sets": plan.get("timing_sets"),
        "judge_share_gb": round((plan.get("judge_bytes") or 0) / GB, 1),
        "candidate_share_gb": round((plan.get("candidate_bytes") or 0) / GB, 1),
        "stages_validate": stages_v, "stages_profile": stages_p,
        "stages_peak_mb": v.info.get("stages_peak_mb"),
        "reference_work_mb": _mb((plan.get("footprint") or {}).get("reference_work_bytes")),
        # the sealed calls' bound and the timing lock's waits (what a timing_tampered flag rests on)
        "sealed": {k: (t.sealed or {}).get(k) for k in ("k", "t_us", "bound_us", "bounds_us", "floor_us", "wall_s",
                                                         "ping_s", "beta_us", "ratio", "flagged")} if t else None,
        "timing_lock": {"validate": v.info.get("timing_lock"), "profile": t.timing_lock if t else None},
    }


def run(problems: list, programs: dict, judges: int, budget_s: float, watchdog_s: float) -> tuple[list, dict]:
    """Every (problem, candidate) on ``judges`` judges in threads, each with its own judge process."""
    jobs: queue.Queue = queue.Queue()
    for p in problems:
        jobs.put((p, "pytorch", pytorch_candidate(p)))
        cand, why = programs.get(p.name, (None, "not built (--programs off)"))
        jobs.put((p, "program", cand) if cand is not None else (p, "program", why))
    rows: list = []
    eager: dict = {}
    lock = threading.Lock()
    deadline = time.monotonic() + budget_s
    settings = HarnessSettings(judges_per_gpu=judges, compile_reference=False, watchdog_s=watchdog_s)

    def worker(k: int) -> None:
        with Harness(settings) as harness:
            while time.monotonic() < deadline:
                try:
                    problem, kind, cand = jobs.get_nowait()
                except queue.Empty:
                    return
                if isinstance(cand, str):
                    row = {"problem": problem.name, "candidate": kind, "skipped": cand}
                else:
                    with lock:
                        known = problem.name in eager
                    if not known:
                        ref = harness.reference_timings(problem)
                        with lock:
                            eager[problem.name] = ref.eager_fp32_us
                    t0 = time.perf_counter()
                    try:
                        row = judge_one(harness, problem, kind, cand, eager.get(problem.name))
                    except Exception as exc:  # noqa: BLE001 - a bench row, not a crash of the bench
                        row = {"problem": problem.name, "candidate": kind, "error": f"{type(exc).__name__}: {exc}"[:300]}
                    row["judge"], row["wall_s"] = k, round(time.perf_counter() - t0, 1)
                print(f"judge {k}: {row['problem']} {kind}: " + (
                    f"correct={row.get('correct')} rule={row.get('rule')} overhead={row.get('overhead_s')} s "
                    f"(target {row.get('overhead_target_s')}) judge {row.get('judge_peak_gpu_mb')} MB, candidate "
                    f"{row.get('candidate_peak_gpu_mb')} MB" if "correct" in row else row.get("skipped", row.get("error"))),
                    flush=True)
                with lock:
                    rows.append(row)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(judges)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    left = []
    while not jobs.empty():
        p, kind, _ = jobs.get_nowait()
        left.append(f"{p.name}/{kind}")
    return sorted(rows, key=lambda r: (r["problem"], r["candidate"])), {"not_reached": left}


def lock_wait_s(row: dict) -> float:
    """Seconds the row's operations waited at the GPU's timing lock for the other judges' measurements."""
    return round(sum(float((hold or {}).get("waited_s") or 0.0) for hold in (row.get("timing_lock") or {}).values()), 2)


def own_overhead_s(row: dict) -> float:
    """The row's overhead without its waits for the other judges' measurements."""
    return round(max(0.0, float(row["overhead_s"]) - lock_wait_s(row)), 2)


def summary(rows: list) -> dict:
    judged = [r for r in rows if "correct" in r]
    return {
        "judged": len(judged), "verdicts_right": sum(r["verdict_right"] for r in judged),
        "correct": sum(r["correct"] for r in judged),
        "overhead_within_target": sum(bool(r["overhead_ok"]) for r in judged),
        "own_overhead_within_target": sum(own_overhead_s(r) <= r["overhead_target_s"] for r in judged),
        "median_overhead_s": round(statistics.median([r["overhead_s"] for r in judged]), 2) if judged else None,
        "median_own_overhead_s": round(statistics.median([own_overhead_s(r) for r in judged]), 2) if judged else None,
        "max_judge_peak_gpu_mb": max((r["judge_peak_gpu_mb"] or 0 for r in judged), default=None),
        "max_candidate_peak_gpu_mb": max((r["candidate_peak_gpu_mb"] or 0 for r in judged), default=None),
        "max_candidate_peak_host_mb": max((r["candidate_peak_host_mb"] or 0 for r in judged), default=None),
        "errors": [f"{r['problem']}/{r['candidate']}: {r['error']}" for r in rows if "error" in r],
        "skipped": [f"{r['problem']}/{r['candidate']}: {r['skipped']}" for r in rows if "skipped" in r],
    }


def to_markdown(doc: dict) -> str:
    s = doc["summary"]
    lines = [f"# The judge at scale: {doc['suite']} on {doc['gpu']} ({doc['date']})", "",
             f"{doc['judges']} judges sharing the GPU. Versions: " + ", ".join(f"{k} {v}" for k, v in doc["versions"].items()
                                                                              if v), "",
             f"Verdicts right: {s['verdicts_right']} of {s['judged']} honest candidates (correct {s['correct']}); "
             f"overhead within its target: {s['overhead_within_target']} of {s['judged']} (median "
             f"{s.get('median_overhead_s')} s; without the waits for the other judges' measurements "
             f"{s.get('own_overhead_within_target')} of {s['judged']}, median {s.get('median_own_overhead_s')} s). "
             f"Peak GPU memory: judge "
             f"{s['max_judge_peak_gpu_mb']} MB, candidate {s['max_candidate_peak_gpu_mb']} MB; candidate host "
             f"{s['max_candidate_peak_host_mb']} MB.", "",
             "| problem | candidate | correct | rule / flags | t (us) | eager fp32 (us) | validate (s) | profile (s) | "
             "overhead (s) | lock wait (s) | target (s) | judge GPU (MB) | cand. GPU (MB) | cand. host (MB) | refs kept | timed sets |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for r in doc["rows"]:
        if "correct" not in r:
            lines.append(f"| {r['problem']} | {r['candidate']} | - | {r.get('skipped') or r.get('error')} |"
                         + " |" * 12)
            continue
        rule = r["rule"] or ", ".join(r["flags"]) or ""
        t = f"{r['t_us']:.0f}" if r["t_us"] else "-"
        e = f"{r['eager_fp32_us']:.0f}" if r["eager_fp32_us"] else "-"
        lines.append(f"| {r['problem']} | {r['candidate']} | {'yes' if r['correct'] else 'NO'} | {rule} | {t} | {e} | "
                     f"{r['validate_s']} | {r['profile_s'] if r['profile_s'] is not None else '-'} | {r['overhead_s']} | "
                     f"{lock_wait_s(r)} | "
                     f"{r['overhead_target_s']} | {r['judge_peak_gpu_mb']} | {r['candidate_peak_gpu_mb']} | "
                     f"{r['candidate_peak_host_mb']} | {r['hold_references']} | {r['timing_sets']} |")
    if doc.get("note"):
        lines[1:1] = ["", f"Note: {doc['note']}"]
    if s["errors"]:
        lines += ["", "Errors:", *[f"- {e}" for e in s["errors"]]]
    if doc.get("not_reached"):
        lines += ["", f"Not reached within the budget: {', '.join(doc['not_reached'])}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="builtin-huge")
    ap.add_argument("--only", nargs="*", help="problem names (default: all of the suite)")
    ap.add_argument("--judges", type=int, default=3, help="judges sharing the GPU")
    ap.add_argument("--programs", action="store_true", help="also judge the offline tier's first program (cutlass)")
    ap.add_argument("--jobs", type=int, default=16, help="parallel nvcc builds")
    ap.add_argument("--budget-s", type=float, default=420.0, help="start no judgement after this many seconds")
    ap.add_argument("--watchdog-s", type=float, default=300.0)
    ap.add_argument("--gpu", default="h200", help="the GPU the offline tier plans for")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    problems = [p for p in load_suite(args.suite) if not args.only or p.name in args.only]
    start = time.monotonic()
    programs = build_programs(args.suite, problems, args.gpu, args.jobs) if args.programs else {}
    rows, extra = run(problems, programs, args.judges, max(0.0, args.budget_s - (time.monotonic() - start)),
                      args.watchdog_s)
    env = collect_environment(backend="cutlass" if args.programs else None)
    doc = {"suite": args.suite, "date": dt.date.today().isoformat(), "gpu": env.get("gpu") or env.get("gpu_name"),
           "judges": args.judges, "versions": env.get("versions") or {}, "rows": rows, **extra}
    doc["summary"] = summary(rows)
    stem = Path(args.out) / f"{doc['date']}-{gpu_slug(doc['gpu'])}-judge-scale-{args.suite}"
    write_result(stem, doc, to_markdown(doc))
    return 0 if doc["summary"]["verdicts_right"] == doc["summary"]["judged"] else 1


if __name__ == "__main__":
    sys.exit(main())
