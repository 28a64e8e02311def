"""Planning: from the SOL report, the profile and what was tried, name the changes worth trying and
rank them (the paper's analyze, nominate and triage in one pass).

ROI(h) = gain^(1 + max(0, log10(g / 5))) / risk with g = t_best / t_SOL: a large gap to the speed
of light raises the weight of expected gain, favouring bold changes; near the bound, safe ones win.
Pure functions: no LangGraph, no model calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from dsl_compiler.diagnostics import model_text
from dsl_compiler.ops import fusable_torch_steps
from dsl_compiler.precision import kernel_maths
from run_vocabulary.policies import best_time_us
from run_vocabulary.records import AttemptRecord, Hypothesis


def roi(gain: float, risk: float, gap: float | None) -> float:
    """Return on investment of a hypothesis; ``gap`` = t_best / t_SOL (None: no time yet)."""
    g = gap if gap and gap > 0 else 1.0
    exponent = 1.0 + max(0.0, math.log10(g / 5.0))
    return max(gain, 1e-9) ** exponent / max(risk, 1e-9)


def rank(hypotheses: Sequence[Hypothesis], gap: float | None) -> list[Hypothesis]:
    """Hypotheses with ROI filled in, best first (ties keep their order)."""
    scored = [h.model_copy(update={"roi": roi(h.expected_gain, h.risk, gap)}) for h in hypotheses]
    return sorted(scored, key=lambda h: -h.roi)


@dataclass(frozen=True)
class ProgramFeatures:
    """What the planner needs to know about the current best program (read off the IR)."""

    n_kernels: int = 0
    n_torch_steps: int = 0
    torch_fns: tuple[str, ...] = ()
    maths: tuple[str, ...] = ()  # per kernel: the math it runs (dsl_compiler.precision)
    tiles: tuple[tuple[int, int, int] | None, ...] = ()
    clusters: tuple[tuple[int, int, int], ...] = ()
    schedules: tuple[str, ...] = ()
    decompositions: tuple[str, ...] = ()
    stages: tuple[Any, ...] = ()

    @classmethod
    def of(cls, program: Any) -> "ProgramFeatures":
        if program is None:
            return cls()
        kernels = program.kernels
        return cls(
            n_kernels=len(kernels),
            n_torch_steps=len(program.torch_steps),
            torch_fns=tuple(s.fn for s in program.torch_steps),
            maths=tuple(kernel_maths(program)),
            tiles=tuple(k.config.tile for k in kernels),
            clusters=tuple(k.config.cluster for k in kernels),
            schedules=tuple(k.config.schedule for k in kernels),
            decompositions=tuple(k.config.decomposition for k in kernels),
            stages=tuple(k.config.stages for k in kernels),
        )


# Element-wise PyTorch functions an epilogue can absorb (the op table's)
_FUSABLE = fusable_torch_steps()


def nominate(
    sol: dict[str, Any],
    history: Sequence[AttemptRecord],
    features: ProgramFeatures,
    allowed_precisions: Sequence[str],  # the problem's (run_vocabulary.problem: one default, where it is loaded)
) -> list[Hypothesis]:
    """Candidate changes to the best program, with expected gain (speedup factor) and risk (>= 1).

    Gains are planning estimates: capped by the gap to SOL, since nothing beats the bound.
    """
    t_best = best_time_us(history)
    t_sol = sol.get("t_sol_us") or 0.0
    if t_best is None:  # no correct, unflagged result yet
        last = history[-1] if history else None
        if last is not None and not last.correct:
            return [Hypothesis(title="repair the last program", rationale=_why(last), expected_gain=1.0, risk=1.0)]
        return [Hypothesis(
            title="a first correct program",
            rationale="translate the reference into kernels with default configurations; correctness first",
            expected_gain=1.0, risk=1.0,
        )]
    gap = t_best / t_sol if t_sol else None
    cap = max(gap or 4.0, 1.0)
    compute_bound = sol.get("bound", "compute") == "compute"
    out: list[Hypothesis] = []

    def add(title: str, rationale: str, gain: float, risk: float) -> None:
        out.append(Hypothesis(title=title, rationale=rationale, expected_gain=min(gain, cap), risk=risk))

    if "f32" in features.maths and "tf32" in allowed_precisions and compute_bound:
        add("tf32 math", "fp32 GEMMs on Hopper run 4-8x faster on TF32 tensor cores; the tolerance allows it", 4.0, 1.3)
    fusable = [f for f in features.torch_fns if f in _FUSABLE]
    if fusable:
        add(
            f"fuse {', '.join(sorted(set(fusable)))} into the epilogue",
            "each torch step re-reads and re-writes the full output through DRAM",
            1.0 + 0.5 * len(fusable),
            1.5,
        )
    if features.n_kernels > 1 and not compute_bound:
        add("merge kernels", "memory-bound: every intermediate tensor costs a DRAM round trip", 1.5, 2.0)
    low = {"bf16", "f16"} & set(allowed_precisions)
    if low and not (set(features.maths) & low):
        add(f"{sorted(low)[0]} operands", "half the bytes and twice the tensor-core rate; check the tolerance", 1.8, 3.0)
    if features.tiles and any(t is None or t[0] * t[1] < 128 * 256 for t in features.tiles) and compute_bound:
        add("tile 128x256x32 cooperative", "a larger CTA tile raises reuse for large GEMMs", 1.2, 1.2)
    if features.tiles and any(t is not None and t[0] * t[1] >= 128 * 128 for t in features.tiles):
        add("tile 128x128x64", "smaller tiles fill more SMs when the grid has few tiles", 1.1, 1.2)
    if features.clusters and all(c == (1, 1, 1) for c in features.clusters):
        add("cluster 2x1x1", "TMA multicast halves the loads of the shared operand", 1.1, 1.1)
    if features.schedules and any(s != "pingpong" for s in features.schedules):
        add("pingpong schedule", "overlaps one warp group's epilogue with the other's mainloop", 1.1, 1.2)
    if features.decompositions and all(d == "data_parallel" for d in features.decompositions):
        add("stream-K decomposition", "balances work when the tile count is not a multiple of the SM count", 1.15, 1.3)
    if features.stages and any(s == "auto" for s in features.stages):
        add("stages = 4", "a deeper pipeline hides more load latency", 1.05, 1.05)
    add("raster along_n with swizzle 4", "better L2 reuse of the operand tiles", 1.05, 1.05)
    tried = {a.hypothesis for a in history}
    return [h for h in out if h.title not in tried] or [
        Hypothesis(title="explore configurations", rationale="every listed change was tried; vary tile, cluster and stages",
                   expected_gain=1.05, risk=1.0)
    ]


def _why(attempt: AttemptRecord) -> str:
    if attempt.diagnostics:
        return "errors: " + " | ".join(model_text(d).splitlines()[0] for d in attempt.diagnostics[:3])
    return attempt.failure_reason or f"stopped at {attempt.reached}"


def plan(
    sol: dict[str, Any],
    history: Sequence[AttemptRecord],
    features: ProgramFeatures,
    allowed_precisions: Sequence[str],  # the problem's (run_vocabulary.problem: one default, where it is loaded)
    proposed: Sequence[Hypothesis] | None = None,
) -> list[Hypothesis]:
    """Nominate (or take a tier's own proposals) and rank by ROI."""
    t_best, t_sol = best_time_us(history), sol.get("t_sol_us")
    gap = (t_best / t_sol) if (t_best is not None and t_sol) else None
    hyps = list(proposed) if proposed else nominate(sol, history, features, allowed_precisions)
    return rank(hyps, gap)


def flat_plan(history: Sequence[AttemptRecord], proposed: Sequence[Hypothesis] | None = None) -> list[Hypothesis]:
    """The paper's baseline loop, with no SOL report and no ROI: repair what failed, else make it faster.
    A tier's own proposals are kept in the tier's order, unranked."""
    if proposed:
        return list(proposed)
    last = history[-1] if history else None
    if best_time_us(history) is None:
        if last is not None and not last.correct:
            return [Hypothesis(title="repair the last program", rationale=_why(last))]
        return [Hypothesis(title="a first correct program", rationale="correctness first")]
    return [Hypothesis(title="a faster program", rationale="change what you expect to make the best program faster")]


def nominate_source(sol: dict[str, Any], history: Sequence[AttemptRecord]) -> list[Hypothesis]:
    """Hypotheses for hand-written kernels (the cuda+sol variant), where no program features are known:
    a bold restructuring and an incremental tuning step, each bounded by the gap to SOL, for ROI to rank
    (a large gap favours the bold one)."""
    t_best, t_sol = best_time_us(history), sol.get("t_sol_us") or 0.0
    if t_best is None:
        return flat_plan(history)
    gap = t_best / t_sol if t_sol else 4.0
    bound = sol.get("bound", "compute")
    bold = ("tensor cores (TF32 or lower where the tolerance allows), larger tiles staged through shared memory"
            if bound == "compute" else "one fused kernel: every intermediate kept on chip, each input read once")
    return [
        Hypothesis(title="restructure the kernel", rationale=f"{gap:.1f}x from the speed of light ({bound}-bound): {bold}",
                   expected_gain=max(1.0, min(gap, 4.0)), risk=3.0),
        Hypothesis(title="tune the kernel", rationale="launch configuration, vector loads, unrolling, occupancy",
                   expected_gain=max(1.0, min(gap, 1.3)), risk=1.2),
    ]
