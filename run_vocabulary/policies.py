"""Budgeting policies: when to stop optimizing one problem, and where a suite's attempts go next.

Pure functions over the attempt history; no LangGraph, no torch, no I/O, so finished logs can be
re-judged offline (``evals.replay``) with exactly the rules the live graph applied.

Policies, by their CLI names:
- ``fixed``: stop after ``max_attempts``.
- ``sol``: stop once t_best <= (1 + eps) * t_SOL and the reference is beaten.
- ``plateau``: once the reference is beaten, stop after ``plateau_window`` attempts in a row without gain.
- ``sol+plateau``: whichever of the two fires first.
- ``tokens``: stop once the run has spent ``token_budget`` tokens (input + output).
Every policy also stops at ``max_attempts``: no run is unbounded. An evaluation names a policy with its
parameters (``PolicyChoice``): ``sol:eps=1``, ``plateau:w=8``, ``sol+plateau:eps=1:w=8``, ``tokens:tokens=200000``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from run_vocabulary.budgets import out_of_ideas
from run_vocabulary.records import AttemptRecord
from run_vocabulary.defaults import MAX_ATTEMPTS, PLATEAU_WINDOW, SOL_EPS, TOKEN_BUDGET

POLICY_NAMES = ("fixed", "sol", "plateau", "sol+plateau", "tokens")


class PolicySettings(BaseModel):
    """Knobs of the stop rules: the stop part of a run's settings (``run_vocabulary.settings.RunSettings``
    is one of these). Defaults are the paper's best replayed setting (eps 250%, w 12) within its 40-attempt
    budget."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_attempts: int = Field(MAX_ATTEMPTS, ge=1, description="attempt cap of the run, whatever its policy")
    eps: float = Field(SOL_EPS, ge=0, description="sol policy: stop once t_best <= (1 + eps) * t_SOL")
    plateau_window: int = Field(PLATEAU_WINDOW, ge=1, description="plateau policy (w): attempts in a row without gain")
    min_gain: float = Field(0.0, ge=0, description="an attempt is a gain when it beats the best by more than this fraction")
    token_budget: int = Field(TOKEN_BUDGET, ge=1, description="tokens policy: input + output tokens of the run")
    baseline: str = Field("best", description="the reference time to beat: a key of reference_us (eager_fp32, "
                          "eager_tf32, compile) or best, the fastest of those measured")

    def stop_settings(self) -> "PolicySettings":
        """Only the stop rules' knobs (what a run records it applied), also of a model extending these."""
        return PolicySettings(**{name: getattr(self, name) for name in PolicySettings.model_fields})


class PolicyError(ValueError):
    """A policy written wrong (an unknown name, a parameter it does not take, a bad value); one-line message."""


# a policy's parameters as written on the command line -> (PolicySettings field, type, smallest value)
POLICY_PARAMETERS: dict[str, tuple[str, type, float]] = {
    "eps": ("eps", float, 0.0),
    "w": ("plateau_window", int, 1),
    "tokens": ("token_budget", int, 1),
}
# which parameters each rule reads: a parameter the rule never reads is an error, not silently ignored
PARAMETERS_OF: dict[str, tuple[str, ...]] = {
    "fixed": (), "sol": ("eps",), "plateau": ("w",), "sol+plateau": ("eps", "w"), "tokens": ("tokens",),
}


@dataclass(frozen=True)
class PolicyChoice:
    """A stop rule with the parameters given for it (the rest are the run's defaults), as written
    ``NAME[:KEY=VALUE]...``: ``sol:eps=2.5``, ``plateau:w=12``, ``sol+plateau:eps=1:w=8``, ``tokens:tokens=200000``."""

    name: str
    parameters: tuple[tuple[str, float | int], ...] = ()  # (key, value), in POLICY_PARAMETERS' order

    @property
    def label(self) -> str:
        """The canonical text: how an evaluation names the runs of this choice (its store key)."""
        # a whole number as written (1000000, not 1e+06, which would not parse back)
        return ":".join([self.name, *(f"{k}={v}" if isinstance(v, int) else f"{k}={v:g}" for k, v in self.parameters)])

    def settings(self, base: PolicySettings) -> PolicySettings:
        """``base`` with this choice's parameters in place of its values."""
        return base.model_copy(update=self.fields())

    def fields(self) -> dict[str, float | int]:
        """This choice's parameters by the settings field each one sets (``w`` -> ``plateau_window``)."""
        return {POLICY_PARAMETERS[k][0]: v for k, v in self.parameters}


