"""Which of an operation's input sets the precision probe runs on (its float64 signature runs cost a few
passes of the model each), and the probe itself on one call's kept values (evals.judge.probes)."""

from __future__ import annotations

import random
import time

from evals.judge import probes


class ProbePlan:
    """Every set whose outputs are judged is probed where that fits ``budget_s``; beyond it set 1 (whose cost
    is measured) and a secret sample of the others, at least two in all, drawn from the judge's own
    randomness: a candidate cannot tell which of its calls were probed."""

    def __init__(self, n_sets: int, budget_s: float):
        self.n_sets, self.budget_s = int(n_sets), float(budget_s or 0.0)
        self.chosen: set[int] | None = None  # after the first signature's cost is known
        self.probed = 0

    def wants(self, i: int) -> bool:
        return i == 0 or (self.chosen is not None and i in self.chosen)

    def first_cost(self, per_set_s: float) -> None:
        others = list(range(1, self.n_sets))
        if self.budget_s <= 0 or per_set_s * self.n_sets <= self.budget_s:
            self.chosen = set(others)
        else:
            m = max(1, int(self.budget_s / max(per_set_s, 1e-9)) - 1)
            self.chosen = set(random.SystemRandom().sample(others, min(m, len(others))))


def needed(problem) -> bool:
    """Whether the problem disallows a level the probes can find (fp8 is never allowed: always, in practice)."""
    return not all(level in tuple(problem.allowed_precisions) for level in probes.LEVELS)


def signature(op, model, i: int, inputs: list, ref: list, plan: ProbePlan):
    """Set ``i``'s signatures at the operation's sample positions when the plan probes it (else None); the
    first one's cost fixes which other sets are probed."""
    if not (needed(op.problem) and plan.wants(i)):
        return None
    t0 = time.perf_counter()
    with op.judge.stages("probes"):
        sig = probes.signatures(model, inputs, ref, op.keys.positions, op.problem.allowed_precisions)
    if i == 0:
        plan.first_cost(time.perf_counter() - t0)
    plan.probed += 1
    return sig


def judge_calls(problem, judged: list) -> tuple[str | None, dict, str | None]:
    """The first disallowed level found among ``judged`` ((what, signature, summary) of every call whose
    output was read, each against its own set's signatures), its numbers and the call."""
    allowed = tuple(problem.allowed_precisions)
    numbers: dict = {}
    for what, sig, summary in judged:
        if sig is None or summary is None:
            continue
        level, nums = probes.judge(summary.sample, sig, allowed, nonfinite=summary.nonfinite)
        numbers = numbers or nums
        if level is not None:
            return level, nums, what
    return None, numbers, None
