"""The cuda variant on a GPU, without a model: hand-written CUDA ModelNew modules (benchmarks/cuda_candidates/)
played back through the graph in the ``cuda`` variant (built by load_inline in a child process, judged and
timed by the harness like every candidate), beside the offline tier (``dsl+sol``) on the same problems in the
same harness worker. Writes ``<out>/<date>-<gpu>-variants.{json,md}`` (keys: date, gpu, versions, environment,
rows, summary).

    python3 benchmarks/bench_variants.py --out benchmarks/results/

The three extensions (about a minute each, nvcc) and the offline tier's first CUTLASS kernels build at once,
one nvcc per core; the extensions' build folder is ``--ext-dir`` (default: a temporary folder, never the
repository).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CANDIDATES = ROOT / "benchmarks" / "cuda_candidates"
# each hand-written module and the built-in problem it answers
PLAYBACK = (("naive_gemm.py", "01_gemm_square"), ("tiled_gemm.py", "01_gemm_square"),
            ("cublas_bias_relu.py", "11_linear_relu"))
BASELINES = ("eager_fp32", "eager_tf32", "compile")


def build_all(jobs: int, log=print) -> dict[str, dict]:
    """Every candidate's extensions, built in parallel (one child process each), by content hash."""
    from evals import cuda_candidates as cc

    def one(name: str) -> tuple[str, dict]:
        prepared = cc.prepare((CANDIDATES / name).read_text())
        outcome = cc.build(prepared)
        log(f"build {name}: {'ok' if outcome.ok else 'FAILED ' + outcome.reason} in {outcome.seconds:.0f} s")
        return name, {"ok": outcome.ok, "build_s": round(outcome.seconds, 1), "reason": outcome.reason,
                      "diagnostics": outcome.diagnostics[:5]}

    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(PLAYBACK)))) as pool:
        return dict(pool.map(one, [name for name, _ in PLAYBACK]))


def row_of(kind: str, variant: str, problem: str, summary, build: dict | None = None) -> dict:
    """The run's kept result, else its last attempt: a correct result the judge flagged (PyTorch-only, say)
    is never the run's best, but its time is still measured and shown beside its flags."""
    best = summary.best
    shown = best or (summary.attempts[-1] if summary.attempts else None)
    return {
        "problem": problem, "kind": kind, "variant": variant, "correct": bool(shown and shown.correct),
        "counted": best is not None,  # correct and unflagged: what headline numbers count
        "t_us": shown.t_us if shown else None, "t_sol_us": summary.t_sol_us,
        "sol_fraction": shown.sol_fraction if shown else None,
        **{f"speedup_vs_{b}": getattr(shown, f"speedup_vs_{b}", None) if shown else None for b in BASELINES},
        "reference_us": summary.reference_us, "reference_checks": summary.reference_checks,
        "precision": shown.precision if shown else None,
        "flags": shown.flags if shown else [], "attempts": len(summary.attempts),
        "failure": (shown.failure_reason if shown else summary.stop_reason) or None,
        "build_s": (build or {}).get("build_s", shown.build_s if shown else None),
        "hypothesis": shown.hypothesis if shown else None,
    }


def run(args, log=print) -> dict:
    from evals.problems import SUITES_DIR
    from graph.context import RunContext
    from graph.runner import run_optimize, shared_services
    from nodes.playback import PlaybackTier

    problems = sorted({p for _, p in PLAYBACK})
    services = shared_services(args.gpu)
    rows: list[dict] = []
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as background:
        # every nvcc at once: the extensions, and the offline tier's first kernels (bench_offline's prebuild)
        builds_future = background.submit(build_all, args.jobs, log)
        from benchmarks.bench_offline import prebuild
        from evals.problems import load_problem

        if args.backend == "cutlass":
            loaded = [load_problem(SUITES_DIR / args.suite / f"{p}.py") for p in problems]
            background.submit(prebuild, loaded, args.gpu, args.offline_attempts,
                              max(1, (os.cpu_count() or 4) - len(PLAYBACK)), log).result()
        for problem in problems:
            ctx = RunContext(tier="offline", variant="dsl+sol", policy="fixed", max_attempts=args.offline_attempts,
                             backend=args.backend, gpu=args.gpu, services=services)
            summary = run_optimize(SUITES_DIR / args.suite / f"{problem}.py", ctx, Path(args.runs) / f"offline-{problem}")
            rows.append(row_of("offline tier (μCUTLASS)", "dsl+sol", problem, summary))
            log(f"offline {problem}: {summary.best_t_us} us, stop: {summary.stop_reason}")
        builds = builds_future.result()
    for name, problem in PLAYBACK:
        path = CANDIDATES / name
        ctx = RunContext(tier=f"playback:{path}", variant="cuda", policy="fixed", max_attempts=1, backend=args.backend,
                         gpu=args.gpu, services=services, tier_impl=PlaybackTier(path))
        summary = run_optimize(SUITES_DIR / args.suite / f"{problem}.py", ctx, Path(args.runs) / f"cuda-{Path(name).stem}")
        rows.append(row_of(f"cuda: {Path(name).stem}", "cuda", problem, summary, builds.get(name)))
        log(f"cuda {name} on {problem}: {summary.best_t_us} us, flags {rows[-1]['flags']}, {rows[-1]['failure']}")
    return {"rows": rows, "builds": builds, "wall_s": round(time.perf_counter() - started, 1)}


