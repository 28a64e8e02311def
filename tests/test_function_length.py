"""No function over 80 lines in the modules kept to that bound: the op table and its readers, the CUTLASS
emitters, the frontend's lowering passes, and the checks, build and estimate modules around them. Measured
with ``ast`` (a function's first to last line, its docstring and nested functions included)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 80
MODULES = (
    "dsl_compiler/ops.py", "dsl_compiler/ir.py", "dsl_compiler/parser.py", "dsl_compiler/interpreter.py",
    "dsl_compiler/checks.py", "dsl_compiler/build.py", "dsl_compiler/export.py", "dsl_compiler/cutlass_runtime.py",
    "dsl_compiler/run_settings.py", "dsl_compiler/cutlass/*.py", "dsl_compiler/frontend/graph.py",
    "dsl_compiler/frontend/lower.py", "dsl_compiler/frontend/normalize.py", "dsl_compiler/frontend/results.py",
    "dsl_compiler/frontend/trace.py", "dsl_compiler/frontend/passes/*.py", "sol_models/counting.py",
    "sol_models/estimate.py", "graph/planning.py",
)


def long_functions(paths) -> list[str]:
    """``path:line name (n lines)`` of every function or method over LIMIT lines."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > LIMIT:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    return found


def test_no_function_is_over_80_lines():
    paths = sorted({p for pattern in MODULES for p in ROOT.glob(pattern)})
    assert len(paths) >= len(MODULES)
    assert long_functions(paths) == []
