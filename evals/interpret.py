"""`mucutlass interpret`: a program on the reference interpreter against the problem's PyTorch model.

Exit codes: 0 the outputs match, 1 the program (or the problem) has errors or gives wrong results,
2 usage errors. torch is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsl_compiler.cli import _display_name, _read

if TYPE_CHECKING:
    from dsl_compiler import ir

# Errors after which the interpreter cannot run the program at all. The rest (tiles, clusters, shared
# memory, alignment, layouts, backend limits) concern how a GPU kernel would be built; the interpreter
# does not use them, so `interpret` reports them and runs anyway.
_BLOCKS_INTERPRETER = {"syntax", "undefined-name", "duplicate-name", "shape-mismatch", "unknown-function",
                       "torch-step", "unknown-op", "internal", "target", "reduction"}


def register(subparsers: Any) -> None:
    i = subparsers.add_parser(
        "interpret", help="run a program on the reference interpreter and compare it with the problem's PyTorch model",
        description="Load a KernelBench-format problem, build its Model (seeded), bind the program's params from the "
        "model's state_dict, run both on get_inputs() and report the max abs / rel error and pass/fail at the "
        "problem's tolerance. The interpreter rounds operands as the kernel would (tf32, bf16, f16).")
    i.add_argument("file", help="the program (.mcu)")
    i.add_argument("--problem", required=True, help="the problem file (.py) with Model, get_inputs, get_init_inputs")
    i.add_argument("--seed", type=int, default=0, help="seed for the model's parameters and the inputs (default: 0)")
    i.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    i.add_argument("--tolerance", type=float, default=None, help="atol = rtol (default: the problem's)")
    i.add_argument("--json", action="store_true", help="print the result as JSON")
    i.set_defaults(func=run_interpret)


def run_interpret(args: argparse.Namespace) -> int:
    text = _read(args.file)
    if text is None:
        return 2
    if not Path(args.problem).is_file():
        print(f"error: {args.problem}: no such problem file", file=sys.stderr)
        return 2
    from dsl_compiler.checks import check_text
    from dsl_compiler.diagnostics import render_all

    name = _display_name(args.file)
    program, diags = check_text(text, backend=None)
    blocking = [d for d in diags if d.severity == "error" and d.code in _BLOCKS_INTERPRETER]
    if program is None or blocking:
        print(render_all(diags, name), file=sys.stderr)
        return 1
    notes = [d for d in diags if d not in blocking]
    if notes and not args.json:
        print(render_all(notes, name))
        print("(the interpreter runs the program anyway: these concern how a GPU kernel would be built)\n")

    from evals.problems import ProblemError, check_problem

    try:  # its calls in a child process first: one that ignores the time limit is stopped there
        check_problem(args.problem)
    except ProblemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.device is not None:
        import torch

        try:
            device = torch.device(args.device)
        except RuntimeError:
            print(f"error: '{args.device}' is not a torch device (try cpu or cuda)", file=sys.stderr)
            return 2
        if device.type == "cuda" and not torch.cuda.is_available():
            print("error: --device cuda, but this machine has no CUDA GPU", file=sys.stderr)
            return 2

    try:
        result = compare_with_problem(program, args.problem, seed=args.seed, device=args.device,
                                      tolerance=args.tolerance)
    except InterpretError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for row in result["outputs"]:
            if row["shape"] is None or (row.get("reason") or "").startswith("shape"):
                print(f"output {row['name']}: MISMATCH ({row['reason']})")
            else:
                print(f"output {row['name']}: shape {row['shape']}  max abs error {row['max_abs_error']:.3e}  "
                      f"max rel error {row['max_rel_error']:.3e}  worst/allowed {row['worst_over_allowed']:.3f}  "
                      f"{'ok' if row['ok'] else 'MISMATCH'}")
            for line in row.get("pattern") or []:
                print(f"  {line}")
        verdict = "PASS" if result["ok"] else "FAIL"
        print(f"{verdict} at tolerance {result['tolerance']:g} (atol = rtol; {result['device']}, seed {args.seed}, "
              f"interpreter with kernel precision: {', '.join(result['math']) or 'no kernels'})")
    return 0 if result["ok"] else 1


class InterpretError(Exception):
    """The problem or the program cannot be run together; the message is one line."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def compare_outputs(outputs: Any, references: Any, tolerance: float) -> list[dict[str, Any]]:
    """Per output: shape, max abs error, max rel error (|out - ref| / |ref| where |ref| > tolerance), the
    worst error as a fraction of what allclose allows (``tolerance * (1 + |ref|)``; pass <= 1), and whether
    it passes ``torch.allclose(atol=rtol=tolerance)`` with finite values."""
    import torch

    outs = outputs if isinstance(outputs, tuple | list) else (outputs,)
    refs = references if isinstance(references, tuple | list) else (references,)
    rows = []
    for i in range(max(len(outs), len(refs))):
        name = f"#{i}"
        if i >= len(outs) or i >= len(refs):
            rows.append({"name": name, "shape": None, "max_abs_error": float("inf"), "max_rel_error": float("inf"),
                         "ok": False, "reason": f"{len(outs)} output(s) against {len(refs)} reference output(s)"})
            continue
        o, r = outs[i].detach().float(), refs[i].detach().float().to(outs[i].device)
        if tuple(o.shape) != tuple(r.shape):
            rows.append({"name": name, "shape": list(o.shape), "max_abs_error": float("inf"),
                         "max_rel_error": float("inf"), "ok": False,
                         "reason": f"shape {list(o.shape)} against the reference's {list(r.shape)}",
                         "pattern": mismatch_pattern(o, r, tolerance)})
            continue
        diff = (o - r).abs()
        finite = bool(torch.isfinite(o).all())
        big = r.abs() > tolerance
        max_abs = float(diff.max()) if diff.numel() else 0.0
        max_rel = float((diff[big] / r.abs()[big]).max()) if bool(big.any()) else 0.0
        worst = float((diff / (tolerance * (1 + r.abs()))).max()) if diff.numel() else 0.0
        ok = finite and bool(torch.allclose(o, r, atol=tolerance, rtol=tolerance))
        rows.append({"name": name, "shape": list(o.shape), "max_abs_error": max_abs, "max_rel_error": max_rel,
                     "worst_over_allowed": worst, "ok": ok,
                     "reason": None if ok else ("non-finite values" if not finite else "values differ"),
                     "pattern": [] if ok else mismatch_pattern(o, r, tolerance)})
    return rows


