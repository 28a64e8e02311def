"""The run context: settings of one optimization run (tier, policy, budgets, backend, GPU) and the
services the nodes call. It is LangGraph's run-scoped ``context``: never checkpointed, rebuilt from
``run.json`` on resume.

``Services`` is the one place where the graph meets the libraries (dsl_compiler, sol_models,
evals). It loads the problem, counts SOL and starts the harness once per run and caches them, so
nodes never re-read the problem, re-count SOL or re-import torch. Tests pass a subclass with small
fakes of the libraries; the graph's own logic is always the real one.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from dsl_compiler.backend import BACKENDS
from run_vocabulary.policies import POLICY_NAMES, PolicySettings
from run_vocabulary.defaults import MAX_ATTEMPTS, PLATEAU_WINDOW, SOL_EPS, TOKEN_BUDGET
from graph.state import program_of
from run_vocabulary.variants import DEFAULT_VARIANT, Variant, get_variant, stop_policy



class Services:
    """Adapters over the libraries, with per-run caches. Every method may raise; nodes turn
    exceptions into failed attempts with their message."""

    def __init__(self, harness_settings: Any = None, gpu: str = "h200"):
        self.gpu = gpu
        self._problems: dict[str, Any] = {}
        self._sol: dict[tuple[str, str], dict] = {}
        self._references: dict[str, dict[str, float]] = {}
        self._reference_reasons: dict[str, str] = {}  # why a problem's references were not timed
        self._harness = None
        self._harness_settings = harness_settings
        self.work_s = 0.0  # time spent inside library calls, to measure the graph's own overhead
        # the same time by kind (setup, check, build, validate, profile, export): summary.json's split
        self.work_by_kind_s: dict[str, float] = {}
        # kernels asked of the kernel cache, found there, and built ahead for expected programs
        self.kernel_cache = {"kernels": 0, "hits": 0, "ahead_kernels": 0}
        self._ahead: tuple = ()  # programs the tier expects to write next (a hint for building ahead)

    # -- time accounting ------------------------------------------------------------------
    def _timed(self, fn, *args, **kwargs):
        return self._timed_as("setup", fn, *args, **kwargs)

    def _timed_as(self, kind: str, fn, *args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent = time.perf_counter() - start
            self.work_s += spent
            self.work_by_kind_s[kind] = self.work_by_kind_s.get(kind, 0.0) + spent

    # -- problem and speed of light -------------------------------------------------------
    def problem(self, path: str) -> Any:
        if path not in self._problems:
            from evals.problems import load_problem

            self._problems[path] = self._timed(load_problem, path)
        return self._problems[path]

    def sol_report(self, path: str, gpu: str) -> dict[str, Any]:
        """The SOL report of the problem as a plain dict (``t_sol_us``, ``bound``, ``flops``, ...)."""
        key = (path, gpu)
        if key not in self._sol:
            self._sol[key] = self._timed(self._count_sol, self.problem(path), gpu)
        return self._sol[key]

    def _count_sol(self, problem: Any, gpu: str) -> dict[str, Any]:
        from sol_models.bounds import sol_report
        from sol_models.counting import count_problem
        from sol_models.hardware import get_gpu

        work = count_problem(problem)
        report = sol_report(work, get_gpu(gpu), precision="tf32")
        out = _as_dict(report)
        for name in ("flops", "bytes_fused", "bytes_unfused", "input_bytes", "param_bytes", "output_bytes"):
            if getattr(work, name, None) is not None:
                out.setdefault(name, getattr(work, name))
        return out

    def reference_timings(self, path: str) -> dict[str, float]:
        """{"eager_fp32", "eager_tf32", "compile"} in us; empty without a GPU (nothing measured)."""
        if path not in self._references:
            timings = self._timed(self.harness().reference_timings, self.problem(path))
            self._references[path] = dict(timings.as_reference_us())
            self._reference_reasons[path] = getattr(timings, "reason", "") or ""
        return self._references[path]

    def reference_reason(self, path: str) -> str:
        """Why ``reference_timings(path)`` timed nothing (no GPU, the reference failed), or ""."""
        return self._reference_reasons.get(path, "")

    # -- programs -------------------------------------------------------------------------
    def check_text(self, text: str, max_output_bytes: float | None = None) -> tuple[Any, list[Any]]:
        from dsl_compiler.checks import check_text

        return self._timed_as("check", check_text, text, max_output_bytes=max_output_bytes)

    def expect(self, programs) -> None:
        """The programs the tier expects to write next: their kernels are built with the next build
        (one translation unit) or in the background while the current attempt is validated."""
        self._ahead = tuple(programs or ())

    def build(self, program: Any) -> Any:
        from dsl_compiler.build import build_program

        ahead, self._ahead = self._ahead, ()
        built = self._timed_as("build", build_program, program, ahead=ahead)
        self.kernel_cache["kernels"] += int(getattr(built, "kernels", 0) or 0)
        self.kernel_cache["hits"] += int(getattr(built, "cache_hits", 0) or 0)
        self.kernel_cache["ahead_kernels"] += int(getattr(built, "ahead_kernels", 0) or 0)
        return built

    def export_model_new(self, program: Any, artifacts: dict[str, str] | None, path: str,
                         problem_source: str | None = None) -> None:
        from dsl_compiler.export import export_model_new
        from sol_models.estimate import runtime_options

        # the CUDA graph and fused casts as the settings say (off unless MUCUTLASS_CUDA_GRAPH / _FUSED_CASTS)
        self._timed_as("export", export_model_new, program, artifacts or {}, path, problem_source=problem_source,
                       options=runtime_options(program))

    def export_model_interpreted(self, program: Any, path: str, problem_source: str | None = None) -> None:
        from dsl_compiler.export import export_model_interpreted

        self._timed_as("export", export_model_interpreted, program, path, problem_source=problem_source)

    def build_model_new(self, text: str) -> tuple[str | None, Any]:
        """A ModelNew module of the cuda variants checked and built (evals.cuda_candidates):
        (the source the harness judges, or None; a BuildOutcome with the errors for the writer)."""
        from evals import cuda_candidates as cc

        errors = cc.check_source(text)
        if errors:
            return None, cc.BuildOutcome(ok=False, reason=errors[0].split(": ", 1)[-1], diagnostics=errors)
        prepared = cc.prepare(text)
        outcome = self._timed_as("build", cc.build, prepared)
        return (prepared.source if outcome.ok else None), outcome

    # -- harness --------------------------------------------------------------------------
    def harness(self) -> Any:
        if self._harness is None:
            from evals.judge import Harness, HarnessSettings

            self._harness = Harness(self._harness_settings or HarnessSettings(gpu=self.gpu))
        return self._harness

    def start_harness(self) -> None:
        """The judge starts now, in the background (``Harness.start``): a run's set-up hides its start-up."""
        self.harness().start()

    def candidate(self, program: Any, backend: str, artifacts: dict[str, str] | None) -> Any:
        from evals.judge import Candidate

        return Candidate.from_program(program, backend=backend, artifacts=artifacts or {})

    def candidate_of(self, state: dict) -> Any:
        """The candidate of the attempt in flight: its ModelNew source (cuda variants) or its program."""
        if state.get("candidate_source"):
            from evals.judge import Candidate

            return Candidate.from_source(state["candidate_source"])
        return self.candidate(program_of(state), state["backend"], state.get("artifacts"))

    def validate(self, path: str, candidate: Any) -> dict[str, Any]:
        """-> {correct, max_abs_error, reason, flags}"""
        v = self._timed_as("validate", self.harness().validate, self.problem(path), candidate)
        return {"correct": bool(v.correct), "max_abs_error": v.max_abs_error, "reason": v.reason or None,
                "flags": list(v.flags)}

    def profile(self, path: str, candidate: Any) -> dict[str, Any]:
        """-> {t_us, t_spread_pct, timing_source, reason, flags}; t_us None when the time cannot be
        trusted (a timing check failed) or was not taken."""
        t = self._timed_as("profile", self.harness().profile, self.problem(path), candidate)
        return {"t_us": t.median_us if t.valid else None, "t_spread_pct": t.spread_pct,
                "timing_source": t.timing_source, "reason": t.reason, "flags": list(t.flags)}

    def ceiling_check(self, t_us: float, t_sol_us: float) -> tuple[bool, str]:
        from evals.judge import sol_ceiling_check

        return sol_ceiling_check(t_us, t_sol_us)

    def close(self) -> None:
        h, self._harness = self._harness, None
        if h is not None and hasattr(h, "close"):
            h.close()


