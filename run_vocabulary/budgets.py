"""Hard budgets of a run: dollars, tokens and minutes a run may spend, checked between attempts.

A budget is no stop rule of a policy (``run_vocabulary.policies``): it caps every policy, and the run that hits
it ends with a stop reason naming the budget (``budget_tokens: ...``), the best result so far kept. Pure
functions of what a run has spent, so the graph, an evaluation and a resume apply the same test.
"""

from __future__ import annotations

from dataclasses import dataclass

BUDGET_STOP_PREFIX = "budget_"  # every budget's stop reason starts with it: budget_usd, budget_tokens, budget_minutes
OUT_OF_IDEAS = "out_of_ideas"  # the stop reason of a writer with no distinct program left to try


@dataclass(frozen=True)
class Spend:
    """What a run (or an evaluation) has spent: model tokens (input + output), dollars, seconds of work."""

    tokens: int = 0
    cost_usd: float = 0.0
    seconds: float = 0.0

    @property
    def minutes(self) -> float:
        return self.seconds / 60.0

    def __add__(self, other: "Spend") -> "Spend":
        return Spend(self.tokens + other.tokens, self.cost_usd + other.cost_usd, self.seconds + other.seconds)


@dataclass(frozen=True)
class Budget:
    """The caps; None is no cap."""

    usd: float | None = None
    tokens: int | None = None
    minutes: float | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.usd, self.tokens, self.minutes))

    def left(self, spent: Spend) -> "Budget":
        """What is left of these caps after ``spent`` (never below 0)."""
        return Budget(None if self.usd is None else max(0.0, self.usd - spent.cost_usd),
                      None if self.tokens is None else max(0, self.tokens - spent.tokens),
                      None if self.minutes is None else max(0.0, self.minutes - spent.minutes))

    def shared(self, ways: int) -> "Budget":
        """Each of ``ways`` equal shares of these caps (a token share at least 1)."""
        return Budget(None if self.usd is None else self.usd / ways,
                      None if self.tokens is None else max(1, self.tokens // ways),
                      None if self.minutes is None else self.minutes / ways)

    def plus(self, spent: Spend) -> "Budget":
        """These caps raised by ``spent``: a share of what is left, for a run that already spent ``spent``."""
        return Budget(None if self.usd is None else self.usd + spent.cost_usd,
                      None if self.tokens is None else self.tokens + spent.tokens,
                      None if self.minutes is None else self.minutes + spent.minutes)

    def tighter(self, other: "Budget") -> "Budget":
        """The smaller of the two caps of each kind."""
        def least(a, b):
            return b if a is None else a if b is None else min(a, b)

        return Budget(least(self.usd, other.usd), least(self.tokens, other.tokens), least(self.minutes, other.minutes))


def budget_stop(spent: Spend, budget: Budget, whose: str = "run") -> str:
    """Why ``spent`` ends the run under ``budget`` ("" while every cap holds): the first cap reached, of dollars,
    tokens, minutes."""
    if budget.usd is not None and spent.cost_usd >= budget.usd:
        return f"budget_usd: ${spent.cost_usd:.4f} spent of the {whose}'s ${budget.usd:g}"
    if budget.tokens is not None and spent.tokens >= budget.tokens:
        return f"budget_tokens: {spent.tokens} tokens spent of the {whose}'s {budget.tokens}"
    if budget.minutes is not None and spent.minutes >= budget.minutes:
        return f"budget_minutes: {spent.minutes:.2f} minutes spent of the {whose}'s {budget.minutes:g}"
    return ""


def is_budget_stop(reason: str) -> bool:
    return reason.startswith(BUDGET_STOP_PREFIX)


def out_of_ideas(writer: str, attempts: int, max_attempts: int) -> str:
    """The stop reason of a writer with no distinct program left before the attempt cap."""
    return (f"{OUT_OF_IDEAS}: the {writer} tier has no distinct program left to try after {attempts} "
            f"attempt(s) of {max_attempts}")
