"""Comparison masks folded into the fill that uses them: ``x.masked_fill(m == 0, v)`` (a causal attention's
``bias[:, :, :T, :T] == 0``) becomes one ``fill_where(x, m, v, "eq", 0)`` step, whose operands are all float
tensors a program carries (a program has no bool tensors; the comparison alone could not be a step)."""

from __future__ import annotations

import math
from typing import Any

from dsl_compiler.frontend.targets import target_name

# a comparison written the other way round (0.5 > m) is the mirrored one (m < 0.5); the keys are the comparisons
_MIRRORED = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


def _comparison(node: Any) -> tuple[Any, str, float] | None:
    """(tensor, comparison, scalar) of a node comparing a tensor with a number, else None."""
    import torch.fx

    if node.op not in ("call_function", "call_method"):
        return None
    name = target_name(node)[0]
    if name not in _MIRRORED or len(node.args) != 2 or node.kwargs:
        return None
    a, b = node.args
    if isinstance(a, torch.fx.Node) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return a, name, float(b)
    if isinstance(b, torch.fx.Node) and isinstance(a, (int, float)) and not isinstance(a, bool):
        return b, _MIRRORED[name], float(a)
    return None


def fold_comparison_masks(gm: Any) -> int:
    """Each ``masked_fill(x, tensor <cmp> number, value)`` of ``gm`` (shapes propagated) as one ``fill_where``
    call; the comparison goes where nothing else reads it. Returns how many fills were folded."""
    from dsl_compiler.torch_steps import fill_where

    folded = 0
    graph = gm.graph
    for node in list(graph.nodes):
        name = target_name(node)[0] if node.op in ("call_function", "call_method") else ""
        if name != "masked_fill" or len(node.args) != 3 or node.kwargs:
            continue
        x, cond, value = node.args
        found = _comparison(cond) if hasattr(cond, "op") else None
        if found is None or not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
            continue
        tensor, comparison, than = found
        with graph.inserting_before(node):
            fill = graph.call_function(fill_where, (x, tensor, float(value), comparison, than))
        fill.meta = dict(node.meta)
        node.replace_all_uses_with(fill)
        graph.erase_node(node)
        if not cond.users:
            graph.erase_node(cond)
        folded += 1
    if folded:
        graph.lint()
        gm.recompile()
    return folded
