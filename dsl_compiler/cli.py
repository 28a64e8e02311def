"""`mucutlass check` and `mucutlass fmt`: the language on the command line.

Exit codes: 0 ok, 1 the program (or the problem) has errors or gives wrong results, 2 usage errors.
Nothing heavy is imported until a command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

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
    f.add_argument("files", nargs="+", metavar="FILE", help="programs (.mcu), or - for standard input")
    f.add_argument("-w", "--write", action="store_true", help="rewrite each file in place")
    f.add_argument("--check", action="store_true",
                   help="list the files not in canonical form and exit 1 if there are any; change nothing")
    f.set_defaults(func=run_fmt)


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
    if p.suffix == ".py":
        raise UsageError(f"{path}: not a μCUTLASS file (a .py is a problem; try `mucutlass trace {path}` or "
                         f"`mucutlass sol {path}`)")
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
    """Each file in turn; the exit code is the worst of them (2 usage, 1 a file with errors or, with --check, one
    not in canonical form). With --check every file that would change is listed."""
    if "-" in args.files and len(args.files) > 1:
        print("error: standard input (-) goes alone, not beside files", file=sys.stderr)
        return 2
    if args.write and args.files == ["-"]:
        print("error: --write needs a file, not standard input", file=sys.stderr)
        return 2
    return max(_fmt_one(path, args) for path in args.files)


def _fmt_one(path: str, args: argparse.Namespace) -> int:
    text = _read(path)
    if text is None:
        return 2
    from dsl_compiler.parser import collect_comments, parse
    from dsl_compiler.printer import format_program

    program, diags = parse(text)
    if program is None:
        _print_diagnostics(diags, _display_name(path), False)
        return 1
    comments = collect_comments(text)
    canonical = format_program(program, comments)
    # fmt never loses text: the canonical form must mean the same program and carry every comment
    reparsed, _ = parse(canonical)
    kept = collect_comments(canonical)
    if reparsed != program or kept is None or _comment_words(kept.texts()) != _comment_words(comments.texts()):
        print(f"error: {path}: the canonical form would change the program or lose a comment; the file is left "
              "as it is", file=sys.stderr)
        return 1
    if args.check:
        if canonical != text:
            print(f"{path}: not in canonical form (run mucutlass fmt -w {path})", file=sys.stderr)
            return 1
        return 0
    if args.write:
        if canonical != text:
            Path(path).write_text(canonical)
        return 0
    sys.stdout.write(canonical)
    return 0


def _comment_words(texts: list[str]) -> list[str]:
    # two trailing comments of one printed line are joined into one; their words are what must survive
    return sorted(word for text in texts for word in text.split())
