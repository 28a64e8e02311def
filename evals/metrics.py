"""Evaluation metrics: pure functions of per-problem results.

Definitions (KernelBench's and the budgeting study's):
- speedup = t_baseline / t_kernel for baselines eager_fp32, eager_tf32 and compile; geomean and median over
  correct problems.
- fast_p = (problems correct AND speedup > p) / (all problems); fast_0 is the correctness rate.
- attempt curve: after n attempts, the fraction of all problems whose best correct result so far is >= 2x.
- efficiency gain = (g_policy / g_fixed) x (spend_fixed / spend_policy), spend being tokens, or attempts for
  tiers that use no tokens; retention = g_policy / g_fixed.
- Integrity: a result with flags (SOL ceiling, PyTorch-only, the harness's checks) is out of every headline
  number (it counts as not correct) and counted beside them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import TypeVar

from pydantic import BaseModel, Field

from run_vocabulary.records import AttemptRecord, RunSummary
from run_vocabulary.variants import DEFAULT_VARIANT

BASELINES = ("eager_fp32", "eager_tf32", "compile")
FAST_P_THRESHOLDS = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
ATTEMPT_CURVE_THRESHOLD = 2.0
R = TypeVar("R", "ProblemResult", RunSummary)


class ProblemResult(BaseModel):
    """The outcome of one (problem, tier, policy), reduced to what metrics need."""

    problem: str
    tier: str
    policy: str
    correct: bool  # the kept result passed validation
    variant: str = DEFAULT_VARIANT  # run_vocabulary.variants
    speedups: dict[str, float] = Field(default_factory=dict)  # baseline -> t_baseline / t_kernel
    sol_fraction: float | None = None  # t_sol / t_kernel of the kept result (t_sol at TF32)
    precision: str | None = None  # the math the kept result computed in ("f16", "tf32", "f16,tf32")
    flags: list[str] = Field(default_factory=list)  # integrity findings on the kept result
    attempts: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    # per attempt, in order: speedup over each baseline of a correct, unflagged attempt, else None
    attempt_speedups: dict[str, list[float | None]] = Field(default_factory=dict)

    @property
    def flagged(self) -> bool:
        return bool(self.flags)

    @property
    def counts(self) -> bool:
        """In the headline numbers: correct and not flagged."""
        return self.correct and not self.flags


def _speedups_of(attempt: AttemptRecord) -> dict[str, float]:
    values = {
        "eager_fp32": attempt.speedup_vs_eager_fp32,
        "eager_tf32": attempt.speedup_vs_eager_tf32,
        "compile": attempt.speedup_vs_compile,
    }
    return {k: v for k, v in values.items() if v is not None and v > 0}


def result_from_summary(summary: RunSummary) -> ProblemResult:
    best = summary.best
    per_attempt: dict[str, list[float | None]] = {b: [] for b in BASELINES}
    for a in sorted(summary.attempts, key=lambda a: a.index):
        ok = a.correct and not a.flags
        s = _speedups_of(a) if ok else {}
        for b in BASELINES:
            per_attempt[b].append(s.get(b))
    return ProblemResult(
        problem=summary.problem,
        tier=summary.tier,
        policy=summary.policy,
        variant=summary.variant,
        correct=bool(best and best.correct),
        speedups=_speedups_of(best) if best and best.correct else {},
        sol_fraction=best.sol_fraction if best and best.correct else None,
        precision=best.precision if best and best.correct else None,
        flags=list(best.flags) if best else [],
        attempts=len(summary.attempts),
        tokens=summary.tokens_in + summary.tokens_out,
        cost_usd=summary.cost_usd,
        attempt_speedups=per_attempt,
    )


def timing_sources(summaries: Iterable[RunSummary]) -> list[str]:
    """Where the runs' times came from ("gpu", "estimate"), sorted."""
    return sorted({a.timing_source for s in summaries for a in s.attempts if a.timing_source})


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive, finite values (None, zero and inf are left out); None if none is left."""
    xs = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not xs:
        return None
    return math.exp(sum(math.log(v) for v in xs) / len(xs))


def geomean_speedup(results: Sequence[ProblemResult], baseline: str) -> float | None:
    """Geomean speedup over ``baseline`` across correct, unflagged results."""
    return geomean(r.speedups[baseline] for r in results if r.counts and baseline in r.speedups)


def median_speedup(results: Sequence[ProblemResult], baseline: str) -> float | None:
    xs = [r.speedups[baseline] for r in results if r.counts and baseline in r.speedups]
    return statistics.median(xs) if xs else None


def fast_p(results: Sequence[ProblemResult], p: float, baseline: str) -> float:
    """KernelBench's fast_p: correct and speedup strictly above p, over all problems. fast_0 is the
    correctness rate, also where no baseline was timed (a run without a GPU)."""
    if not results:
        return 0.0
    hits = sum(1 for r in results if r.counts and (p <= 0 or (r.speedups.get(baseline) or 0.0) > p))
    return hits / len(results)


def fast_p_table(results: Sequence[ProblemResult], baseline: str,
                 thresholds: Sequence[float] = FAST_P_THRESHOLDS) -> dict[float, float]:
    return {p: fast_p(results, p, baseline) for p in thresholds}


def attempt_curve(results: Sequence[ProblemResult], baseline: str = "eager_fp32",
                  threshold: float = ATTEMPT_CURVE_THRESHOLD, max_attempts: int | None = None) -> list[float]:
    """curve[n-1] = fraction of all problems with a correct result >= threshold within their first n attempts.

    A run that stopped before n keeps its final best (it would not have been run further).
    """
    if not results:
        return []
    n_max = max_attempts or max((len(r.attempt_speedups.get(baseline, [])) for r in results), default=0)
    curve = []
    for n in range(1, n_max + 1):
        hits = 0
        for r in results:
            first_n = [s for s in r.attempt_speedups.get(baseline, [])[:n] if s is not None]
            if first_n and max(first_n) >= threshold:
                hits += 1
        curve.append(hits / len(results))
    return curve


def geomean_sol_fraction(results: Sequence[ProblemResult]) -> float | None:
    return geomean(r.sol_fraction for r in results if r.counts and r.sol_fraction)


def retention(g_policy: float | None, g_fixed: float | None) -> float | None:
    if not g_policy or not g_fixed:
        return None
    return g_policy / g_fixed


def efficiency_gain(g_policy: float | None, g_fixed: float | None,
                    spend_policy: float, spend_fixed: float) -> float | None:
    """(g_policy / g_fixed) x (spend_fixed / spend_policy); spend is tokens, or attempts without tokens."""
    r = retention(g_policy, g_fixed)
    if r is None or spend_policy <= 0 or spend_fixed <= 0:
        return None
    return r * (spend_fixed / spend_policy)


class GroupMetrics(BaseModel):
    """Every headline number of one (tier, policy) group."""

    tier: str
    policy: str
    total: int
    correct: int  # correct and unflagged
    variant: str = DEFAULT_VARIANT
    flagged: int
    geomean_speedup: dict[str, float | None]
    median_speedup: dict[str, float | None]
    geomean_speedup_with_flagged: dict[str, float | None]  # what the flagged results would have claimed
    fast_p: dict[str, dict[float, float]]
    geomean_sol_fraction: float | None
    attempt_curve: dict[str, list[float]]
    attempts: int
    tokens: int
    cost_usd: float

    @property
    def spend_unit(self) -> str:
        return "tokens" if self.tokens > 0 else "attempts"

    @property
    def spend(self) -> int:
        return self.tokens if self.tokens > 0 else self.attempts


def group_metrics(results: Sequence[ProblemResult]) -> GroupMetrics:
    if not results:
        raise ValueError("no results to summarise")
    tier, policy, variant = results[0].tier, results[0].policy, results[0].variant
    unflagged = [r.model_copy(update={"flags": []}) for r in results]
    return GroupMetrics(
        tier=tier,
        policy=policy,
        variant=variant,
        total=len(results),
        correct=sum(r.counts for r in results),
        flagged=sum(r.flagged for r in results),
        geomean_speedup={b: geomean_speedup(results, b) for b in BASELINES},
        median_speedup={b: median_speedup(results, b) for b in BASELINES},
        geomean_speedup_with_flagged={b: geomean_speedup(unflagged, b) for b in BASELINES},
        fast_p={b: fast_p_table(results, b) for b in BASELINES},
        geomean_sol_fraction=geomean_sol_fraction(results),
        attempt_curve={b: attempt_curve(results, b) for b in BASELINES},
        attempts=sum(r.attempts for r in results),
        tokens=sum(r.tokens for r in results),
        cost_usd=sum(r.cost_usd for r in results),
    )


def by_group(results: Iterable[R]) -> dict[tuple[str, str, str], list[R]]:
    """Results (or run summaries: anything with a tier, a variant and a policy) by (tier, variant, policy),
    in their order."""
    groups: dict[tuple[str, str, str], list[R]] = {}
    for r in results:
        groups.setdefault((r.tier, r.variant, r.policy), []).append(r)
    return groups


class PolicyComparison(BaseModel):
    """A policy against the fixed budget of the same tier and variant, on the same problems."""

    tier: str
    policy: str
    variant: str = DEFAULT_VARIANT
    baseline: str
    retention: float | None
    spend_unit: str  # "tokens" or "attempts" (tiers without tokens)
    spend_saved: float  # fraction of the fixed policy's spend
    attempts_saved: float
    efficiency_gain: float | None


def compare_to_fixed(policy: GroupMetrics, fixed: GroupMetrics, baseline: str = "eager_fp32") -> PolicyComparison:
    unit, spend_f = fixed.spend_unit, fixed.spend  # the policy is measured in the fixed budget's unit
    spend_p = policy.tokens if unit == "tokens" else policy.attempts
    g_p, g_f = policy.geomean_speedup[baseline], fixed.geomean_speedup[baseline]
    return PolicyComparison(
        tier=policy.tier,
        policy=policy.policy,
        variant=policy.variant,
        baseline=baseline,
        retention=retention(g_p, g_f),
        spend_unit=unit,
        spend_saved=1 - spend_p / spend_f if spend_f else 0.0,
        attempts_saved=1 - policy.attempts / fixed.attempts if fixed.attempts else 0.0,
        efficiency_gain=efficiency_gain(g_p, g_f, spend_p, spend_f),
    )


# ------------------------------------------------------------------------------------------------
# The agent variants compared (the paper's table: tiers x variants, at the same attempt budget)


def first_correct_attempt(summary: RunSummary) -> int | None:
    """The 1-based index of the run's first correct, unflagged attempt (timed or not); None if none."""
    return next((a.index for a in sorted(summary.attempts, key=lambda a: a.index) if a.correct and not a.flags), None)