def _as_dict(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {}
    if isinstance(obj, dict):
        return dict(obj)
    if hasattr(obj, "model_dump"):
        return obj.model_dump()
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    return {k: v for k, v in vars(obj).items() if not k.startswith("_")}


@dataclass
class RunContext:
    """Settings of one run. Plain fields are saved to ``run.json`` and restored on resume;
    ``tier_impl`` and ``services`` are live objects (built from the settings when not given)."""

    tier: str = "offline"
    policy: str = "sol+plateau"
    variant: str = DEFAULT_VARIANT  # run_vocabulary.variants: what the writer answers with, and whether SOL guides it
    max_attempts: int = MAX_ATTEMPTS
    eps: float = SOL_EPS
    plateau_window: int = PLATEAU_WINDOW
    token_budget: int = TOKEN_BUDGET
    baseline: str = "best"
    backend: str = "interpreter"
    gpu: str = "h200"
    tiers_file: str | None = None
    memory: bool = False  # notes of attempts kept across problems (graph.memory); eval turns it on
    memory_path: str | None = None  # a SQLite store shared by an evaluation's runs; None: this process only
    run_id: str = ""
    tier_impl: Any = field(default=None, repr=False, compare=False)
    services: Any = field(default=None, repr=False, compare=False)

    _LIVE = ("tier_impl", "services")
    # never recorded in a run folder nor restored from one (graph.run_record): the tiers file names endpoints and
    # the variables holding keys, the memory store is a file the run writes into; the resuming command names them
    _NAMED_BY_COMMAND = ("tiers_file", "memory_path")

    def __post_init__(self) -> None:
        if self.policy not in POLICY_NAMES:
            raise ValueError(f"unknown policy {self.policy!r}; expected one of {', '.join(POLICY_NAMES)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; expected one of {', '.join(BACKENDS)}")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        get_variant(self.variant)  # VariantError (a ValueError) for an unknown name
        # A run closes only the services it made: a caller that passes its own (an evaluation reusing
        # one harness worker across problems) keeps them open.
        self._owns_services = self.services is None
        if self.services is None:
            self.services = Services(gpu=self.gpu)

    @property
    def policy_settings(self) -> PolicySettings:
        return PolicySettings(
            max_attempts=self.max_attempts, eps=self.eps, plateau_window=self.plateau_window,
            token_budget=self.token_budget, baseline=self.baseline,
        )

    @property
    def variant_spec(self) -> Variant:
        return get_variant(self.variant)

    @property
    def stop_policy(self) -> str:
        """The stop rule applied: ``policy`` without its SOL test in variants SOL does not guide."""
        return stop_policy(self.policy, self.variant)

    def settings(self) -> dict[str, Any]:
        """What run.json records: the plain settings, without what only a command may name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in self._LIVE + self._NAMED_BY_COMMAND}

    @classmethod
    def from_settings(cls, data: dict[str, Any], **named: Any) -> "RunContext":
        """A context from recorded settings; ``named`` holds the live objects and what the command names
        (``tiers_file``, ``memory_path``), which recorded settings never supply."""
        known = {f.name for f in fields(cls)} - set(cls._LIVE + cls._NAMED_BY_COMMAND)
        return cls(**{k: v for k, v in data.items() if k in known}, **named)

    def langsmith_config(self, problem: str) -> dict[str, Any]:
        """run_name, tags and metadata for tracing; LangChain sends them only when
        LANGSMITH_TRACING is set."""
        return {
            "run_name": f"optimize {problem}",
            "tags": [f"tier:{self.tier}", f"variant:{self.variant}", f"policy:{self.policy}", f"backend:{self.backend}"],
            "metadata": {"tier": self.tier, "variant": self.variant, "policy": self.policy, "problem": problem,
                         "backend": self.backend, "gpu": self.gpu, "run_id": self.run_id},
        }