def parse_policy(text: str) -> PolicyChoice:
    """``NAME[:KEY=VALUE]...`` -> the choice; raises PolicyError with a one-line message."""
    name, *items = [part.strip() for part in text.strip().split(":")]
    if name not in POLICY_NAMES:
        raise PolicyError(f"unknown policy {name!r} in {text!r}; expected one of {', '.join(POLICY_NAMES)}")
    given: dict[str, float | int] = {}
    for item in items:
        key, eq, value = (x.strip() for x in item.partition("="))
        if not eq or not key or not value:
            raise PolicyError(f"{text!r}: write a parameter as KEY=VALUE, like {name}:{_example(name)}")
        if key not in PARAMETERS_OF[name]:
            takes = ", ".join(PARAMETERS_OF[name]) or "no parameters"
            raise PolicyError(f"{text!r}: the {name} policy takes {takes}, not {key!r}")
        if key in given:
            raise PolicyError(f"{text!r}: {key} is given twice")
        _field, kind, least = POLICY_PARAMETERS[key]
        try:
            number = kind(value)
        except ValueError:
            number = None
        if number is None or not math.isfinite(number) or number < least:
            what = "a whole number" if kind is int else "a number"
            raise PolicyError(f"{text!r}: {key} must be {what} of at least {least:g}, got {value!r}")
        given[key] = number
    return PolicyChoice(name, tuple((k, given[k]) for k in POLICY_PARAMETERS if k in given))


def _example(name: str) -> str:
    return ":".join(f"{k}={PolicySettings.model_fields[POLICY_PARAMETERS[k][0]].default:g}" for k in PARAMETERS_OF[name]) or "(none)"


def parse_policies(texts: Sequence[str]) -> list[PolicyChoice]:
    """Each text parsed, every label listed once; raises PolicyError."""
    if not texts:
        raise PolicyError("no policies given; write e.g. --policies fixed,sol+plateau")
    choices = [parse_policy(t) for t in texts]
    labels = [c.label for c in choices]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise PolicyError(f"policy {twice[0]} is listed twice")
    return choices


def best_time_us(history: Sequence[AttemptRecord]) -> float | None:
    """Fastest time of a correct, unflagged attempt."""
    times = [a.t_us for a in history if a.correct and a.t_us is not None and not a.flags]
    return min(times) if times else None


def baseline_us(reference_us: Mapping[str, float], baseline: str = "best") -> float | None:
    values = {k: v for k, v in reference_us.items() if v is not None and v > 0 and math.isfinite(v)}
    if not values:
        return None
    if baseline == "best":
        return min(values.values())
    return values.get(baseline)


def reference_beaten(t_best_us: float | None, reference_us: Mapping[str, float], baseline: str = "best") -> bool:
    """True when the best attempt is faster than the reference. With no reference time measured
    there is nothing to beat, so only a correct result is required."""
    if t_best_us is None:
        return False
    ref = baseline_us(reference_us, baseline)
    return ref is None or t_best_us < ref


def _reference_clause(reference_us: Mapping[str, float], baseline: str) -> str:
    # with no reference timed (no GPU) there is nothing beaten; say so rather than claim it
    return "the reference is beaten" if baseline_us(reference_us, baseline) is not None else "no reference was timed"


def tokens_used(history: Iterable[AttemptRecord]) -> int:
    return sum(a.tokens_in + a.tokens_out for a in history)


