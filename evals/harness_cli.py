"""`mucutlass bench` (reference timings beside the SOL bound) and `mucutlass suite` (the shipped
suites). Nothing heavy is imported until a command runs."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable

VARIANTS = ("eager_fp32", "eager_tf32", "compile")  # run_vocabulary.floor.VARIANTS


def register(subparsers: Any) -> None:
    b = subparsers.add_parser(
        "bench",
        help="time a problem's reference (eager fp32, eager TF32, torch.compile) beside its SOL bound",
        description="Times the PyTorch reference of each problem the way candidates are timed (CUDA events, "
        "L2 flushed before every call, rotated inputs, median of many trials) and prints it beside t_SOL. "
        "Without a GPU only the bound is shown.",
    )
    b.add_argument("problem", nargs="?", help="a KernelBench-format problem file or a folder of them")
    b.add_argument("--suite", help="a shipped suite (see `mucutlass suite list`)")
    b.add_argument("--kernelbench", metavar="PATH", help="a KernelBench checkout")
    b.add_argument("--level", type=int, help="KernelBench level (with --kernelbench)")
    b.add_argument("--ids", help="KernelBench problem ids, e.g. 1-20,25 (with --kernelbench)")
    b.add_argument("--gpu", default="h200", help="GPU of the SOL bound (default: h200)")
    b.add_argument("--precision", default="tf32", help="math precision of the SOL bound (default: tf32)")
    b.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    b.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    b.set_defaults(func=run_bench)

    s = subparsers.add_parser("suite", help="list the shipped problem suites or the problems of one")
    ssub = s.add_subparsers(dest="suite_command", metavar="SUBCOMMAND")
    sl = ssub.add_parser("list", help="the shipped suites (with a NAME: its problems, as `suite show NAME`)")
    sl.add_argument("name", nargs="?", help="a suite whose problems to list")
    sl.add_argument("--json", action="store_true")
    sl.set_defaults(func=run_suite_list)
    ss = ssub.add_parser("show", help="the problems of one suite, with tolerance and allowed precisions")
    ss.add_argument("name")
    ss.add_argument("--json", action="store_true")
    ss.set_defaults(func=run_suite_show)
    s.set_defaults(func=lambda args: (s.print_help(), 2)[1])


# ---------------------------------------------------------------------------------------------
# rows


def baseline_row(problem, harness, gpu: str, precision: str = "tf32", check: bool | None = None,
                 checker: Callable[[Any, list[str]], dict] | None = None) -> dict:
    """One problem: its SOL bound and its reference timings, with the fraction of SOL each reaches, and beside
    each timing its outputs checked at the problem's tolerance (``evals.baseline_checks``; ``check`` None:
    where ``baseline_checks.wanted`` says, below 1e-3 by default). ``best_us`` is the fastest variant that counts
    (``run_vocabulary.floor``: measured, allowed, and passing where it was checked)."""
    row: dict[str, Any] = {"problem": problem.key, "path": problem.path, "tolerance": problem.tolerance}
    try:
        from sol_models.bounds import sol_report
        from sol_models.counting import count_problem
        from sol_models.hardware import get_gpu

        work = count_problem(problem)
        report = sol_report(work, get_gpu(gpu), precision=precision)
        row.update(t_sol_us=report.t_sol_us, bound=report.bound, flops=report.flops, bytes_fused=report.bytes_fused)
    except Exception as exc:  # the timings are still worth printing
        row.update(t_sol_us=None, bound=None, sol_error=f"{type(exc).__name__}: {exc}".splitlines()[0])
    if harness is not None and not getattr(problem, "setup_error", ""):  # a problem whose setup failed is not timed
        ref = harness.reference_timings(problem)
        row.update(eager_fp32_us=ref.eager_fp32_us, eager_tf32_us=ref.eager_tf32_us, compile_us=ref.compile_us,
                   eager_fp32_spread_pct=ref.eager_fp32_spread_pct, eager_tf32_spread_pct=ref.eager_tf32_spread_pct,
                   compile_spread_pct=ref.compile_spread_pct, compile_s=ref.compile_s)
        if ref.reason:
            row["note"] = ref.reason
        row.update(baseline_checks_of(problem, row, check, checker))
        t_sol = row.get("t_sol_us")
        for key in VARIANTS:
            t = row.get(f"{key}_us")
            row[f"{key}_sol_fraction"] = (t_sol / t) if (t and t_sol) else None
        best = [row[f"{k}_us"] for k in VARIANTS if row.get(f"{k}_us") and row.get(f"{k}_eligible", True)]
        row["best_us"] = min(best) if best else None
        row["best_sol_fraction"] = (t_sol / row["best_us"]) if (t_sol and row["best_us"]) else None
    return row


def baseline_checks_of(problem, row: dict, check: bool | None = None,
                       checker: Callable[[Any, list[str]], dict] | None = None) -> dict:
    """The row's ``reference_checks`` (``floor.reference_record``) and per variant ``<v>_eligible`` and
    ``<v>_check`` (its label: "passes 0.0001", "fails 0.0001", "not checked"), from ``checker`` (default: the
    variants run in a child process on the GPU, ``baseline_checks.checks_in_child``)."""
    from evals.baseline_checks import checks_in_child, wanted
    from run_vocabulary.floor import reference_record

    refs = {v: row.get(f"{v}_us") for v in VARIANTS}
    timed = [v for v in VARIANTS if refs.get(v)]
    checks: dict = {}
    if timed and (wanted(problem.tolerance) if check is None else check):
        checker = checker or (lambda p, variants: checks_in_child(p.path, float(p.tolerance), variants))
        checks = checker(problem, timed)
    record = reference_record(refs, checks, getattr(problem, "allowed_precisions", ()), problem.tolerance)
    out: dict[str, Any] = {"reference_checks": record}
    for v, rec in record.items():
        out[f"{v}_eligible"], out[f"{v}_check"] = rec["eligible"], rec["label"]
    return out


def summarize(rows: list[dict]) -> dict:
    """Geomean fraction of SOL reached by each baseline (t_SOL / t), as in the project's facts, over the rows where
    the baseline counts (a variant that fails the tolerance is counted apart: ``<v>_fails``)."""
    from evals.metrics import geomean

    def counts(r: dict, key: str) -> bool:
        return bool(r.get(f"{key}_us")) and r.get(f"{key}_eligible", True)

    out: dict[str, Any] = {"problems": len(rows)}
    for key in VARIANTS:
        out[f"{key}_geomean_sol_fraction"] = geomean([r.get(f"{key}_sol_fraction") for r in rows if counts(r, key)])
        out[f"{key}_fails"] = sum(1 for r in rows if str(r.get(f"{key}_check") or "").startswith("fails"))
    out["best_geomean_sol_fraction"] = geomean([r.get("best_sol_fraction") for r in rows])
    out["eager_tf32_over_fp32_geomean_speedup"] = geomean(
        [r["eager_fp32_us"] / r["eager_tf32_us"] for r in rows if r.get("eager_fp32_us") and counts(r, "eager_tf32")])
    return out


def bench_rows(problems, harness, gpu: str, precision: str = "tf32",
               progress: Callable[[int, int, dict, float], None] | None = None,
               starting: Callable[[int, int, Any], None] | None = None, check: bool | None = None) -> list[dict]:
    rows = []
    for i, problem in enumerate(problems, 1):
        if starting is not None:
            starting(i, len(problems), problem)
        start = time.perf_counter()
        row = baseline_row(problem, harness, gpu, precision, check=check)
        rows.append(row)
        if progress is not None:
            progress(i, len(problems), row, time.perf_counter() - start)
    return rows


def fmt_us(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 1000:
        return f"{v / 1000:.3f} ms"
    return f"{v:.1f} us" if v >= 10 else f"{v:.3f} us"


def fmt_timed(row: dict, variant: str) -> str:
    """A variant's time, and beside it why it does not count where it does not ("12.0 us, fails 1e-4")."""
    from run_vocabulary.floor import cell

    why = cell(variant, row.get("reference_checks"))
    return fmt_us(row.get(f"{variant}_us")) + (f", {why}" if why else "")


