"""The offline tier on a problem suite: every problem optimized through the graph (planner, writer,
compiler, validator, profiler, judge) with the built-in offline policy, beside PyTorch's eager
fp32, eager TF32 and torch.compile times and t_SOL. Writes
benchmarks/results/<date>-<gpu>-offline-<suite>.{json,md}.

    python benchmarks/bench_offline.py --suite builtin --out benchmarks/results/ --prebuild
    python benchmarks/bench_offline.py --suite smoke --backend interpreter --max-attempts 2 --out /tmp/x

Compile time dominates a run (about 50 s per CUTLASS kernel on 16 cores), so ``--prebuild`` first
builds every problem's first ``--max-attempts`` candidate programs in parallel, one nvcc per core,
and the best program of every other precision the tier ranks (the fallback when a 16-bit program
fails validation); the graph then finds them in the build cache. Where a problem falls short of
0.75 of SOL, the report says why: its bound, and what limited the kernel (the estimate's reasons,
PyTorch steps left in the program, kernels the checks sent back to PyTorch).

The headline fraction of SOL is t_SOL at TF32 (an fp32 problem at TF32 tensor-core throughput)
over the kernel's time; a kernel computing in f16 or bf16 may beat it honestly. Each row also
gives the precision the kept program computed in and the bound of that precision
(``t_sol_at_precision_us``, the one the SOL ceiling holds it to), and the summary the geomean of
both fractions.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from evals.metrics import geomean  # noqa: E402
from results_io import suite_problems, write_result  # noqa: E402

TARGET_SOL_FRACTION = 0.75


def candidate_programs(problem, gpu: str, count: int) -> list:
    """The first ``count`` programs the offline tier would try (no fallbacks), then the best one of
    every precision not among them (what a wrong 16-bit result falls back to), as IR."""
    from dsl_compiler.parser import parse
    from nodes.offline.policy import OfflineTier

    candidates = OfflineTier(use_record=True).candidates(problem, gpu)
    chosen = candidates[:count]
    for c in candidates[count:]:
        if all(o.math != c.math for o in chosen):
            chosen.append(c)
    programs = []
    for c in chosen:
        program, _ = parse(c.program_text)
        if program is not None and program.kernels:
            programs.append(program)
    return programs


# CUTLASS 4.2 for sm_90a on the H200 host (benchmarks/results/2026-12-01-h200-build.md): one kernel a unit 47 s,
# eight kernels in one unit 83.6 s, so a unit costs ~42 s whatever it holds and each kernel in it ~5.2 s more
UNIT_S, KERNEL_IN_UNIT_S = 41.8, 5.2


def unique_kernels(programs: list) -> set[str]:
    """The kernels the programs need, by the hash of their CUTLASS source (what the build cache keys on, less
    the toolchain): programs that share a configuration and epilogue share a kernel."""
    import hashlib

    from dsl_compiler.cutlass.emit import emit_program

    keys = set()
    for program in programs:
        emitted, _ = emit_program(program)
        keys |= {hashlib.sha256(e.source.encode()).hexdigest() for e in emitted}
    return keys


def kernels_per_unit_for(kernels: int, jobs: int) -> int:
    """Kernels to a translation unit so that the units spread over ``jobs`` cores in one round (at most 8)."""
    return max(1, min(8, -(-kernels // max(1, jobs))))


def build_estimate_s(kernels: int, jobs: int) -> float:
    """Wall time of building ``kernels`` on ``jobs`` cores, in units of ``kernels_per_unit_for`` each."""
    if kernels == 0:
        return 0.0
    per_unit = kernels_per_unit_for(kernels, jobs)
    units = -(-kernels // per_unit)
    rounds = -(-units // max(1, jobs))
    return rounds * (UNIT_S + KERNEL_IN_UNIT_S * (per_unit - 1))


def planned_programs(problems: list, gpu: str, count: int) -> list:
    """(problem name, program) of every problem's candidates: every first one, then every second one..."""
    per_problem = [[(p.name, prog) for prog in candidate_programs(p, gpu, count)] for p in problems]
    return [progs[i] for i in range(max((len(x) for x in per_problem), default=0)) for progs in per_problem
            if i < len(progs)]