def mark_improvements(history: Sequence[AttemptRecord], min_gain: float = 0.0) -> list[bool]:
    """For each attempt, whether it set a new best (by more than ``min_gain``) when it finished."""
    flags, best = [], None
    for a in history:
        ok = a.correct and a.t_us is not None and not a.flags
        gain = ok and (best is None or a.t_us < best * (1.0 - min_gain))
        flags.append(bool(gain))
        if ok and (best is None or a.t_us < best):
            best = a.t_us
    return flags


# ---------------------------------------------------------------------------------------------
# The single rules. Each returns (stop, reason); reason is "" when it does not fire.


def fixed_stop(history: Sequence[AttemptRecord], settings: PolicySettings) -> tuple[bool, str]:
    if len(history) >= settings.max_attempts:
        return True, f"fixed: {len(history)} of {settings.max_attempts} attempts used"
    return False, ""


def sol_stop(
    history: Sequence[AttemptRecord], t_sol_us: float | None, reference_us: Mapping[str, float], settings: PolicySettings
) -> tuple[bool, str]:
    t_best = best_time_us(history)
    if t_best is None or not t_sol_us or t_sol_us <= 0:
        return False, ""
    if not reference_beaten(t_best, reference_us, settings.baseline):
        return False, ""
    if t_best <= (1.0 + settings.eps) * t_sol_us:
        return True, (
            f"sol: t_best {t_best:.3g} us <= (1 + {settings.eps:g}) x t_SOL {t_sol_us:.3g} us "
            f"(headroom {t_best / t_sol_us:.2f}x) and {_reference_clause(reference_us, settings.baseline)}"
        )
    return False, ""


def plateau_stop(
    history: Sequence[AttemptRecord], reference_us: Mapping[str, float], settings: PolicySettings
) -> tuple[bool, str]:
    """Counts attempts without gain since the later of: the reference first beaten, the last gain."""
    gains = mark_improvements(history, settings.min_gain)
    best, beaten_at = None, None
    for i, a in enumerate(history):
        if a.correct and a.t_us is not None and not a.flags and (best is None or a.t_us < best):
            best = a.t_us
        if beaten_at is None and reference_beaten(best, reference_us, settings.baseline):
            beaten_at = i
    if beaten_at is None:
        return False, ""
    last_gain = max([i for i, g in enumerate(gains) if g], default=beaten_at)
    since = len(history) - 1 - max(last_gain, beaten_at)
    if since >= settings.plateau_window:
        after = ("after beating the reference" if baseline_us(reference_us, settings.baseline) is not None
                 else "since the first correct result (no reference timed)")
        return True, f"plateau: {since} attempts in a row without gain {after}"
    return False, ""


def token_stop(history: Sequence[AttemptRecord], settings: PolicySettings) -> tuple[bool, str]:
    used = tokens_used(history)
    if used >= settings.token_budget:
        return True, f"tokens: {used} of {settings.token_budget} tokens used"
    return False, ""


def should_stop(
    policy: str,
    history: Sequence[AttemptRecord],
    t_sol_us: float | None,
    reference_us: Mapping[str, float],
    settings: PolicySettings = PolicySettings(),
) -> tuple[bool, str]:
    """Apply the named policy to the history. The attempt cap applies to every policy."""
    if policy not in POLICY_NAMES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {', '.join(POLICY_NAMES)}")
    rules = []
    if policy in ("sol", "sol+plateau"):
        rules.append(lambda: sol_stop(history, t_sol_us, reference_us, settings))
    if policy in ("plateau", "sol+plateau"):
        rules.append(lambda: plateau_stop(history, reference_us, settings))
    if policy == "tokens":
        rules.append(lambda: token_stop(history, settings))
    rules.append(lambda: fixed_stop(history, settings))
    for rule in rules:
        stop, reason = rule()
        if stop:
            return True, reason
    return False, ""


