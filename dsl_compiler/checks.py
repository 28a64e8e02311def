"""Static checks of a program against a target GPU description (``targets/<name>.toml``)."""

from __future__ import annotations

from dsl_compiler import ir, shapes
from dsl_compiler.diagnostics import Diagnostic, has_errors
from dsl_compiler.parser import parse


def check(program: ir.Program, target: str = "sm90a") -> list[Diagnostic]:
    try:
        shapes.infer(program)
    except shapes.ShapeError as exc:
        return [Diagnostic(code=exc.code, message=exc.message, span=exc.span, found=exc.found,
                           expected=exc.expected, hint=exc.hint)]
    return []


def check_text(text: str, target: str = "sm90a") -> tuple[ir.Program | None, list[Diagnostic]]:
    program, diagnostics = parse(text)
    if program is None or has_errors(diagnostics):
        return program, diagnostics
    return program, diagnostics + check(program, target)