class VariantCell(BaseModel):
    """One (tier, variant) of the comparison: speed, correctness and spend per problem."""

    tier: str
    variant: str
    problems: int
    correct: int  # runs with a correct, unflagged attempt (KernelBench's correctness, timed or not)
    timed: int  # of those, runs whose kept result has a measured or estimated time
    geomean_speedup: dict[str, float | None]  # over BASELINES, across correct kept results
    tokens_per_problem: float
    cost_usd_per_problem: float
    attempts_to_first_correct_mean: float | None
    attempts_to_first_correct_median: float | None


def variant_cells(summaries: Sequence[RunSummary], policy: str = "fixed") -> list[VariantCell]:
    """One cell per (tier, variant) among the runs of ``policy`` (the budget every variant ran under)."""
    groups: dict[tuple[str, str], list[RunSummary]] = {}
    for s in summaries:
        if s.policy == policy:
            groups.setdefault((s.tier, s.variant), []).append(s)
    cells = []
    for (tier, variant), runs in sorted(groups.items()):
        results = [result_from_summary(s) for s in runs]
        firsts = [f for f in (first_correct_attempt(s) for s in runs) if f is not None]
        cells.append(VariantCell(
            tier=tier, variant=variant, problems=len(runs), correct=len(firsts),
            timed=sum(r.counts for r in results),
            geomean_speedup={b: geomean_speedup(results, b) for b in BASELINES},
            tokens_per_problem=sum(r.tokens for r in results) / len(runs),
            cost_usd_per_problem=sum(r.cost_usd for r in results) / len(runs),
            attempts_to_first_correct_mean=statistics.fmean(firsts) if firsts else None,
            attempts_to_first_correct_median=statistics.median(firsts) if firsts else None,
        ))
    return cells


