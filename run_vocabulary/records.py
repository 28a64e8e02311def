"""Flat result records of an optimization run: what the graph writes, what evaluations store,
what replay re-judges. Plain pydantic, JSON-serialisable, independent of LangGraph."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from dsl_compiler.diagnostics import Diagnostic, as_diagnostic

from run_vocabulary.floor import eligible_us
from run_vocabulary.variants import DEFAULT_VARIANT

Stage = Literal["write", "compile", "validate", "profile", "done"]


class Hypothesis(BaseModel):
    """A planned change: what to change, why, and what it is expected to buy."""

    title: str
    rationale: str = ""
    expected_gain: float = 1.0  # expected speedup factor of this change over the current best
    risk: float = 1.0  # >= 1; implementation risk x performance risk
    roi: float = 0.0


class AttemptRecord(BaseModel):
    """One attempt: one program written, compiled, validated and profiled (as far as it got)."""

    index: int  # 1-based within the run
    hypothesis: str = ""
    # the text the writer answered with, as written: an answer that does not parse (or a ModelNew module of the
    # cuda variants) is still the attempt's program, and replay re-judges exactly this text
    program_text: str = ""
    program_hash: str = ""
    reached: Stage = "write"  # the last stage this attempt got through
    compile_ok: bool = False
    diagnostics: list[Diagnostic] = Field(default_factory=list)  # why it failed; rendered only into prompts
    correct: bool = False
    max_abs_error: float | None = None
    failure_reason: str | None = None
    failure_rule: str | None = None  # the judge's verdict rule (evals.judge.verdicts) of a rejected candidate
    judge_failed: bool = False  # the judge itself failed on this attempt: no verdict on the program
    t_us: float | None = None  # candidate time (median)
    t_spread_pct: float | None = None
    timing_source: Literal["gpu", "estimate"] | None = None
    t_sol_us: float | None = None
    sol_fraction: float | None = None  # t_sol_us / t_us
    speedup_vs_eager_fp32: float | None = None
    speedup_vs_eager_tf32: float | None = None
    speedup_vs_compile: float | None = None
    precision: str | None = None  # math precision the program used (tf32, bf16, ...)
    flags: list[str] = Field(default_factory=list)  # integrity findings ("sol_ceiling: ...")
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    build_s: float = 0.0
    wall_s: float = 0.0
    improved: bool = False  # a new best when it finished

    @field_validator("diagnostics", mode="before")
    @classmethod
    def _diagnostic_values(cls, value):
        # records stored before diagnostics travelled as values hold them rendered
        return [as_diagnostic(d) for d in value] if isinstance(value, list) else value


class RunSummary(BaseModel):
    """The outcome of one run of the graph on one problem."""

    problem: str
    tier: str
    policy: str
    variant: str = DEFAULT_VARIANT  # run_vocabulary.variants: what the writer answered with, and whether SOL guided it
    backend: str
    gpu: str
    attempts: list[AttemptRecord] = Field(default_factory=list)
    best_index: int | None = None
    best_t_us: float | None = None
    t_sol_us: float | None = None
    reference_us: dict[str, float] = Field(default_factory=dict)  # eager_fp32, eager_tf32, compile
    # beside each timed variant: its outputs checked at the problem's tolerance (passed, errors), whether it counts
    # (eligible) and its word for a table (label: "fails 0.0001"); run_vocabulary.floor.reference_record. Empty in
    # records written before checks were kept (every timed variant counted then)
    reference_checks: dict[str, dict] = Field(default_factory=dict)
    # the floor (run_vocabulary.floor): when PyTorch's fastest eligible variant beats every correct program (or none is
    # correct), the run keeps it: ``fallback`` names it and ``kept_t_us`` is its time, never a speedup of ours
    fallback: str = ""
    kept_t_us: float | None = None
    stop_reason: str = ""
    # the stop rule's parameters the run applied (run_vocabulary.policies.PolicySettings: max_attempts, eps, plateau_window,
    # min_gain, token_budget, baseline); empty in records written before they were kept
    policy_settings: dict[str, float | int | str] = Field(default_factory=dict)
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    # per model: {tokens_in, tokens_out, cost_usd, calls}
    tokens_by_model: dict[str, dict[str, float]] = Field(default_factory=dict)
    # per node of the graph (planner, writer): {tokens_in, tokens_out, cost_usd, seconds, calls}; empty in
    # records written before it was kept
    spend_by_node: dict[str, dict[str, float]] = Field(default_factory=dict)
    # the hard budgets the run applied (run_vocabulary.budgets: budget_usd, budget_tokens, budget_minutes), those set
    budgets: dict[str, float] = Field(default_factory=dict)
    work_s: float = 0.0  # seconds of work over all the run's resumes (model, builds, judge, set-up): its minutes spent
    graph_overhead_s: float = 0.0  # wall time not spent in model calls, builds, validation or profiling
    # wall time of the loop by where it went: build, validate, profile, model (the writer: a model call or
    # the offline tier's search), graph (the overhead above), check, setup (problem, SOL, reference timings);
    # a resumed run's covers the part after the resume
    time_split_s: dict[str, float] = Field(default_factory=dict)
    # the kernel cache over the run's builds: kernels asked, found built (hits), hit_rate, ahead_kernels
    kernel_cache: dict[str, float | None] = Field(default_factory=dict)
    backend_reason: str = ""  # why this backend (``--backend auto`` explains its choice)
    run_id: str = ""

    @property
    def baselines_us(self) -> dict[str, float]:
        """The reference times that count: those of variants that pass the tolerance (``floor.eligible_us``)."""
        return eligible_us(self.reference_us, self.reference_checks)

    @property
    def best(self) -> AttemptRecord | None:
        if self.best_index is None:
            return None
        return next((a for a in self.attempts if a.index == self.best_index), None)