def prebuild(problems: list, gpu: str, count: int, jobs: int, log=print) -> dict:
    """Build the candidate kernels of every problem up front: all of them spread over ``jobs`` translation units
    built side by side (``dsl_compiler.build.build_ahead``), then each program checked against the cache."""
    from dsl_compiler import build

    programs = planned_programs(problems, gpu, count)
    kernels = len(unique_kernels([prog for _, prog in programs]))
    per_unit = kernels_per_unit_for(kernels, jobs)
    log(f"prebuild: {len(programs)} programs of {len(problems)} problems, {kernels} unique kernels, "
        f"{per_unit} to a unit on {jobs} cores (estimate {build_estimate_s(kernels, jobs):.0f} s)")
    start = time.perf_counter()
    saved = {k: os.environ.get(k) for k in ("MUCUTLASS_KERNELS_PER_UNIT", "MUCUTLASS_BUILD_JOBS")}
    os.environ["MUCUTLASS_KERNELS_PER_UNIT"], os.environ["MUCUTLASS_BUILD_JOBS"] = str(per_unit), str(jobs)
    try:
        started = build.build_ahead([prog for _, prog in programs])
        build.wait_ahead()
        failures: list[str] = []
        cached = 0
        for name, program in programs:  # all in the cache now, or a unit failed: this builds what is left
            result = build.build_program(program, jobs=jobs)
            cached += int(result.cached)
            if not result.ok:
                failures.append(f"{name}: {result.diagnostics[0].message if result.diagnostics else 'build failed'}")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    seconds = time.perf_counter() - start
    log(f"prebuild: {started} kernels built, {len(failures)} programs failed in {seconds:.0f} s")
    return {"programs": len(programs), "kernels": kernels, "built": started, "failed": failures, "seconds": seconds}


def why_short(problem, summary, sol: dict, gpu: str) -> str:
    """Bound type and what limited the best kernel, from the estimate and the trace's coverage."""
    from dsl_compiler.parser import parse
    from dsl_compiler.frontend import trace_problem
    from sol_models.estimate import estimate_program
    from sol_models.hardware import get_gpu

    parts = [f"{sol.get('bound', '?')}-bound"]
    best = summary.best
    if best is None:
        reasons = {a.failure_reason for a in summary.attempts if a.failure_reason}
        return "; ".join(parts + ["no correct kernel"] + sorted(reasons)[:2])
    program, _ = parse(best.program_text)
    if program is not None:
        try:
            est = estimate_program(program, get_gpu(gpu))
            t_torch = sum(s.t_us for s in est.torch_steps)
            if est.t_us and t_torch > 0.1 * est.t_us:
                parts.append(f"PyTorch steps {', '.join(s.op for s in est.torch_steps if s.t_us)} "
                             f"take {t_torch / est.t_us:.0%} of the estimate")
            for k in est.kernels:
                if k.reasons:
                    parts.append(f"{k.name}: {'; '.join(k.reasons[:2])}")
                elif k.wave_efficiency < 0.8:
                    parts.append(f"{k.name}: {k.units} work units fill {k.wave_efficiency:.0%} of the waves")
        except Exception as exc:  # the report still lists the problem
            parts.append(f"estimate unavailable ({type(exc).__name__})")
    demoted = [r for r in trace_problem(problem).coverage if r.reason.startswith("demoted")]
    parts += [f"{r.op} runs in PyTorch ({r.reason.split(': ', 2)[-1]})" for r in demoted[:2]]
    return "; ".join(parts)


def sol_at_precision_us(t_sol_us: float | None, sol: dict, precision: str | None) -> float | None:
    """The bound of the fastest precision a program computed in (``precision`` as the compiler
    records it, e.g. "f16" or "f16,tf32"): the TF32 ``t_sol_us`` scaled by that precision's bound
    over TF32's in the SOL report (the bound the SOL ceiling holds the program to)."""
    from graph.attempts import ceiling_bound_us

    if not t_sol_us:
        return None
    tf32 = (sol.get("per_precision") or {}).get("tf32", {}).get("t_sol_us") or sol.get("t_sol_us")
    at = ceiling_bound_us(sol, precision) if precision else None
    return t_sol_us * at / tf32 if (at and tf32) else t_sol_us


# Why PyTorch's variant was kept (the brief's causes, most specific first): a harness failure is the judge's, not the
# program's; a program that never compiled is a coverage gap; a correct one PyTorch beats is a speed gap
FALLBACK_CAUSES = ("slower than PyTorch", "judge", "no compiled program", "no correct program")