def summarize(rows: list[dict]) -> dict:
    out: dict = {}
    for r in rows:
        entry = out.setdefault(r["problem"], {})
        entry[r["kind"]] = {"t_us": r["t_us"], "speedup_vs_eager_fp32": r["speedup_vs_eager_fp32"],
                            "speedup_vs_eager_tf32": r["speedup_vs_eager_tf32"], "correct": r["correct"],
                            "counted": r["counted"], "flags": [f.split(":")[0] for f in r["flags"]]}
    return {"per_problem": out, "correct": sum(r["correct"] for r in rows), "total": len(rows)}


def _fmt(v, kind="us") -> str:
    if v is None:
        return "-"
    if kind == "x":
        return f"{v:.2f}x"
    if kind == "pct":
        return f"{v:.0%}"
    return f"{v:.1f}" if v >= 10 else f"{v:.3g}"


def to_markdown(doc: dict) -> str:
    lines = [f"# The cuda variant beside the offline tier ({doc['gpu']}, {doc['date']})", "",
             "Hand-written CUDA ModelNew modules played back through the graph in the `cuda` variant (load_inline, "
             "built in a child process, judged and timed by the harness), and the offline tier's μCUTLASS kernels "
             f"(`dsl+sol`, {doc['offline_attempts']} attempt(s)), on the same problems in the same harness worker. "
             "Times in us (median, L2 flushed); speedups over PyTorch eager fp32 and eager TF32; flags are the "
             "judge's (a flagged result is out of headline numbers).", "",
             "| problem | candidate | variant | correct | t (us) | % of SOL | vs eager fp32 | vs eager TF32 | "
             "vs compile | build (s) | flags / failure |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in doc["rows"]:
        note = "; ".join(f.split(":")[0] for f in r["flags"]) or (r.get("failure") or "")
        lines.append(
            f"| {r['problem']} | {r['kind']} | {r['variant']} | {'yes' if r['correct'] else 'no'} | {_fmt(r['t_us'])} | "
            f"{_fmt(r['sol_fraction'], 'pct')} | {_fmt(r['speedup_vs_eager_fp32'], 'x')} | "
            f"{_fmt(r['speedup_vs_eager_tf32'], 'x')} | {_fmt(r['speedup_vs_compile'], 'x')} | "
            f"{_fmt(r.get('build_s'))} | {note[:120]} |")
    from run_vocabulary.floor import cell

    refs = {r["problem"]: (r["reference_us"], r.get("reference_checks")) for r in doc["rows"] if r.get("reference_us")}

    def timed(v: dict, checks: dict | None, key: str) -> str:  # a variant failing the tolerance says so
        return _fmt(v.get(key)) + (f" ({cell(key, checks)})" if cell(key, checks) else "")

    lines += ["", "PyTorch on the same problems (us; a variant that fails the tolerance is no speedup's baseline): "
              + "; ".join(f"{p}: eager fp32 {timed(v, c, 'eager_fp32')}, eager TF32 {timed(v, c, 'eager_tf32')}, "
                          f"torch.compile {timed(v, c, 'compile')}" for p, (v, c) in refs.items()), "",
        f"Versions: {doc.get('versions_text', '')}. Wall time {doc['wall_s']} s.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--offline-attempts", type=int, default=1, help="the offline tier's attempts per problem")
    parser.add_argument("--jobs", type=int, default=3, help="extensions built at once")
    parser.add_argument("--ext-dir", default=None, help="load_inline build folder (default: a temporary folder)")
    parser.add_argument("--runs", default=None, help="run directories (default: a temporary folder)")
    parser.add_argument("--backend", default="cutlass", help=argparse.SUPPRESS)  # interpreter: a CPU rehearsal
    parser.add_argument("--suite", default="builtin", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="mucutlass-variants-"))
    os.environ["MUCUTLASS_CUDA_EXT_DIR"] = args.ext_dir or str(scratch / "ext")
    args.runs = args.runs or str(scratch / "runs")

    from evals.environment import collect_environment, versions_text

    env = collect_environment("cutlass")
    if args.backend == "cutlass" and not str(env.get("gpu", "")).startswith("NVIDIA"):
        print(f"error: no CUDA GPU here ({env.get('gpu')}); the cuda variant's timings need one", file=sys.stderr)
        return 1
    result = run(args)
    date = dt.date.today().isoformat()
    doc = {"date": date, "gpu": env.get("gpu"), "versions": env.get("versions", {}), "environment": env,
           "versions_text": versions_text(env), "offline_attempts": args.offline_attempts, **result,
           "summary": summarize(result["rows"])}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{date}-{args.gpu}-variants"
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    stem.with_suffix(".md").write_text(to_markdown(doc))
    print(f"wrote {stem}.json and {stem}.md")
    return 0 if doc["summary"]["correct"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
