"""Replay: re-judge finished logs under other stop rules, with no GPU and no model.

A log run under the most generous policy (``fixed``) holds every attempt the other policies would
have made, in the same order; since stop rules are pure functions of the history
(``run_vocabulary.policies``), cutting each log where a rule would have fired gives exactly that policy's run.
This is how the budgeting study compares policies: attempts and tokens saved against the geomean
speedup retained.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import BaseModel, field_serializer

from evals import metrics
from run_vocabulary.policies import PARAMETERS_OF, PolicyChoice, PolicyError, PolicySettings, parse_policy, stop_index
from run_vocabulary.records import RunSummary
from run_vocabulary.variants import DEFAULT_VARIANT, stop_policy


class ReplayError(ValueError):
    """A replay request that cannot be met (unknown policy, empty log); one-line message."""


def truncate(summary: RunSummary, n: int, policy: str, stop_reason: str) -> RunSummary:
    """The run as it would have been had it stopped after ``n`` attempts."""
    kept = sorted(summary.attempts, key=lambda a: a.index)[:n]
    kept_idx = {a.index for a in kept}
    best_index = summary.best_index if summary.best_index in kept_idx else None
    if best_index is None:
        clean = [a for a in kept if a.correct and a.t_us is not None and not a.flags]
        best_index = min(clean, key=lambda a: a.t_us).index if clean else None
    best = next((a for a in kept if a.index == best_index), None)
    return summary.model_copy(
        update={
            "policy": policy,
            "attempts": kept,
            "best_index": best_index,
            "best_t_us": best.t_us if best else None,
            "stop_reason": stop_reason or summary.stop_reason,
            "tokens_in": sum(a.tokens_in for a in kept),
            "tokens_out": sum(a.tokens_out for a in kept),
            "cost_usd": sum(a.cost_usd for a in kept),
            "wall_s": sum(a.wall_s for a in kept),
        },
        deep=True,
    )


def replay_run(summary: RunSummary, policy: str, settings: PolicySettings) -> RunSummary:
    """One finished run re-judged under ``policy``."""
    history = sorted(summary.attempts, key=lambda a: a.index)
    n, reason = stop_index(policy, history, summary.t_sol_us, summary.baselines_us, settings)
    return truncate(summary, n, policy, reason or f"{policy}: the log ended after {n} attempts without a stop")


def policy_grid(policies: Iterable[str], eps: Sequence[float], windows: Sequence[int],
                token_budgets: Sequence[int] = ()) -> list[PolicyChoice]:
    """The points to replay, each a ``PolicyChoice`` as live evaluations name them: a policy written with its
    parameters (``sol:eps=1``) is one point; a bare name is crossed with the knobs it reads (sol x eps, plateau x w,
    sol+plateau x eps x w, tokens x budgets)."""
    grid: list[PolicyChoice] = []
    for text in policies:
        choice = _parse(text)
        if choice.parameters:
            grid.append(choice)
            continue
        p = choice.name
        if p == "tokens" and not token_budgets:
            raise ReplayError("policy 'tokens' needs --token-budget (a comma-separated list of token counts)")
        values = {"eps": [f"eps={e:g}" for e in eps], "w": [f"w={w}" for w in windows],
                  "tokens": [f"tokens={t}" for t in token_budgets]}
        points = [[]]
        for key in PARAMETERS_OF[p]:
            points = [[*point, item] for point in points for item in values[key]] if values[key] else points
        grid += [_parse(":".join([p, *point])) for point in points]
    return grid


def _parse(text: str) -> PolicyChoice:
    try:
        return parse_policy(text)
    except PolicyError as exc:
        raise ReplayError(str(exc)) from None


class ReplayRow(BaseModel):
    """One policy setting on one tier: what it would have saved and kept."""

    tier: str
    setting: PolicyChoice  # the policy with the parameters replayed (its label: sol:eps=1)
    runs: int
    variant: str = DEFAULT_VARIANT
    stopped_early: int  # runs cut before the end of their log
    attempts_fixed: int
    attempts_policy: int
    tokens_fixed: int
    tokens_policy: int
    attempts_saved: float  # fraction
    tokens_saved: float | None  # None when the tier used no tokens
    geomean_fixed: float | None
    geomean_policy: float | None
    retention: float | None
    efficiency_gain: float | None  # by tokens, or by attempts for tiers without tokens
    efficiency_unit: str
    stops: dict[str, int]  # problem -> attempts the policy would have used

    @field_serializer("setting")
    def _setting_as_written(self, setting: PolicyChoice) -> dict:
        return {"label": setting.label, "policy": setting.name, "parameters": dict(setting.parameters)}


class ReplayResult(BaseModel):
    baseline: str
    rows: list[ReplayRow]
    notes: list[str] = []  # why a column shows "-", one line each


def _dash_notes(rows: Sequence[ReplayRow], logs: Sequence[RunSummary], baseline: str) -> list[str]:
    notes = []
    if any(r.geomean_fixed is None for r in rows):
        if not any(baseline in metrics.result_from_summary(s).speedups for s in logs):
            notes.append(f"geomean, retained and efficiency gain are '-': no run has a time for {baseline} to compare with "
                         "(reference timings need a GPU; the interpreter backend only estimates kernel times)")
        else:
            notes.append("geomean, retained and efficiency gain are '-' for a tier with no correct result")
    if any(r.tokens_saved is None for r in rows):
        notes.append("tokens saved is '-' for a tier that used no tokens (its efficiency gain counts attempts)")
    return notes


def replay(logs: Sequence[RunSummary], grid: Sequence[PolicySetting], *, baseline: str = "eager_fp32",
           base_settings: PolicySettings | None = None) -> ReplayResult:
    """Re-judge every log under every setting; logs are the ``fixed`` runs of an evaluation."""
    if not logs:
        raise ReplayError("no finished runs to replay")
    base = base_settings or PolicySettings(max_attempts=max(len(s.attempts) for s in logs))
    by_tier: dict[tuple[str, str], list[RunSummary]] = {}
    for s in logs:
        by_tier.setdefault((s.tier, s.variant), []).append(s)
    rows = []
    for (tier, variant), runs in sorted(by_tier.items()):
        fixed_results = [metrics.result_from_summary(s) for s in runs]
        g_fixed = metrics.geomean_speedup(fixed_results, baseline)
        attempts_fixed = sum(len(s.attempts) for s in runs)
        tokens_fixed = sum(s.tokens_in + s.tokens_out for s in runs)
        for setting in grid:
            # a variant without SOL guidance has no SOL stop rule to replay (run_vocabulary.variants)
            cut = [replay_run(s, stop_policy(setting.name, variant), setting.settings(base)) for s in runs]
            results = [metrics.result_from_summary(s) for s in cut]
            g_policy = metrics.geomean_speedup(results, baseline)
            attempts_policy = sum(len(s.attempts) for s in cut)
            tokens_policy = sum(s.tokens_in + s.tokens_out for s in cut)
            by_tokens = tokens_fixed > 0
            rows.append(ReplayRow(
                tier=tier,
                variant=variant,
                setting=setting,
                runs=len(runs),
                stopped_early=sum(len(c.attempts) < len(s.attempts) for c, s in zip(cut, runs)),
                attempts_fixed=attempts_fixed,
                attempts_policy=attempts_policy,
                tokens_fixed=tokens_fixed,
                tokens_policy=tokens_policy,
                attempts_saved=1 - attempts_policy / attempts_fixed if attempts_fixed else 0.0,
                tokens_saved=(1 - tokens_policy / tokens_fixed) if by_tokens else None,
                geomean_fixed=g_fixed,
                geomean_policy=g_policy,
                retention=metrics.retention(g_policy, g_fixed),
                efficiency_gain=metrics.efficiency_gain(
                    g_policy, g_fixed,
                    tokens_policy if by_tokens else attempts_policy,
                    tokens_fixed if by_tokens else attempts_fixed,
                ),
                efficiency_unit="tokens" if by_tokens else "attempts",
                stops={c.problem: len(c.attempts) for c in cut},
            ))
    return ReplayResult(baseline=baseline, rows=rows, notes=_dash_notes(rows, logs, baseline))


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def fmt_num(x: float | None, fmt: str = ".3f", suffix: str = "") -> str:
    return "-" if x is None else f"{format(x, fmt)}{suffix}"


def replay_table_markdown(result: ReplayResult) -> str:
    """The budgeting-study table: one line per tier and policy setting."""
    lines = [
        f"| tier | variant | policy | runs cut early | attempts | attempts saved | tokens saved | "
        f"geomean vs {result.baseline} (fixed -> policy) | retained | efficiency gain |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in result.rows:
        gain = fmt_num(r.efficiency_gain, ".2f") + ("x" if r.efficiency_gain else "")
        if r.efficiency_gain is not None and r.efficiency_unit == "attempts":
            gain += " (by attempts)"
        lines.append(
            f"| {r.tier} | {r.variant} | {r.setting.label} | {r.stopped_early}/{r.runs} | {r.attempts_policy}/{r.attempts_fixed} | "
            f"{fmt_pct(r.attempts_saved)} | {fmt_pct(r.tokens_saved)} | {fmt_num(r.geomean_fixed)} -> {fmt_num(r.geomean_policy)} | "
            f"{fmt_pct(r.retention)} | {gain} |"
        )
    if result.notes:
        lines += [""] + [f"- {note}" for note in result.notes]
    return "\n".join(lines)
