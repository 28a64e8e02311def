"""The library modules the trace rewrites as the ops they compute (``frontend.module_rewrites``' rules): recurrent
layers, attention and Transformer encoder layers. The one list the tracer and the normaliser read."""

from __future__ import annotations

from typing import Any

from dsl_compiler.frontend import attention, recurrent
from dsl_compiler.frontend.module_rewrites import Rule, rewrite_modules
from dsl_compiler.frontend.module_rewrites import rule_for as _rule_for

RULES: tuple[Rule, ...] = (recurrent.RULE, *attention.RULES)


def rule_for(module: Any) -> Rule | None:
    """The rule that takes ``module``'s calls, or None."""
    return _rule_for(module, RULES)


def kept_whole(module: Any, node: Any) -> str | None:
    """Why a call of ``module`` at ``node`` stays one module step (None: it is rewritten, or no rule takes it)."""
    rule = rule_for(module)
    return rule.kept_whole(module, node) if rule is not None else None


def rewrite(gm: Any) -> int:
    """One round of rewrites over ``gm`` (shapes propagated); how many calls were rewritten."""
    return rewrite_modules(gm, RULES)