def fallback_cause(summary, t_ours_us: float | None) -> str:
    """The cause of a fallback row, one of ``FALLBACK_CAUSES``: a correct program slower than PyTorch's best; else
    the judge's own failure on any attempt; else no attempt that compiled; else none correct."""
    if t_ours_us:
        return "slower than PyTorch"
    attempts = list(summary.attempts)
    if any(a.judge_failed for a in attempts):
        return "judge"
    if not any(a.compile_ok for a in attempts):
        return "no compiled program"
    return "no correct program"


def problem_row(problem, summary, sol: dict, gpu: str) -> dict:
    """One table row from a finished run of the offline tier on ``problem``."""
    from run_vocabulary.floor import VARIANT_LABEL, kept_result, variant_statuses

    refs = summary.reference_us
    checks = summary.reference_checks  # each variant's outputs at the tolerance: one that fails counts for nothing
    allowed, tolerance = getattr(problem, "allowed_precisions", ()), getattr(problem, "tolerance", None)
    statuses = variant_statuses(refs, checks, allowed, tolerance)
    eligible = {v: st.t_us for v, st in statuses.items() if st.eligible}
    best = summary.best
    t_ours = summary.best_t_us
    # the floor: PyTorch's fastest eligible variant, measured in the same run, is kept when it beats ours
    kept = kept_result(t_ours, refs, allowed, checks, tolerance)
    t = kept.t_us
    t_sol = sol.get("t_sol_us") or summary.t_sol_us
    precision = best.precision if best else None
    t_sol_at = sol_at_precision_us(t_sol, sol, precision) if best else None
    row = {
        "problem": problem.name, "correct": best is not None,
        "eager_fp32_us": refs.get("eager_fp32"), "eager_tf32_us": refs.get("eager_tf32"),
        "compile_us": refs.get("compile"), "ours_us": t_ours, "kept_us": t, "t_sol_us": t_sol, "bound": sol.get("bound"),
        # a fallback row's time is PyTorch's (its fastest eligible variant), never a speedup of ours
        "fallback": kept.source if kept.fallback else None,
        "fallback_cause": fallback_cause(summary, t_ours) if kept.fallback else None,
        "floor_variant": kept.floor_variant, "floor_us": kept.floor_us,
        "ours_vs_floor": (kept.floor_us / t_ours) if (t_ours and kept.floor_us) else None,
        "sol_fraction": (t_sol / t) if (t and t_sol) else None,
        "t_sol_at_precision_us": t_sol_at,
        "sol_fraction_at_precision": (t_sol_at / t) if (t and t_sol_at) else None,
        # over the variants that count only: a TF32 baseline that fails 1e-4 is no baseline (the row says so)
        "speedup_vs_eager_fp32": eligible["eager_fp32"] / t if t and eligible.get("eager_fp32") else None,
        "speedup_vs_eager_tf32": eligible["eager_tf32"] / t if t and eligible.get("eager_tf32") else None,
        "speedup_vs_compile": eligible["compile"] / t if t and eligible.get("compile") else None,
        "tolerance": getattr(problem, "tolerance", None), "reference_checks": checks,
        # why a measured variant does not count ("fails 1e-4", "not checked at 1e-4", "TF32 not allowed")
        **{f"{v}_excluded": st.label for v, st in statuses.items() if st.t_us is not None and not st.eligible},
        "timing_source": best.timing_source if best else None,
        "precision": precision, "flags": best.flags if best else [],
        "attempts": len(summary.attempts), "best_attempt": summary.best_index, "stop_reason": summary.stop_reason,
        "best_hypothesis": best.hypothesis if best else None, "tokens": summary.tokens_in + summary.tokens_out,
        "wall_s": summary.wall_s,
    }
    if kept.fallback:
        row["precision"] = kept.source
    if not row["correct"] or (row["sol_fraction"] or 0) < TARGET_SOL_FRACTION or kept.fallback:
        row["why"] = why_short(problem, summary, sol, gpu)
        if kept.fallback:
            row["why"] = (f"fallback: {VARIANT_LABEL.get(kept.source, kept.source)} ({_fmt(kept.t_us)} us) beats "
                          + (f"our best ({_fmt(t_ours)} us); " if t_ours else "every program (none correct); ") + row["why"])
    return row


