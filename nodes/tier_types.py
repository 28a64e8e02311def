"""What a tier is and what it sees: the contracts between the graph's writer node and the tiers
(``TierSpec`` from the tiers file, ``WriterRequest`` in, ``WriterReply`` out)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel

from dsl_compiler.diagnostics import Diagnostic
from dsl_compiler.ir import Program
from run_vocabulary.records import AttemptRecord, Hypothesis


class TierError(Exception):
    """A tier cannot be set up (unknown name, malformed file, missing key): one-line message."""


class TierSpec(BaseModel):
    name: str
    kind: Literal["openai", "offline", "playback"] = "openai"
    model: str = ""
    base_url: str | None = None
    api_key_env: str | None = None
    price_in_per_mtok: float = 0.0
    price_out_per_mtok: float = 0.0
    temperature: float | None = None
    max_tokens: int | None = None
    timeout_s: float = 600.0
    max_retries: int = 2

    def cost_usd(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.price_in_per_mtok + tokens_out * self.price_out_per_mtok) / 1e6


@dataclass
class WriterRequest:
    """What a tier sees when asked for a program."""

    problem_name: str
    problem_source: str
    sol: dict[str, Any]  # the SOL report (t_sol_us, bound, ...)
    plan: Hypothesis | None
    history: list[AttemptRecord]
    diagnostics: list[Diagnostic]  # of the previous attempt, when it failed
    attempt_index: int  # 1-based index of the attempt being written
    best_program: Program | None = None  # the best μCUTLASS program so far
    last_program: Program | None = None  # the last attempt's, when it parsed
    # answers that are no μCUTLASS program, as written: a ModelNew module (cuda variants), or a last answer that
    # did not parse (shown so that it can be repaired)
    best_source: str | None = None
    last_source: str | None = None
    allowed_precisions: list[str] = field(default_factory=list)
    tolerance: float | None = None
    problem: Any = None  # the loaded Problem (module, tolerance), for tiers that trace the reference
    gpu: str = "h200"
    variant: str = "dsl+sol"  # run_vocabulary.variants: the answer's language and whether the SOL report is shown
    memory: list[str] = field(default_factory=list)  # notes of attempts on earlier problems, most relevant first


@dataclass
class WriterReply:
    program_text: str
    tokens_in: int = 0
    tokens_out: int = 0
    model: str = ""
    cost_usd: float = 0.0
    error: str | None = None  # why no program came back
    hypothesis: Hypothesis | None = None  # what the tier actually did, when it chose itself
    # programs (dsl_compiler.ir.Program) the tier expects to write next: their kernels are built ahead
    ahead: tuple = ()
    # the tier has no distinct program left to try: the run stops (out_of_ideas) and no attempt is recorded
    out_of_ideas: bool = False


@runtime_checkable
class Tier(Protocol):
    name: str

    def write(self, request: WriterRequest) -> WriterReply: ...


@runtime_checkable
class ProposingTier(Tier, Protocol):
    """A tier that nominates its own hypotheses (the offline policy does); others get the planner's."""

    def propose(self, request: WriterRequest) -> list[Hypothesis]: ...