# ------------------------------------------------------------------------------------------------
# Spend (the hard budgets' units: tokens, dollars, minutes) and Attempt-Fast-p


class SpendRow(BaseModel):
    """Spend of the runs of one key (a tier, a variant, or a node of the graph: planner, writer)."""

    key: str
    runs: int
    tokens: int
    cost_usd: float
    minutes: float


def _node_spend(summary: RunSummary) -> dict[str, dict[str, float]]:
    """The run's spend by node; a record written before it was kept gives its totals to the writer."""
    if summary.spend_by_node:
        return summary.spend_by_node
    return {"writer": {"tokens_in": summary.tokens_in, "tokens_out": summary.tokens_out,
                       "cost_usd": summary.cost_usd, "seconds": summary.time_split_s.get("model", 0.0)}}


def spend_rows(summaries: Sequence[RunSummary], by: str) -> list[SpendRow]:
    """Spend summed by ``by``: "tier", "variant" (a run's tokens, dollars, minutes of work) or "node"."""
    rows: dict[str, SpendRow] = {}

    def add(key: str, tokens: float, cost: float, seconds: float) -> None:
        row = rows.setdefault(key, SpendRow(key=key, runs=0, tokens=0, cost_usd=0.0, minutes=0.0))
        row.runs += 1
        row.tokens += int(tokens)
        row.cost_usd += cost
        row.minutes += seconds / 60.0

    for s in summaries:
        if by == "node":
            for node, spend in _node_spend(s).items():
                add(node, spend.get("tokens_in", 0) + spend.get("tokens_out", 0), spend.get("cost_usd", 0.0),
                    spend.get("seconds", 0.0))
        else:
            add(getattr(s, by), s.tokens_in + s.tokens_out, s.cost_usd, s.work_s or s.wall_s)
    return [rows[k] for k in sorted(rows)]


