"""`mucutlass check`, `mucutlass fmt` and `mucutlass interpret`: the language on the command line.

Exit codes: 0 ok, 1 the program (or the problem) has errors or gives wrong results, 2 usage errors.
Nothing heavy is imported until a command runs; torch only by `interpret`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# Errors after which the interpreter cannot run the program at all. The rest (tiles, clusters, shared
# memory, alignment, layouts, backend limits) concern how a GPU kernel would be built; the interpreter
# does not use them, so `interpret` reports them and runs anyway.
_BLOCKS_INTERPRETER = {"syntax", "undefined-name", "duplicate-name", "shape-mismatch", "unknown-function",
                       "torch-step", "unknown-op", "internal", "target", "reduction"}


def register(subparsers: Any) -> None:
    c = subparsers.add_parser(
        "check", help="parse a μCUTLASS program and run every static check; explain each error",
        description="Parse and check a μCUTLASS program against a target GPU. Each diagnostic has a line and "
        "column, what was found, what is allowed and a fix hint. Exit 1 on any error.")
    c.add_argument("file", help="the program (.mcu), or - for standard input")
    c.add_argument("--target", default="sm90a", help="target GPU description (default: sm90a)")
    c.add_argument("--backend", default="cutlass", choices=("cutlass", "interpreter"),
                   help="also report what this backend cannot build (default: cutlass)")
    c.add_argument("--json", action="store_true", help="print the diagnostics as JSON")
    c.set_defaults(func=run_check)

    f = subparsers.add_parser(
        "fmt", help="print a μCUTLASS program in canonical form (comments kept beside their statements)",
        description="Print the program's canonical text (the printer's output; it parses back to the same program).")
    f.add_argument("file", help="the program (.mcu), or - for standard input")
    f.add_argument("-w", "--write", action="store_true", help="rewrite the file in place")
    f.add_argument("--check", action="store_true", help="exit 1 if the file is not in canonical form")
    f.set_defaults(func=run_fmt)

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


class UsageError(Exception):
    """A command-line problem (missing file, unreadable path); exit code 2."""


def read_program(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{path}: no such file")
    if p.is_dir():
        raise UsageError(f"{path}: is a folder; give a program file")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return data.decode("utf-8", errors="replace")


def _read(path: str) -> str | None:
    """The program's text, or None after saying why it cannot be read (a usage error)."""
    try:
        return read_program(path)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def _counted(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _display_name(path: str) -> str:
    return "<stdin>" if path == "-" else path


def _print_diagnostics(diags: list, filename: str, as_json: bool) -> None:
    if as_json:
        print(json.dumps([d.model_dump(mode="json") for d in diags], indent=2))
        return
    from dsl_compiler.diagnostics import render_all

    if diags:
        print(render_all(diags, filename), file=sys.stderr if any(d.severity == "error" for d in diags) else sys.stdout)


def run_check(args: argparse.Namespace) -> int:
    text = _read(args.file)
    if text is None:
        return 2
    from dsl_compiler.checks import available_targets, check_text
    from dsl_compiler.diagnostics import has_errors

    if args.target not in available_targets():
        print(f"error: unknown target '{args.target}'; available: {', '.join(available_targets())}", file=sys.stderr)
        return 2
    backend = None if args.backend == "interpreter" else args.backend
    program, diags = check_text(text, target=args.target, backend=backend)
    name = _display_name(args.file)
    _print_diagnostics(diags, name, args.json)
    if program is None or has_errors(diags):
        if not args.json:
            print(f"{name}: {_counted(sum(d.severity == 'error' for d in diags), 'error')}", file=sys.stderr)
        return 1
    if not args.json:
        warnings = sum(d.severity == "warning" for d in diags)
        print(f"{name}: ok ({_counted(len(program.kernels), 'kernel')}, {_counted(len(program.torch_steps), 'torch step')}"
              + (f", {_counted(warnings, 'warning')}" if warnings else "") + f"; target {args.target})")
    return 0


def run_fmt(args: argparse.Namespace) -> int:
    text = _read(args.file)
    if text is None:
        return 2
    if args.write and args.file == "-":
        print("error: --write needs a file, not standard input", file=sys.stderr)
        return 2
    from dsl_compiler.parser import collect_comments, parse
    from dsl_compiler.printer import format_program

    program, diags = parse(text)
    if program is None:
        _print_diagnostics(diags, _display_name(args.file), False)
        return 1
    comments = collect_comments(text)
    canonical = format_program(program, comments)
    # fmt never loses text: the canonical form must mean the same program and carry every comment
    reparsed, _ = parse(canonical)
    kept = collect_comments(canonical)
    if reparsed != program or kept is None or _comment_words(kept.texts()) != _comment_words(comments.texts()):
        print(f"error: {args.file}: the canonical form would change the program or lose a comment; the file is left "
              "as it is", file=sys.stderr)
        return 1
    if args.check:
        if canonical != text:
            print(f"{args.file}: not in canonical form (run mucutlass fmt -w {args.file})", file=sys.stderr)
            return 1
        return 0
    if args.write:
        Path(args.file).write_text(canonical)
        return 0
    sys.stdout.write(canonical)
    return 0


def _comment_words(texts: list[str]) -> list[str]:
    # two trailing comments of one printed line are joined into one; their words are what must survive
    return sorted(word for text in texts for word in text.split())


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

    from dsl_compiler.runtime import InterpretError, compare_with_problem

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
                continue
            print(f"output {row['name']}: shape {row['shape']}  max abs error {row['max_abs_error']:.3e}  "
                  f"max rel error {row['max_rel_error']:.3e}  worst/allowed {row['worst_over_allowed']:.3f}  "
                  f"{'ok' if row['ok'] else 'MISMATCH'}")
        verdict = "PASS" if result["ok"] else "FAIL"
        print(f"{verdict} at tolerance {result['tolerance']:g} (atol = rtol; {result['device']}, seed {args.seed}, "
              f"interpreter with kernel precision: {', '.join(result['math']) or 'no kernels'})")
    return 0 if result["ok"] else 1
