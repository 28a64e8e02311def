"""The graph's state: plain JSON-able values only, so every checkpoint is portable and a run
directory can be read without this package. Records (AttemptRecord, Hypothesis) are stored as
dicts and read back through the helpers below."""

from __future__ import annotations

from typing import Any, TypedDict

from dsl_compiler.diagnostics import Diagnostic, as_diagnostic
from dsl_compiler.ir import Program
from run_vocabulary.floor import eligible_us
from run_vocabulary.records import AttemptRecord, Hypothesis


class OptimizeState(TypedDict, total=False):
    # the problem and its bound (set once by the planner's first pass)
    problem_path: str
    problem_name: str
    sol: dict[str, Any]  # SolReport as a dict: t_sol_us, bound, ...
    reference_us: dict[str, float]  # eager_fp32, eager_tf32, compile
    reference_reason: str  # why nothing was timed there ("" when timed)
    # per timed variant: its check at the tolerance, eligible, label (run_vocabulary.floor.reference_record)
    reference_checks: dict[str, dict]
    backend: str
    # the plan
    plan: list[dict]  # ranked Hypothesis dicts
    hypothesis: dict | None  # the one being implemented
    # the attempt in flight
    current: dict | None  # AttemptRecord as it progresses
    program: Program | None  # the checked program of the attempt in flight
    candidate_source: str | None  # the built ModelNew module (cuda variants), as the harness judges it
    artifacts: dict[str, str]  # kernel name -> shared library (cutlass backend)
    sources: dict[str, str]  # kernel name -> generated CUTLASS .cu (cutlass backend)
    diagnostics: list[Diagnostic]  # errors of the last failed attempt, for the writer
    # history and the best so far
    attempts: list[dict]  # finished AttemptRecords
    best_index: int | None
    best_t_us: float | None
    best_program_text: str | None
    best_program: Program | None
    best_artifacts: dict[str, str]
    best_sources: dict[str, str]
    # budget counters
    tokens_in: int
    tokens_out: int
    cost_usd: float
    tokens_by_model: dict[str, dict[str, float]]  # model -> {tokens_in, tokens_out, cost_usd}
    work_s: float  # seconds spent in library calls (model, compile, validate, profile)
    spend_by_node: dict[str, dict[str, float]]  # planner, writer -> {tokens_in, tokens_out, cost_usd, seconds, calls}
    stop_reason: str
    memory_noted: int  # attempts whose notes are in the memory store (graph.memory)


def baselines_us(state: OptimizeState) -> dict[str, float]:
    """The reference times that count (``run_vocabulary.floor.eligible_us``): a variant that fails the problem's
    tolerance is no speedup's baseline and no time a stop rule must beat."""
    return eligible_us(state.get("reference_us", {}), state.get("reference_checks"))


def history(state: OptimizeState) -> list[AttemptRecord]:
    return [AttemptRecord.model_validate(a) for a in state.get("attempts", [])]


def current(state: OptimizeState) -> AttemptRecord | None:
    cur = state.get("current")
    return AttemptRecord.model_validate(cur) if cur else None


def program_of(state: OptimizeState, key: str = "program") -> Program | None:
    """The state's program (``program`` or ``best_program``) as IR; checkpoints written before
    programs travelled as values hold it as JSON under ``<key>_json``."""
    value = state.get(key)
    if value is None and state.get(f"{key}_json"):
        return Program.model_validate_json(state[f"{key}_json"])
    return value


def diagnostics_of(state: OptimizeState) -> list[Diagnostic]:
    """The last failed attempt's diagnostics (checkpoints written before they travelled as values hold text)."""
    return [as_diagnostic(d) for d in state.get("diagnostics") or []]


def hypothesis(state: OptimizeState) -> Hypothesis | None:
    h = state.get("hypothesis")
    return Hypothesis.model_validate(h) if h else None


def initial_state(problem_path: str, backend: str) -> OptimizeState:
    return OptimizeState(
        problem_path=problem_path, problem_name="", sol={}, reference_us={}, reference_checks={},
        backend=backend,
        plan=[], hypothesis=None, current=None, program=None, candidate_source=None, artifacts={}, sources={}, diagnostics=[],
        attempts=[], best_index=None, best_t_us=None, best_program_text=None, best_program=None,
        best_artifacts={}, best_sources={}, tokens_in=0, tokens_out=0, cost_usd=0.0, tokens_by_model={}, work_s=0.0,
        spend_by_node={}, stop_reason="", memory_noted=0,
    )
