"""Baselines of a problem suite on the present GPU: the reference timed as eager fp32 (PyTorch's
default precision), eager with TF32 allowed and torch.compile (compiled once per problem), beside
t_SOL, and each variant's outputs checked against the reference at the problem's tolerance
(``evals.baseline_checks``, the judge's rule): a variant that fails is shown failing ("fails 1e-4")
and counts in no geomean and as no problem's best. Writes
benchmarks/results/<date>-<gpu>-baselines[-<suite>].{json,md}.

    python benchmarks/bench_baselines.py                       # the builtin suite, H200 bound
    python benchmarks/bench_baselines.py --suite builtin-strict  # KernelBench's fp32 rule (1e-4)
    python benchmarks/bench_baselines.py --suite smoke --out /tmp/x
    python benchmarks/bench_baselines.py --kernelbench ~/KernelBench --level 1 --ids 1-18 --tolerance-rule kernelbench
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evals.judge import Harness, HarnessSettings  # noqa: E402
from evals.harness_cli import bench_rows, fmt_frac, fmt_timed, fmt_us, summarize  # noqa: E402
from evals.problems import ProblemError, apply_tolerance_rule, load_problems  # noqa: E402
from evals.environment import collect_environment, versions_text  # noqa: E402
from run_vocabulary.floor import tolerance_text  # noqa: E402


def to_markdown(doc: dict) -> str:
    s = doc["summary"]
    lines = [
        f"# Baselines: {doc['source']} on {doc['gpu_name'] or doc['gpu']} ({doc['date']})",
        "",
        f"Versions: {versions_text({'versions': doc['versions'], **doc.get('environment', {})})}. "
        f"t_SOL at {doc['precision']} for {doc['gpu']}. Median of CUDA-event timings, L2 flushed before every call, "
        "inputs rotated; eager fp32 is PyTorch's default precision (matmul fp32, cuDNN TF32).",
        "",
        "Each variant's outputs are checked against the reference (true fp32) at the problem's tolerance, atol = rtol, "
        "on fresh input sets: a variant that fails says so beside its time (\"fails 1e-4\") and counts in no "
        "geomean and as no problem's best; a TF32 variant that was not checked counts only at 1e-3 or looser.",
        "",
        "| problem | tolerance | eager fp32 | eager TF32 | torch.compile | t_SOL | bound | fp32/SOL | TF32/SOL | compile/SOL | best/SOL |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in doc["rows"]:
        lines.append(
            f"| {r['problem']} | {tolerance_text(r.get('tolerance'))} | {fmt_timed(r, 'eager_fp32')} | "
            f"{fmt_timed(r, 'eager_tf32')} | "
            f"{fmt_timed(r, 'compile')} | {fmt_us(r.get('t_sol_us'))} | {r.get('bound') or '-'} | "
            f"{fmt_frac(r.get('eager_fp32_sol_fraction'))} | {fmt_frac(r.get('eager_tf32_sol_fraction'))} | "
            f"{fmt_frac(r.get('compile_sol_fraction'))} | {fmt_frac(r.get('best_sol_fraction'))} |"
        )
    lines += [
        "",
        "Geomean fraction of SOL (t_SOL / t): "
        f"eager fp32 {fmt_frac(s['eager_fp32_geomean_sol_fraction'])}, "
        f"eager TF32 {fmt_frac(s['eager_tf32_geomean_sol_fraction'])}, "
        f"torch.compile {fmt_frac(s['compile_geomean_sol_fraction'])}, "
        f"best of three {fmt_frac(s['best_geomean_sol_fraction'])}; "
        f"TF32 over fp32 eager: {fmt_frac(s['eager_tf32_over_fp32_geomean_speedup'])}x "
        "(each over the problems where the variant counts).",
        "",
        f"Failing their tolerance: eager fp32 on {s.get('eager_fp32_fails', 0)}, eager TF32 on "
        f"{s.get('eager_tf32_fails', 0)}, torch.compile on {s.get('compile_fails', 0)} of {s.get('problems', 0)} problems.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problem", nargs="?")
    ap.add_argument("--suite", default=None)
    ap.add_argument("--kernelbench")
    ap.add_argument("--level", type=int)
    ap.add_argument("--ids")
    ap.add_argument("--gpu", default="h200", help="GPU of the SOL bound and of the file names")
    ap.add_argument("--precision", default="tf32")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--tolerance-rule", choices=("default", "kernelbench"), default="default",
                    help="kernelbench: fp32 problems at 1e-4, fp16 / bf16 at 1e-2 (evals.problems.TOLERANCE_RULES)")
    ap.add_argument("--no-check", action="store_true",
                    help="time only: do not check each variant's outputs at the tolerance (a TF32 variant that is "
                         "not checked counts only at 1e-3 or looser)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--allow-cpu", action="store_true", help="write the file even without a GPU (bounds only)")
    args = ap.parse_args(argv)
    if args.problem is None and args.suite is None and args.kernelbench is None:
        args.suite = "builtin"
    try:
        problems = load_problems(args.problem, suite=args.suite, kernelbench=args.kernelbench, level=args.level, ids=args.ids)
        problems = apply_tolerance_rule(problems, args.tolerance_rule)
    except ProblemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    harness = Harness(HarnessSettings(compile_reference=not args.no_compile))
    info = harness.worker_info()
    if not info.get("cuda") and not args.allow_cpu:
        print("error: no CUDA GPU visible to the harness worker (pass --allow-cpu for bounds only)", file=sys.stderr)
        harness.close()
        return 1
    print(f"{len(problems)} problems on {info.get('gpu_name') or 'CPU'}", file=sys.stderr)
    started = time.perf_counter()

    def progress(i, n, row, seconds):
        print(f"[{i}/{n}] {row['problem']}: fp32 {fmt_timed(row, 'eager_fp32')}, tf32 {fmt_timed(row, 'eager_tf32')}, "
              f"compile {fmt_timed(row, 'compile')}, t_SOL {fmt_us(row.get('t_sol_us'))} ({seconds:.0f} s)",
              file=sys.stderr, flush=True)

    try:
        rows = bench_rows(problems, harness if info.get("cuda") else None, args.gpu, args.precision, progress,
                          check=not args.no_check)
    finally:
        harness.close()
    date = dt.date.today().isoformat()
    env = collect_environment()
    source = args.suite or (f"KernelBench level {args.level} ids {args.ids or 'all'}" if args.kernelbench else args.problem)
    doc = {
        "date": date,
        "gpu": args.gpu,
        "gpu_name": info.get("gpu_name"),
        "precision": args.precision,
        "source": source,
        "versions": env["versions"],
        "environment": env,
        "wall_s": time.perf_counter() - started,
        "rows": rows,
        "summary": summarize(rows),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / (f"{date}-{args.gpu}-baselines" + (f"-{args.suite}" if args.suite and args.suite != "builtin" else "")
                  + (f"-{args.tolerance_rule}" if args.tolerance_rule != "default" else ""))
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=2))
    stem.with_suffix(".md").write_text(to_markdown(doc))
    print(f"wrote {stem}.json and {stem}.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