def summarize(rows: list[dict]) -> dict:
    # every row with a kept time counts: ours, or the floor's PyTorch variant (a fallback, at its own time)
    correct = [r for r in rows if r.get("correct") or r.get("fallback")]
    ours = [r for r in correct if not r.get("fallback")]
    return {
        "fallbacks": [r["problem"] for r in rows if r.get("fallback")],
        "fallbacks_by_cause": {c: n for c in FALLBACK_CAUSES
                               if (n := sum(1 for r in rows if r.get("fallback") and r.get("fallback_cause") == c))},
        "ours_kept": len(ours),
        "geomean_speedup_vs_eager_tf32_ours_only": geomean([r["speedup_vs_eager_tf32"] for r in ours]),
        "slowest_vs_pytorch_best": min((r["ours_vs_floor"] for r in rows if r.get("ours_vs_floor")), default=None),
        "geomean_speedup_vs_eager_fp32": geomean([r["speedup_vs_eager_fp32"] for r in correct]),
        "geomean_speedup_vs_eager_tf32": geomean([r["speedup_vs_eager_tf32"] for r in correct]),
        "geomean_speedup_vs_compile": geomean([r["speedup_vs_compile"] for r in correct]),
        "geomean_sol_fraction": geomean([r["sol_fraction"] for r in correct]),
        "geomean_sol_fraction_at_precision": geomean([r.get("sol_fraction_at_precision") for r in correct]),
        "precisions": {p: sum(1 for r in correct if r.get("precision") == p)
                       for p in sorted({r.get("precision") or "-" for r in correct})},
        # PyTorch's own reach on the same bound: the fastest of eager fp32, eager TF32 and torch.compile per problem
        # that passes its tolerance
        "geomean_sol_fraction_pytorch_best": geomean([
            r["t_sol_us"] / min(counted) for r in rows for counted in [_counted_us(r)] if r.get("t_sol_us") and counted]),
        "baseline_fails": {v: [r["problem"] for r in rows if str(r.get(f"{v}_excluded") or "").startswith("fails")]
                           for v in ("eager_fp32", "eager_tf32", "compile")},
        "faster_than_eager_tf32": sum(1 for r in correct if (r.get("speedup_vs_eager_tf32") or 0) > 1),
        "correct": sum(1 for r in rows if r.get("correct")), "total": len(rows),
        "short_of_target": [r["problem"] for r in rows if not r.get("correct") or (r.get("sol_fraction") or 0) < TARGET_SOL_FRACTION],
    }


def _counted_us(row: dict) -> list[float]:
    """The row's PyTorch times that count (measured, and not marked as failing or unchecked at its tolerance)."""
    return [row[f"{v}_us"] for v in ("eager_fp32", "eager_tf32", "compile")
            if row.get(f"{v}_us") and not row.get(f"{v}_excluded")]


def _sol(problem, gpu: str, calibrated: bool = False) -> dict:
    """The table's t_SOL: by default from the datasheet's peaks, as the literature's fractions of speed of
    light are quoted (``calibrated`` uses the measured ones, which are lower, so fractions come out higher)."""
    from sol_models.bounds import sol_report
    from sol_models.counting import count_problem
    from sol_models.hardware import get_gpu

    spec = get_gpu(gpu, calibrated=calibrated)
    return sol_report(count_problem(problem), spec, precision="tf32").model_dump()


def run_suite(problems: list, args, log=print) -> dict:
    from graph.runner import shared_services
    from graph.context import RunContext
    from graph.runner import run_optimize

    out = Path(args.out)
    rows = []
    for problem in problems:
        sol = _sol(problem, args.gpu, calibrated=args.sol_peaks == "calibrated")
        # one harness worker for the whole suite, as in an evaluation (a worker start costs seconds)
        ctx = RunContext(tier="offline", backend=args.backend, max_attempts=args.max_attempts, policy=args.policy,
                         gpu=args.gpu, services=shared_services(args.gpu))
        run_dir = out / "runs" / f"{args.date}-offline" / problem.name
        try:
            summary = run_optimize(problem.path, ctx, run_dir)
        except Exception as exc:  # one problem's failure is one row
            rows.append({"problem": problem.name, "correct": False, "why": f"run failed: {type(exc).__name__}: {exc}"})
            log(f"{problem.name}: run failed: {exc}")
            continue
        row = problem_row(problem, summary, sol, args.gpu)
        rows.append(row)
        log(f"{problem.name}: ours {row['ours_us'] or float('nan'):.1f} us, SOL {row['t_sol_us'] or float('nan'):.1f} us, "
            f"{(row['sol_fraction'] or 0):.2f} of SOL, {row['attempts']} attempts")
    return {"rows": rows, "summary": summarize(rows)}


