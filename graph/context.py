"""The run context: the settings of one optimization run (``run_vocabulary.settings.RunSettings``) and the
services the nodes call. It is LangGraph's run-scoped ``context``: never checkpointed, rebuilt from
``run.json`` on resume.

``Services`` is the one place where the graph meets the libraries (dsl_compiler, sol_models,
evals). It loads the problem, counts SOL and starts the harness once per run and caches them, so
nodes never re-read the problem, re-count SOL or re-import torch. Tests pass a subclass with small
fakes of the libraries; the graph's own logic is always the real one.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from pydantic import ConfigDict, Field, PrivateAttr

from graph.state import program_of
from run_vocabulary.policies import PolicySettings
from run_vocabulary.settings import NAMED_BY_COMMAND, RunSettings


class Services:
    """Adapters over the libraries, with per-run caches. Every method may raise; nodes turn
    exceptions into failed attempts with their message."""

    def __init__(self, harness_settings: Any = None, gpu: str = "h200"):
        self.gpu = gpu
        self._problems: dict[str, Any] = {}
        self._sol: dict[tuple[str, str], dict] = {}
        self._references: dict[str, dict[str, float]] = {}
        self._reference_reasons: dict[str, str] = {}  # why a problem's references were not timed
        self._reference_checks: dict[str, dict[str, dict]] = {}  # per timed variant: its check at the tolerance
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

    def reference_checks(self, path: str) -> dict[str, dict]:
        """Each timed variant's outputs against the reference at the problem's tolerance
        (``evals.baseline_checks``: the judge's rule, on the GPU, in a child process), as ``VariantCheck`` dicts;
        {} where nothing was timed or no check is wanted (``baseline_checks.wanted``: by default below 1e-3,
        where TF32 is in doubt; ``MUCUTLASS_BASELINE_CHECKS=on`` everywhere, ``off`` never)."""
        if path not in self._reference_checks:
            refs = self.reference_timings(path)
            problem = self.problem(path)
            checks: dict[str, dict] = {}
            variants = [v for v in ("eager_fp32", "eager_tf32", "compile") if refs.get(v)]
            from evals.baseline_checks import checks_in_child, wanted

            if variants and wanted(getattr(problem, "tolerance", None)):
                found = self._timed(checks_in_child, problem.path, float(problem.tolerance), variants)
                checks = {v: c.to_dict() for v, c in found.items()}
            self._reference_checks[path] = checks
        return self._reference_checks[path]

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
        """-> {correct, max_abs_error, reason, rule, judge_failed, flags}"""
        v = self._timed_as("validate", self.harness().validate, self.problem(path), candidate)
        return {"correct": bool(v.correct), "max_abs_error": v.max_abs_error, "reason": v.reason or None,
                "rule": v.rule, "judge_failed": bool(v.judge_failed), "flags": list(v.flags)}

    def profile(self, path: str, candidate: Any) -> dict[str, Any]:
        """-> {t_us, t_spread_pct, timing_source, reason, rule, judge_failed, flags}; t_us None when the time cannot
        be trusted (a timing check failed) or was not taken."""
        t = self._timed_as("profile", self.harness().profile, self.problem(path), candidate)
        return {"t_us": t.median_us if t.valid else None, "t_spread_pct": t.spread_pct,
                "timing_source": t.timing_source, "reason": t.reason, "rule": t.rule,
                "judge_failed": bool(t.judge_failed), "flags": list(t.flags)}

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


class RunContext(RunSettings):
    """One run: its settings (``run_vocabulary.settings.RunSettings``, what ``run.json`` records and resume
    restores) and the live objects it calls, ``tier_impl`` and ``services`` (built from the settings when not
    given), which are never recorded."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    tier_impl: Any = Field(None, exclude=True, repr=False, description="the writer, made from ``tier`` when None")
    services: Any = Field(None, exclude=True, repr=False, description="the libraries' adapters (Services)")
    _owns_services: bool = PrivateAttr(False)

    def model_post_init(self, __context: Any) -> None:
        # A run closes only the services it made: a caller that passes its own (an evaluation reusing
        # one harness worker across problems) keeps them open.
        self._owns_services = self.services is None
        if self.services is None:
            self.services = Services(gpu=self.gpu)

    @property
    def policy_settings(self) -> PolicySettings:
        return self.stop_settings()

    def settings(self) -> dict[str, Any]:
        """What run.json records: the plain settings, without what only a command may name."""
        return self.recorded()

    @classmethod
    def from_settings(cls, data: dict[str, Any], **named: Any) -> "RunContext":
        """A context from recorded settings (also those an older run folder wrote); ``named`` holds the live
        objects and what the command names (``tiers_file``, ``memory_path``), which recorded settings never
        supply."""
        known = set(RunSettings.model_fields) - set(NAMED_BY_COMMAND)
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