def fmt_frac(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def render_table(rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("problem", "eager fp32", "eager TF32", "compile", "t_SOL", "bound", "best/SOL"):
        table.add_column(col, justify="left" if col == "problem" else "right", no_wrap=True)
    for r in rows:
        table.add_row(r["problem"], *(fmt_timed(r, v) for v in VARIANTS), fmt_us(r.get("t_sol_us")),
                      r.get("bound") or "-", fmt_frac(r.get("best_sol_fraction")))
    console = Console()
    natural = console.measure(table, options=console.options.update_width(1000)).maximum  # no cell cut
    if natural > console.width:  # a narrow terminal, or a file or pipe (80 columns): widen rather than cut
        console = Console(width=natural)
    console.print(table)


# ---------------------------------------------------------------------------------------------
# handlers


def _load(args):
    from evals.problems import ProblemError, load_problems

    try:
        # each checked in a child process first; one whose setup fails there is a row that cannot run
        return load_problems(args.problem, suite=args.suite, kernelbench=args.kernelbench, level=args.level, ids=args.ids,
                             check=True)
    except ProblemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def run_bench(args: argparse.Namespace) -> int:
    if sum(x is not None for x in (args.problem, args.suite, args.kernelbench)) != 1:
        print("error: give a problem file or folder, --suite NAME, or --kernelbench PATH --level N", file=sys.stderr)
        return 2
    from evals.progress import Status

    with Status(enabled=not args.json) as status:
        return _bench(args, status)


def _bench(args: argparse.Namespace, status) -> int:
    status.show("checking the problems in a child process (their import, Model() and get_inputs())")
    problems = _load(args)
    if problems is None:
        return 1
    import torch  # counting the bound needs it anyway

    from evals.judge import Harness, HarnessSettings

    harness = Harness(HarnessSettings(compile_reference=not args.no_compile))
    has_gpu = torch.cuda.is_available()
    if has_gpu:
        try:
            has_gpu = harness.has_gpu
        except Exception as exc:  # a worker that cannot start still leaves the bound to print
            print(f"warning: the harness worker did not start ({exc}); showing the bound only", file=sys.stderr)
            has_gpu = False
    if not has_gpu:
        print("no GPU: reference timings need one; showing the SOL bound only", file=sys.stderr)

    def progress(i, n, row, seconds):
        if not args.json:
            print(f"[{i}/{n}] {row['problem']} ({seconds:.1f} s)", file=sys.stderr)

    def starting(i, n, problem):
        status.show(f"[{i}/{n}] {problem.key}: " + ("timing eager fp32, eager TF32 and torch.compile, then checking "
                                                     "their outputs at the tolerance" if has_gpu
                                                     else "counting its speed-of-light bound"))

    try:
        rows = bench_rows(problems, harness if has_gpu else None, args.gpu, args.precision, progress, starting)
    finally:
        harness.close()
    status.stop()
    if args.json:
        print(json.dumps({"rows": rows, "summary": summarize(rows), "gpu": args.gpu}, indent=2))
    else:
        render_table(rows, f"reference timings and SOL ({args.precision}, {args.gpu})")
        if has_gpu and len(rows) > 1:
            s = summarize(rows)
            print(f"geomean t_SOL/t: eager fp32 {fmt_frac(s['eager_fp32_geomean_sol_fraction'])}, "
                  f"eager TF32 {fmt_frac(s['eager_tf32_geomean_sol_fraction'])}, "
                  f"torch.compile {fmt_frac(s['compile_geomean_sol_fraction'])}, "
                  f"best {fmt_frac(s['best_geomean_sol_fraction'])}")
    failed = {r["problem"]: why for r in rows if (why := row_failure(r, timed=has_gpu))}
    for problem, why in failed.items():
        print(f"failed: {problem}: {why}", file=sys.stderr)
    return 1 if failed else 0


def row_failure(row: dict, timed: bool) -> str | None:
    """Why a bench row could not run (its bound, or its timings where a GPU measures them), or None."""
    if row.get("sol_error"):
        return row["sol_error"]
    if timed and row.get("best_us") is None:
        return row.get("note") or "no reference timing came back"
    return None


def run_suite_list(args: argparse.Namespace) -> int:
    if args.name:  # `suite list smoke` means its problems
        return run_suite_show(args)
    from evals.problems import SUITES_DIR, ProblemError, problem_files, suite_index

    try:
        index = suite_index()
    except ProblemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    rows = []
    for name, entry in sorted(index.items()):
        folder = SUITES_DIR / entry.get("path", name)
        # the files load_suite would load, without importing them
        n = len(entry.get("problems") or (problem_files(folder) if folder.is_dir() else []))
        rows.append({"name": name, "problems": n, "tolerance": entry.get("tolerance"),
                     "description": entry.get("description", "")})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['name']:<16} {r['problems']:>3} problems  tol {r['tolerance']:g}  {r['description']}")
    return 0


def run_suite_show(args: argparse.Namespace) -> int:
    from evals.problems import ProblemError, load_suite

    try:
        problems = load_suite(args.name)
    except ProblemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    rows = [{"problem": p.key, "tolerance": p.tolerance, "allowed_precisions": list(p.allowed_precisions),
             "description": (p.module.__doc__ or "").strip().splitlines()[0] if p.module.__doc__ else ""}
            for p in problems]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['problem']:<40} tol {r['tolerance']:g}  {','.join(r['allowed_precisions']):<18} {r['description']}")
    return 0