def rows_from_evaluation(problems: list, results_path: Path, gpu: str, policy: str = "fixed",
                         calibrated: bool = False) -> dict:
    """The same table from a finished `mucutlass eval` (its results.sqlite), with no GPU: the offline tier's
    runs under ``policy``, one row per problem of the suite (a problem without a finished run is a failed row)."""
    from evals.store import ResultsStore

    store = ResultsStore.open_existing(results_path)
    try:
        summaries = {s.problem: s for s in store.summaries() if s.tier == "offline" and s.policy == policy}
        environment, config = store.environment(), store.config() or {}
    finally:
        store.close()
    rows = []
    for problem in problems:
        summary = summaries.get(problem.key) or summaries.get(problem.name)
        if summary is None:
            rows.append({"problem": problem.name, "correct": False, "why": "no finished run in the evaluation"})
            continue
        rows.append(problem_row(problem, summary, _sol(problem, gpu, calibrated), gpu))
    return {"rows": rows, "summary": summarize(rows), "environment": environment,
            "backend": config.get("backend", "cutlass"), "max_attempts": config.get("max_attempts")}


def _fmt(v, kind="us") -> str:
    if v is None:
        return "-"
    if kind == "us":
        return f"{v:.1f}" if v >= 10 else f"{v:.3g}"
    if kind == "x":
        return f"{v:.2f}x"
    return f"{v:.0%}" if kind == "pct" else str(v)


def _timed(row: dict, variant: str) -> str:
    """A PyTorch time, and why it does not count where it does not ("25.1, fails 1e-4")."""
    why = row.get(f"{variant}_excluded")
    return _fmt(row.get(f"{variant}_us")) + (f", {why}" if why else "")


