"""`mucutlass sol` (speed of light of a problem or a folder of problems) and `mucutlass calibrate`
(measure the present GPU). Nothing heavy is imported until a command runs."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

PRECISIONS = ("f32", "tf32", "bf16", "f16", "fp8")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "sol",
        help="speed-of-light bound of a KernelBench-format problem (or every problem under a folder)",
        description="FLOPs, bytes (fused and unfused), arithmetic intensity, t_SOL per precision, bound and "
        "launch floor of a problem, counted on meta tensors (no GPU needed).",
    )
    p.add_argument("path", help="a problem file (.py), a μCUTLASS program (.mcu), or a folder of problems")
    p.add_argument("--gpu", default="h200", help="GPU from the hardware table (default: h200)")
    p.add_argument("--precision", default="tf32", choices=PRECISIONS, help="math precision of the bound (default: tf32)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--datasheet", action="store_true", help="use datasheet peaks even when a calibrated profile exists")
    p.add_argument("--ops", action="store_true", help="also list the counted ops of a single problem")
    p.set_defaults(func=run_sol)

    t = subparsers.add_parser(
        "trace",
        help="the program the offline tier starts from for a problem, and its coverage",
        description="Trace a KernelBench-format problem with the frontend: the μCUTLASS program, its coverage "
        "(the share of the problem's FLOPs that run in CUTLASS kernels), the ops left to PyTorch steps with "
        "their reasons, and the program's estimate. Exit 1 when the problem cannot be traced.",
    )
    t.add_argument("path", nargs="?", help="a problem file (.py)")
    t.add_argument("--suite", default=None, help="a table over a shipped suite instead (smoke, builtin, models, ...)")
    t.add_argument("--kernelbench", default=None, metavar="PATH",
                   help="a table over every problem file under a folder (a KernelBench level, a checkout) instead")
    t.add_argument("--gpu", default="h200", help="GPU of the estimate (default: h200)")
    t.add_argument("--json", action="store_true", help="print JSON (top-level keys: coverage, program, torch_ops, "
                   "estimate, ...; with --suite / --kernelbench: rows and summary)")
    t.set_defaults(func=run_trace)

    c = subparsers.add_parser(
        "calibrate",
        help="measure this GPU's copy bandwidth and matmul rates and save a profile the bounds then use",
        description="Needs a CUDA GPU. Writes sol_models/hardware/calibrated/<gpu>.json unless --out is given.",
    )
    c.add_argument("--gpu", default="h200", help="hardware-table entry the measurements belong to (default: h200)")
    c.add_argument("--out", default=None, help="where to write the profile (JSON)")
    c.add_argument("--runs", type=int, default=7, help="timed runs per measurement (median taken; default 7)")
    c.set_defaults(func=run_calibrate)


# ---------------------------------------------------------------------------------------------
# formatting


def _si(value: float, unit: str) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:,.2f} {prefix}{unit}"
    return f"{value:,.0f} {unit}"


def _us(value: float) -> str:
    if value >= 1000:
        return f"{value / 1000:,.3f} ms"
    return f"{value:,.2f} us" if value >= 1 else f"{value:,.3f} us"


def _console():
    from rich.console import Console

    return Console(width=max(160, Console().width), highlight=False)


def _err(message: str) -> None:
    print(message, file=sys.stderr)


def _gpu_or_none(name: str, datasheet: bool):
    from sol_models.hardware import UnknownGpuError, get_gpu

    try:
        return get_gpu(name, calibrated=not datasheet)
    except UnknownGpuError as exc:
        _err(f"error: {exc}")
        return None


# ---------------------------------------------------------------------------------------------
# sol


def _problem_files(folder: Path) -> list[Path]:
    return sorted(
        p for p in folder.rglob("*.py")
        if p.name != "__init__.py" and not any(part.startswith((".", "__")) for part in p.relative_to(folder).parts)
    )


def _report_for(path: Path, gpu: Any, precision: str):
    from sol_models.bounds import sol_report
    from sol_models.counting import count_problem

    work = count_problem(path)
    return work, sol_report(work, gpu, precision=precision)


def _in_child(calls: Any, fn: Any, *args: Any) -> Any:
    """``fn(*args)`` in ``calls``' child process (problem code never runs in this one): a call that ignores the
    time limit or a child that dies becomes the one-line ``ProblemLoadError`` of any other broken problem."""
    from dsl_compiler.limits import ChildDied, TimeLimitExceeded
    from sol_models.counting import ProblemLoadError

    try:
        return calls.call(fn, *args)
    except (TimeLimitExceeded, ChildDied) as exc:
        raise ProblemLoadError(str(exc)) from None


def run_sol(args: argparse.Namespace) -> int:
    gpu = _gpu_or_none(args.gpu, args.datasheet)
    if gpu is None:
        return 2
    if args.precision not in gpu.peak_tflops:
        _err(f"error: {gpu.name} has no {args.precision} math; choose one of {', '.join(gpu.peak_tflops)}")
        return 2
    path = Path(args.path)
    if not path.exists():
        _err(f"error: {path}: no such file or folder")
        return 2
    if path.is_dir():
        return _sol_folder(path, gpu, args)
    if path.suffix == ".mcu":
        return _sol_program(path, gpu, args)
    return _sol_file(path, gpu, args)


def _sol_program(path: Path, gpu: Any, args: argparse.Namespace) -> int:
    """A μCUTLASS program: what its kernels must move, its bound and its config-aware estimate."""
    from dsl_compiler.diagnostics import has_errors, render_all
    from dsl_compiler.parser import parse

    from sol_models.bounds import sol_report
    from sol_models.counting import ProgramCountError, count_program
    from sol_models.estimate import estimate_program

    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        _err(f"{path}: cannot read: {exc}")
        return 1
    program, diagnostics = parse(text)
    if program is None or has_errors(diagnostics):
        _err(render_all(diagnostics, str(path)))
        return 1
    try:
        work = count_program(program)
        estimate = estimate_program(program, gpu)
    except ProgramCountError as exc:
        _err(f"{path}: {exc}")
        return 1
    report = sol_report(work, gpu, precision=args.precision)
    if args.json:
        print(json.dumps({"report": report.model_dump(mode="json"), "work": work.model_dump(mode="json"),
                          "estimate": estimate.model_dump(mode="json")}, indent=2))
        return 0
    from rich.table import Table

    console = _console()
    console.print(f"[bold]{work.name}[/bold] (μCUTLASS program) on {gpu.full_name or gpu.name}")
    console.print(f"FLOPs {_si(work.flops, 'FLOP')}; bytes its steps move {_si(work.bytes_program or 0, 'B')} "
                  f"(fused minimum {_si(work.bytes_fused, 'B')}); t_SOL ({args.precision}) "
                  f"{_us(report.t_sol_us)} {report.bound}-bound; estimate {_us(estimate.t_us)} "
                  f"({report.t_sol_us / estimate.t_us:.0%} of SOL)")
    table = Table(title="estimate per step", title_justify="left")
    for col in ("step", "op", "config", "waves", "t", "why"):
        table.add_column(col, justify="right" if col in ("waves", "t") else "left")
    for k in estimate.kernels:
        cfg = (f"{k.math} {'x'.join(map(str, k.tile))} {k.schedule} cluster {k.cluster[0]}x{k.cluster[1]} "
               f"{k.stages} stages {k.decomposition}" + (f" x{k.split_k}" if k.split_k > 1 else ""))
        table.add_row(k.name, k.op, cfg, f"{k.waves:.1f}", _us(k.t_us), "; ".join(k.reasons) or "-")
    for s in estimate.torch_steps:
        table.add_row(s.name, f"torch {s.op}", "-", "-", _us(s.t_us), "; ".join(s.reasons))
    console.print(table)
    return 0


def _sol_file(path: Path, gpu: Any, args: argparse.Namespace) -> int:
    from dsl_compiler.limits import ChildCalls
    from sol_models.counting import ProblemLoadError

    try:
        with ChildCalls() as calls:
            work, report = _in_child(calls, _report_for, path, gpu, args.precision)
    except ProblemLoadError as exc:
        _err(str(exc))
        return 1
    if args.json:
        print(json.dumps({"report": report.model_dump(mode="json"), "work": work.model_dump(mode="json")}, indent=2))
        return 0
    from rich.table import Table

    console = _console()
    source = "calibrated" if gpu.calibrated else "datasheet"
    console.print(f"[bold]{work.name}[/bold]  on {gpu.full_name or gpu.name} ({source} ceilings)")
    summary = Table(show_header=False, box=None, pad_edge=False)
    summary.add_column(style="dim")
    summary.add_column()
    summary.add_row("FLOPs", f"{_si(work.flops, 'FLOP')}  (tensor-core {_si(work.flops_tensor, 'FLOP')}, "
                    f"other {_si(work.flops_other, 'FLOP')})")
    summary.add_row("bytes fused", _si(work.bytes_fused, "B") + "  (inputs, parameters and outputs once)")
    summary.add_row("bytes unfused", _si(work.bytes_unfused, "B") + "  (every op through DRAM)")
    summary.add_row("intensity", f"{report.intensity_flop_per_byte:,.1f} FLOP/B  (ridge at {args.precision}: "
                    f"{report.ridge_flop_per_byte:,.1f})")
    summary.add_row(f"t_SOL ({args.precision})", f"[bold]{_us(report.t_sol_us)}[/bold]  {report.bound}-bound  "
                    f"(unfused: {_us(report.t_sol_unfused_us)})")
    summary.add_row("launch floor", f"{_us(report.launch_floor_us)}  ({report.kernel_count} eager launches x "
                    f"{gpu.launch_latency_us:g} us)")
    console.print(summary)
    table = Table(title="per precision", title_justify="left")
    for col in ("precision", "peak", "t_compute", "t_memory", "t_SOL", "bound"):
        table.add_column(col, justify="right" if col not in ("precision", "bound") else "left")
    for p, row in report.per_precision.items():
        mark = "bold" if p == args.precision else ""
        table.add_row(p, f"{row.peak_tflops:,.1f} TFLOP/s", _us(row.t_compute_us), _us(row.t_memory_us),
                      _us(row.t_sol_us), row.bound, style=mark)
    console.print(table)
    if args.ops:
        ops = Table(title="counted ops", title_justify="left")
        for col in ("op", "kind", "calls", "FLOPs", "read", "written"):
            ops.add_column(col, justify="right" if col in ("calls", "FLOPs", "read", "written") else "left")
        for r in sorted(work.ops, key=lambda r: -(r.flops + r.bytes_read + r.bytes_written)):
            ops.add_row(r.op, r.kind, str(r.calls), _si(r.flops, "FLOP"), _si(r.bytes_read, "B"), _si(r.bytes_written, "B"))
        console.print(ops)
    for note in work.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    return 0


def _sol_folder(folder: Path, gpu: Any, args: argparse.Namespace) -> int:
    from dsl_compiler.limits import ChildCalls
    from sol_models.counting import ProblemLoadError

    files = _problem_files(folder)
    if not files:
        _err(f"error: {folder}: no problem files (*.py) found")
        return 1
    rows: list[dict[str, Any]] = []
    errors: list[dict[str, str]] = []
    with ChildCalls() as calls:  # one child process counts every file
        for path in files:
            start = time.perf_counter()
            try:
                work, report = _in_child(calls, _report_for, path, gpu, args.precision)
            except ProblemLoadError as exc:
                errors.append({"path": str(path), "error": str(exc)})
                if not args.json:
                    _err(str(exc))
                continue
            rows.append({
                "path": str(path), "name": work.name, "flops": work.flops, "bytes_fused": work.bytes_fused,
                "bytes_unfused": work.bytes_unfused, "intensity_flop_per_byte": report.intensity_flop_per_byte,
                "bound": report.bound, "t_sol_us": report.t_sol_us,
                "t_sol_us_by_precision": {p: r.t_sol_us for p, r in report.per_precision.items()},
                "launch_floor_us": report.launch_floor_us, "count_s": time.perf_counter() - start,
            })
    positive = [r["t_sol_us"] for r in rows if r["t_sol_us"] > 0]
    summary = {
        "problems": len(files), "counted": len(rows), "failed": len(errors), "gpu": gpu.name,
        "calibrated": gpu.calibrated, "precision": args.precision,
        "compute_bound": sum(r["bound"] == "compute" for r in rows),
        "memory_bound": sum(r["bound"] == "memory" for r in rows),
        "t_sol_us_total": sum(r["t_sol_us"] for r in rows),
        "t_sol_us_geomean": math.exp(sum(math.log(t) for t in positive) / len(positive)) if positive else None,
    }
    if args.json:
        print(json.dumps({"summary": summary, "problems": rows, "errors": errors}, indent=2))
        return 1 if errors else 0
    from rich.table import Table

    console = _console()
    table = Table(title=f"speed of light on {gpu.full_name or gpu.name} at {args.precision} "
                        f"({'calibrated' if gpu.calibrated else 'datasheet'})", title_justify="left")
    for col in ("problem", "FLOPs", "bytes fused", "bytes unfused", "FLOP/B", "bound", f"t_SOL {args.precision}",
                "t_SOL f32", "launch floor"):
        table.add_column(col, justify="left" if col in ("problem", "bound") else "right", no_wrap=True)
    for r in rows:
        table.add_row(str(Path(r["path"]).relative_to(folder)), _si(r["flops"], "FLOP"), _si(r["bytes_fused"], "B"),
                      _si(r["bytes_unfused"], "B"), f"{r['intensity_flop_per_byte']:,.1f}", r["bound"],
                      _us(r["t_sol_us"]), _us(r["t_sol_us_by_precision"].get("f32", math.nan)),
                      _us(r["launch_floor_us"]))
    console.print(table)
    geo = summary["t_sol_us_geomean"]
    console.print(
        f"{summary['counted']} of {summary['problems']} problems counted, {summary['failed']} failed; "
        f"{summary['compute_bound']} compute-bound, {summary['memory_bound']} memory-bound; "
        f"t_SOL total {_us(summary['t_sol_us_total'])}, geomean {_us(geo) if geo else '-'}"
    )
    return 1 if errors else 0


# ---------------------------------------------------------------------------------------------
# trace


def run_trace(args: argparse.Namespace) -> int:
    if args.suite or args.kernelbench:
        return _trace_table(args)
    if args.path is None:
        _err("error: trace takes a problem file, --suite NAME or --kernelbench PATH")
        return 2
    path = Path(args.path)
    if not path.is_file():
        _err(f"error: {path}: " + ("a folder; trace takes one problem file" if path.is_dir() else "no such problem file"))
        return 2
    gpu = _gpu_or_none(args.gpu, False)
    if gpu is None:
        return 2
    from dsl_compiler.limits import ChildCalls
    from sol_models.counting import ProblemLoadError
    from sol_models.trace import TraceFailed, trace_report

    try:
        with ChildCalls() as calls:  # the problem's code runs in a child process, stopped past its limit
            report = _in_child(calls, trace_report, path, gpu)
    except (TraceFailed, ProblemLoadError) as exc:
        _err(f"error: {exc}")
        return 1
    if not report.traced:
        _err(f"error: {path}: cannot trace: {report.error}")
        return 1
    if args.json:
        print(json.dumps(report.model_dump(mode="json"), indent=2))
        return 0
    print(report.program)
    print(f"coverage {report.coverage:.1%} of {_si(report.flops_problem, 'FLOP')} in {report.kernels} CUTLASS "
          f"kernel(s); {report.torch_steps} PyTorch step(s)")
    for op in report.torch_ops:
        print(f"  {op.op} ({op.target}): {op.placement}: {op.reason}")
    if report.estimate is not None:
        print(f"estimate on {report.estimate.gpu}: {_us(report.estimate.t_us)}")
    else:
        print(f"no estimate: {report.estimate_error}")
    return 0


def _table_files(args: argparse.Namespace) -> list[Path] | None:
    """The problem files of ``--suite`` (found by the function the command wires in: suites live above this
    package) or ``--kernelbench``; None after one line on stderr."""
    import importlib

    if args.suite and args.kernelbench or args.path:
        _err("error: trace takes one of a problem file, --suite NAME and --kernelbench PATH")
        return None
    if args.kernelbench:
        folder = Path(args.kernelbench)
        if not folder.is_dir():
            _err(f"error: {folder}: no such folder")
            return None
        files = _problem_files(folder)
        if not files:
            _err(f"error: {folder}: no problem files (*.py) under this folder")
        return files or None
    finder = getattr(args, "suite_files", None)
    if finder is None:
        _err("error: --suite needs the evaluations installed (mucutlass trace wires them in)")
        return None
    module, _, name = finder.partition(":")
    try:
        return getattr(importlib.import_module(module), name)(args.suite)
    except Exception as exc:  # noqa: BLE001 - an unknown suite, an unreadable index: one line
        _err(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        return None


def _trace_table(args: argparse.Namespace) -> int:
    """One row per problem: traced or why not, coverage, the steps left to PyTorch and why; a summary line."""
    files = _table_files(args)
    gpu = _gpu_or_none(args.gpu, False) if files is not None else None
    if files is None or gpu is None:
        return 2
    from dsl_compiler.limits import ChildCalls
    from sol_models.trace import trace_row

    with ChildCalls() as calls:  # problem code runs in a child process, stopped past its limit
        rows = [trace_row(path, lambda p: _in_child(calls, _trace_here, p, gpu)) for path in files]
    traced = [r for r in rows if r.traced]
    mean = sum(r.coverage for r in traced) / len(traced) if traced else 0.0
    summary = f"{len(traced)} of {len(rows)} traced; mean coverage {mean:.1%} of FLOPs (over the traced)"
    if args.json:
        print(json.dumps({"rows": [r.model_dump(mode="json") for r in rows],
                          "summary": {"problems": len(rows), "traced": len(traced), "mean_coverage": mean}}, indent=2))
        return 0
    from rich.table import Table

    table = Table(title=f"trace: {args.suite or args.kernelbench}")
    for column in ("problem", "traced", "coverage", "left to PyTorch"):
        table.add_column(column)
    for r in rows:
        left = "\n".join(f"{s.op} ({s.target}): {s.reason}" for s in r.torch_ops) or "-"
        table.add_row(r.name, "yes" if r.traced else f"no: {r.error}", f"{r.coverage:.1%}" if r.traced else "-", left)
    console = _console()
    console.print(table)
    console.print(summary, markup=False, highlight=False)
    return 0


def _trace_here(path: Path, gpu: Any):
    from sol_models.trace import trace_report

    return trace_report(path, gpu)


# ---------------------------------------------------------------------------------------------
# calibrate


def run_calibrate(args: argparse.Namespace) -> int:
    from sol_models.hardware import UnknownGpuError, calibrated_path, get_gpu

    try:
        spec = get_gpu(args.gpu, calibrated=False)
    except UnknownGpuError as exc:
        _err(f"error: {exc}")
        return 2
    if args.runs < 1:
        _err("error: --runs must be at least 1")
        return 2
    from sol_models.calibrate import CalibrationError, calibrate, save_profile

    try:
        profile = calibrate(spec.name, runs=args.runs, log=lambda m: print(m, file=sys.stderr))
    except CalibrationError as exc:
        _err(f"error: {exc}")
        return 1
    wanted = spec.name.replace("_", " ").split()[0].upper()
    if wanted not in profile["device_name"].upper().replace(" ", ""):
        _err(f"warning: the GPU here is {profile['device_name']!r}, saved as {spec.name!r} as asked")
    out = Path(args.out) if args.out else calibrated_path(spec.name)
    save_profile(profile, out)
    from rich.table import Table

    table = Table(title=f"{profile['device_name']} measured vs datasheet ({spec.name})", title_justify="left")
    for col in ("ceiling", "measured", "datasheet", "fraction"):
        table.add_column(col, justify="left" if col == "ceiling" else "right")
    table.add_row("copy bandwidth", f"{profile['dram_bw_gbps']:,.0f} GB/s", f"{spec.dram_bw_gbps:,.0f} GB/s",
                  f"{profile['dram_bw_gbps'] / spec.dram_bw_gbps:.0%}")
    for p, v in profile["peak_tflops"].items():
        table.add_row(f"{p} matmul", f"{v:,.1f} TFLOP/s", f"{spec.peak_tflops[p]:,.1f} TFLOP/s",
                      f"{v / spec.peak_tflops[p]:.0%}")
    _console().print(table)
    print(f"saved {out}")
    return 0
