"""μCUTLASS: the language (parser, printer, checks, shapes), its reference interpreter and runtime.

Importing this package is light: torch is imported only by the interpreter, the runtime and torch steps.
"""

from __future__ import annotations

from dsl_compiler.checks import check, check_text
from dsl_compiler.diagnostics import Diagnostic, has_errors, render_all
from dsl_compiler.ir import Program
from dsl_compiler.parser import parse
from dsl_compiler.printer import format_program

__all__ = ["Diagnostic", "Program", "check", "check_text", "format_program", "has_errors", "parse", "render_all"]