def stop_reason(
    policy: str,
    history: Sequence[AttemptRecord],
    t_sol_us: float | None,
    reference_us: Mapping[str, float],
    settings: PolicySettings = PolicySettings(),
    *,
    nothing_left: str | None = None,
) -> str:
    """The one stop decision of a run, after every finished attempt and before every plan: why it
    ends now, or "" to go on. ``nothing_left`` names a writer with no distinct program left to try, which
    ends the run under every policy (``out_of_ideas``) rather than repeat one."""
    if nothing_left:
        return out_of_ideas(nothing_left, len(history), settings.max_attempts)
    stop, reason = should_stop(policy, history, t_sol_us, reference_us, settings)
    return reason if stop else ""


def stop_index(
    policy: str,
    history: Sequence[AttemptRecord],
    t_sol_us: float | None,
    reference_us: Mapping[str, float],
    settings: PolicySettings = PolicySettings(),
) -> tuple[int, str]:
    """Replay: how many attempts of a finished log the policy would have used, and why it stopped
    ("" when the log ran out first)."""
    for n in range(1, len(history) + 1):
        stop, reason = should_stop(policy, history[:n], t_sol_us, reference_us, settings)
        if stop:
            return n, reason
    return len(history), ""


# ---------------------------------------------------------------------------------------------
# Suites: give the next attempt to the problem with the most headroom.


@dataclass(frozen=True)
class ProblemBudget:
    name: str
    t_sol_us: float | None
    t_best_us: float | None = None
    attempts_used: int = 0
    done: bool = False  # its stop policy fired

    @property
    def headroom(self) -> float:
        """t_best / t_SOL; a problem with no correct result yet has unbounded headroom."""
        if self.t_best_us is None or not self.t_sol_us:
            return math.inf
        return self.t_best_us / self.t_sol_us


def next_problem(problems: Sequence[ProblemBudget], max_attempts_each: int) -> str | None:
    """The open problem with the largest headroom (ties: fewer attempts used, then name), or None."""
    open_ = [p for p in problems if not p.done and p.attempts_used < max_attempts_each]
    if not open_:
        return None
    return min(open_, key=lambda p: (-p.headroom, p.attempts_used, p.name)).name


def schedule_attempts(problems: Sequence[ProblemBudget], total_attempts: int, max_attempts_each: int) -> dict[str, int]:
    """Split ``total_attempts`` across problems, headroom first: each problem gets one attempt
    (to have a time at all), then the rest go, one at a time, to the problem whose headroom is
    largest, assuming each attempt halves the remaining gap (a planning estimate, not a promise)."""
    state = {p.name: p for p in problems}
    grants: dict[str, int] = {p.name: 0 for p in problems}
    left = total_attempts
    for p in sorted(problems, key=lambda p: -p.headroom):
        if left == 0:
            break
        if not p.done and p.attempts_used < max_attempts_each and p.t_best_us is None:
            grants[p.name] += 1
            left -= 1
            state[p.name] = ProblemBudget(p.name, p.t_sol_us, None, p.attempts_used + 1, p.done)
    while left > 0:
        name = next_problem(
            [
                ProblemBudget(q.name, q.t_sol_us, q.t_best_us if q.t_best_us is not None else _assumed_first(q), q.attempts_used, q.done)
                for q in state.values()
            ],
            max_attempts_each,
        )
        if name is None:
            break
        q = state[name]
        t = q.t_best_us if q.t_best_us is not None else _assumed_first(q)
        t_next = q.t_sol_us + (t - q.t_sol_us) / 2 if (q.t_sol_us and t is not None) else t
        state[name] = ProblemBudget(name, q.t_sol_us, t_next, q.attempts_used + 1, q.done)
        grants[name] += 1
        left -= 1
    return grants


def _assumed_first(p: ProblemBudget) -> float | None:
    # Before any result: assume the first correct program runs at 1/8 of SOL, PyTorch fp32 eager's
    # typical fraction on the H200 (kernelbench-facts), so it competes with measured problems.
    return 8.0 * p.t_sol_us if p.t_sol_us else None