def to_markdown(doc: dict) -> str:
    s = doc["summary"]
    lines = [
        f"# Offline tier on {doc['suite']} ({doc['gpu']}, {doc['backend']}, {doc['date']})",
        "",
        f"Up to {doc['max_attempts']} attempts per problem, policy {doc['policy']}, tolerance per problem. "
        f"Times in us (median, L2 flushed); t_SOL at TF32 from the {doc.get('sol_peaks', 'datasheet')} peaks "
        "(the fp32 problem at TF32 tensor-core throughput: a kernel "
        "computing in f16 may beat it honestly), and the bound of the precision the kept program computed in; "
        "speedups over PyTorch eager fp32 (its default), eager with TF32 allowed, and torch.compile.",
        "",
        "The kept time is the faster of our best program and PyTorch's fastest eligible variant (the floor); where "
        "PyTorch's is kept the row says **fallback** and its speedups are PyTorch's, not ours.",
        "",
        "A PyTorch variant counts (as the floor, as a speedup's baseline, in PyTorch's best) only where its outputs "
        "pass the problem's tolerance, checked on the GPU beside its timing; one that fails says so beside its time "
        "(\"fails 1e-4\") and its speedup column is empty.",
        "",
        "| problem | eager fp32 | eager TF32 | torch.compile | ours | ours / PyTorch best | kept | fallback | precision | t_SOL | % of SOL | t_SOL at precision | "
        "% of it | vs fp32 | vs TF32 | vs compile | correct |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in doc["rows"]:
        lines.append(
            f"| {r['problem']} | {_timed(r, 'eager_fp32')} | {_timed(r, 'eager_tf32')} | "
            f"{_timed(r, 'compile')} | {_fmt(r.get('ours_us'))} | {_fmt(r.get('ours_vs_floor'), 'x')} | "
            f"{_fmt(r.get('kept_us', r.get('ours_us')))} | {('**' + r['fallback'] + '**') if r.get('fallback') else '-'} | "
            f"{r.get('precision') or '-'} | "
            f"{_fmt(r.get('t_sol_us'))} | {_fmt(r.get('sol_fraction'), 'pct')} | "
            f"{_fmt(r.get('t_sol_at_precision_us'))} | {_fmt(r.get('sol_fraction_at_precision'), 'pct')} | "
            f"{_fmt(r.get('speedup_vs_eager_fp32'), 'x')} | "
            f"{_fmt(r.get('speedup_vs_eager_tf32'), 'x')} | {_fmt(r.get('speedup_vs_compile'), 'x')} | "
            f"{'yes' if r.get('correct') else 'no'} |")
    precisions = ", ".join(f"{n} {p}" for p, n in (s.get("precisions") or {}).items())
    lines += [
        f"| **geomean** | | | | | slowest {_fmt(s.get('slowest_vs_pytorch_best'), 'x')} | | {len(s.get('fallbacks') or [])} fallback(s) | "
        f"{precisions} | | **{_fmt(s['geomean_sol_fraction'], 'pct')}** | | "
        f"**{_fmt(s.get('geomean_sol_fraction_at_precision'), 'pct')}** | "
        f"**{_fmt(s['geomean_speedup_vs_eager_fp32'], 'x')}** | **{_fmt(s['geomean_speedup_vs_eager_tf32'], 'x')}** | "
        f"**{_fmt(s['geomean_speedup_vs_compile'], 'x')}** | {s['correct']}/{s['total']} |",
        "",
    ]
    causes = s.get("fallbacks_by_cause") or {}
    if causes:
        lines += ["Fallbacks by cause: " + ", ".join(f"{c} {n}" for c, n in causes.items()) + ".", ""]
    short = [r for r in doc["rows"] if r.get("why")]
    if short:
        lines += [f"## Short of {TARGET_SOL_FRACTION:.0%} of SOL, and why", ""]
        lines += [f"- **{r['problem']}**: {r['why']}" for r in short]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="builtin", help="a suite name (builtin, smoke, ...)")
    parser.add_argument("--only", nargs="*", default=None, help="problem names (or parts of them) to run")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--backend", default="cutlass", choices=("cutlass", "interpreter", "auto"))
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--max-attempts", type=int, default=8)
    parser.add_argument("--policy", default="fixed")
    parser.add_argument("--prebuild", action="store_true", help="build every problem's candidate kernels first, in parallel")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel nvcc builds for --prebuild")
    parser.add_argument("--prebuild-only", action="store_true", help="stop after --prebuild")
    parser.add_argument("--count-kernels", action="store_true",
                        help="print the programs and unique kernels --prebuild would build, and an estimate of the "
                             "build's wall time on --jobs cores (no nvcc, no GPU)")
    parser.add_argument("--from-eval", default=None, metavar="RESULTS",
                        help="write the table from a finished `mucutlass eval` (its results.sqlite) instead of running")
    parser.add_argument("--sol-peaks", choices=("datasheet", "calibrated"), default="datasheet",
                        help="peaks of the table's t_SOL (default: the datasheet's, as fractions of SOL are quoted)")
    args = parser.parse_args(argv)
    args.date = dt.date.today().isoformat()

    problems = suite_problems(args.suite, args.only)
    if problems is None:
        return 1
    if not problems:
        print("error: no problem selected", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc: dict = {"suite": args.suite, "gpu": args.gpu, "backend": args.backend, "date": args.date, "sol_peaks": args.sol_peaks,
                 "max_attempts": args.max_attempts, "policy": args.policy}
    if args.count_kernels:
        programs = planned_programs(problems, args.gpu, args.max_attempts)
        kernels = len(unique_kernels([prog for _, prog in programs]))
        print(json.dumps({"suite": args.suite, "problems": len(problems), "max_attempts": args.max_attempts,
                          "programs": len(programs), "unique_kernels": kernels, "jobs": args.jobs,
                          "kernels_per_unit": kernels_per_unit_for(kernels, args.jobs),
                          "build_estimate_s": round(build_estimate_s(kernels, args.jobs))}))
        return 0
    if args.prebuild or args.prebuild_only:
        doc["prebuild"] = prebuild(problems, args.gpu, args.max_attempts, args.jobs)
        if args.prebuild_only:
            return 0 if not doc["prebuild"]["failed"] else 1
    if args.from_eval:
        doc.update(rows_from_evaluation(problems, Path(args.from_eval), args.gpu, args.policy,
                                        calibrated=args.sol_peaks == "calibrated"))
        doc["gpu"] = doc["environment"].get("gpu") or args.gpu
    else:
        from evals.environment import collect_environment

        doc["environment"] = collect_environment(args.backend)
        doc.update(run_suite(problems, args))
    doc["versions"] = doc["environment"].get("versions", {})
    write_result(out / f"{args.date}-{args.gpu}-offline-{args.suite}", doc, to_markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