def running_best_us(summary: RunSummary) -> list[float | None]:
    """After each attempt, in order: the fastest correct, unflagged time so far (None before the first)."""
    best, out = None, []
    for a in sorted(summary.attempts, key=lambda a: a.index):
        if a.correct and not a.flags and a.t_us and (best is None or a.t_us < best):
            best = a.t_us
        out.append(best)
    return out


def attempt_fast_p(summaries: Sequence[RunSummary], p: float = 0.95,
                   max_attempts: int | None = None) -> dict[tuple[str, str, str], list[float]]:
    """The paper's Attempt-Fast-p, per (tier, variant, policy): curve[n-1] is the fraction of the group's problems
    whose best within n attempts reaches ``p`` of their final speedup (t_final / t_n >= p). The final speedup of
    a problem is the best of every run of its tier and variant (under the fixed policy: its whole log), so a
    policy that stops early shows what it gave up; a run keeps its best past its last attempt. Times, not
    speedups, are compared: the curve needs no reference timing."""
    final: dict[tuple[str, str, str], float] = {}
    for s in summaries:
        t = best_time_of(s)
        key = (s.tier, s.variant, s.problem)
        if t is not None and (key not in final or t < final[key]):
            final[key] = t
    n_max = max_attempts or max((len(s.attempts) for s in summaries), default=0)
    curves = {}
    for group, runs in sorted(by_group(summaries).items()):
        reached = [0] * n_max
        for s in runs:
            t_final = final.get((s.tier, s.variant, s.problem))
            bests = running_best_us(s)
            for n in range(n_max):
                t_n = bests[min(n, len(bests) - 1)] if bests else None
                if t_final is not None and t_n is not None and t_final / t_n >= p:
                    reached[n] += 1
        curves[group] = [r / len(runs) for r in reached]
    return curves


def best_time_of(summary: RunSummary) -> float | None:
    times = [t for t in running_best_us(summary) if t is not None]
    return min(times) if times else None