def _ranges(indices: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2, 5, 7-8" (at most six runs, then "...")."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:6])
    return text + (", ..." if len(runs) > 6 else "")


def mismatch_pattern(output: Any, reference: Any, tolerance: float) -> list[str]:
    """What a wrong output looks like next to its reference, each a line that points to a fix: transposed, scaled by a
    constant, offset by a constant, or wrong only in some rows or columns. Empty when no pattern fits."""
    import torch

    o, r = output.detach().double(), reference.detach().double().to(output.device)
    if o.dim() >= 2 and tuple(o.shape) == (*r.shape[:-2], r.shape[-1], r.shape[-2]) and o.shape != r.shape:
        return ["its shape is the reference's transposed: swap the operands (a^T, b^T) or the output's dims"]
    if tuple(o.shape) != tuple(r.shape) or o.numel() == 0:
        return []
    if not bool(torch.isfinite(o).all()):
        bad = (~torch.isfinite(o)).sum().item()
        return [f"{bad} of {o.numel()} values are NaN or infinite"]

    def close(a: Any) -> bool:
        return bool(torch.allclose(a, r, atol=tolerance, rtol=tolerance))

    found = []
    if o.dim() >= 2 and o.shape[-1] == o.shape[-2] and close(o.transpose(-1, -2)):
        found.append("it looks transposed: it equals the reference with its last two dims swapped (a^T / b^T "
                     "swapped, or the operands in the wrong order)")
    denominator = float((r * r).sum())
    if denominator > 0:
        scale = float((o * r).sum()) / denominator
        if abs(scale - 1) > tolerance and abs(scale) > 1e-12 and close(o / scale):
            found.append(f"it looks scaled: output = {scale:.4g} x reference (a constant factor is off)")
    offset = float((o - r).mean())
    if abs(offset) > tolerance and close(o - offset):
        found.append(f"it looks offset: output = reference {'+' if offset > 0 else '-'} {abs(offset):.4g} "
                     "(a constant term, or a bias read as [scalar], is off)")
    if not found and o.dim() >= 2:
        wrong = ~torch.isclose(o, r, atol=tolerance, rtol=tolerance)
        grid = wrong.reshape(-1, o.shape[-1])  # rows (batch dims folded in) x columns
        rows = grid.any(dim=1).nonzero().flatten().tolist()
        cols = grid.any(dim=0).nonzero().flatten().tolist()
        n_rows, n_cols = grid.shape
        if rows and len(rows) <= n_rows // 2:
            found.append(f"wrong only in rows {_ranges(rows)} ({len(rows)} of {n_rows}); the other rows match")
        elif cols and len(cols) <= n_cols // 2:
            found.append(f"wrong only in columns {_ranges(cols)} ({len(cols)} of {n_cols}); the other columns match")
    return found


def compare_with_problem(program: ir.Program, problem_path: str, seed: int = 0, device: str | None = None,
                         tolerance: float | None = None) -> dict[str, Any]:
    """Run ``program`` on the interpreter and the problem's ``Model`` (true fp32) on the same inputs."""
    import torch

    from dsl_compiler import interpreter
    from dsl_compiler.runtime import BindError, bind_params, load
    from evals.problems import ProblemError, load_problem

    try:
        problem = load_problem(problem_path)
    except ProblemError as exc:
        raise InterpretError(str(exc)) from None
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    tol = float(tolerance if tolerance is not None else problem.tolerance)
    try:
        model = problem.make_model(seed=seed, device=device)
        inputs = problem.make_inputs(seed=seed, device=device)
    except Exception as exc:  # noqa: BLE001 - any failure of the problem's own code
        raise InterpretError(f"{problem_path}: the problem fails to build: {_one_line(exc)}") from None
    try:
        params = bind_params(program, model)
        module = load(program, "interpreter", params).to(device)
    except BindError as exc:
        raise InterpretError(str(exc)) from None
    with torch.no_grad():
        with interpreter.exact_fp32():
            try:
                reference = model(*inputs)
            except Exception as exc:  # noqa: BLE001
                raise InterpretError(f"{problem_path}: the reference model fails: {_one_line(exc)}") from None
        try:
            outputs = module(*inputs)
        except ValueError as exc:
            raise InterpretError(f"the program does not fit the problem's inputs: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - e.g. a torch step that fails on real data
            raise InterpretError(f"the program fails on the problem's inputs: {_one_line(exc)}") from None
    rows = compare_outputs(outputs, reference, tol)
    for row, name in zip(rows, program.outputs):
        row["name"] = name
    from dsl_compiler import shapes
    from dsl_compiler.precision import effective_math

    types = shapes.infer(program)
    return {
        "problem": problem.name,
        "tolerance": tol,
        "device": str(device),
        "seed": seed,
        "math": sorted({effective_math(program, k, types) for k in program.kernels}),
        "outputs": rows,
        "ok": all(r["ok"] for r in rows),
    }
