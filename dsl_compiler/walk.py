"""One walker over the IR's expression trees: the checks, the emitters, the counting and the
frontend read a kernel's epilogue through these functions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dsl_compiler import ir


def expr_nodes(expr: Any) -> Iterator[Any]:
    """Every node of one expression tree, depth-first, the root first."""
    yield expr
    for child in ("arg", "lhs", "rhs"):
        sub = getattr(expr, child, None)
        if sub is not None:
            yield from expr_nodes(sub)


def epilogue_nodes(kernel: ir.Kernel) -> Iterator[Any]:
    """Every node of a kernel's let and store expressions (``ir`` expression nodes), depth-first."""
    for expr in [let.expr for let in kernel.lets] + [s.expr for s in kernel.stores]:
        yield from expr_nodes(expr)


def epilogue_refs(kernel: ir.Kernel) -> list[ir.Ref]:
    """The ``ir.Ref`` nodes of a kernel's epilogue that read tensors (reads of its lets left out)."""
    lets = {let.name for let in kernel.lets}
    return [node for node in epilogue_nodes(kernel) if isinstance(node, ir.Ref) and node.name not in lets]
