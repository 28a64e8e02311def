"""The built-in ``offline`` tier: no model endpoint, no tokens, deterministic.

It traces the reference into a μCUTLASS program (``dsl_compiler.frontend``) and walks configurations in the
order of the config-aware estimate (``search``):

1. attempt 1 is the traced program with every kernel's best estimated configuration (or the best
   measured one from the per-shape record), in the math precision the estimate ranks fastest:
   where the problem allows 16-bit math at a tolerance of at least 1e-3, programs computing in
   f16 (TF32's 10-bit mantissa, twice its tensor-core rate; bf16 when f16 is not allowed) are
   ranked beside the TF32 ones, if the error model (``dsl_compiler.frontend.error_model``: the
   reference run on its own inputs with GEMM / conv operands rounded) predicts the precision within
   the tolerance (f16 overflows past 65504; bf16's 8-bit mantissa misses 1e-2 after a norm), and TF32 operands that are not K-major both as stored and after a
   transposing copy;
2. later attempts vary one kernel's configuration at a time, in estimated order; once measured
   times exist, the untried candidates are re-ranked by the ratio measured / estimated of the
   most similar measured candidate (same tile and schedule first), so a systematic miss of the
   estimate moves the search toward what the GPU actually rewards;
3. when a program fails to check or build, the kernel named in the diagnostic first loses its
   epilogue to PyTorch steps, then runs as a PyTorch step; when a program gives wrong results,
   every epilogue goes to PyTorch, then every kernel. Each precision earns its own fallbacks,
   and one wrong result of a 16-bit program drops that precision: the TF32 programs remain;
   below 1e-3 (KernelBench's fp32 rule is 1e-4) one wrong result of a TF32 program moves the
   fp32 plan to tf32x3 with the same fusion (``failed_maths``: a precision that failed a problem
   is not retried for it). There the first attempt is the fastest admitted math the error model
   predicts to pass (TF32, else tf32x3; a 16-bit one only where allowed and predicted).

Everything is a pure function of the problem, the history and the record, so a run replays the
same way. Its hypotheses and programs flow through the same planner, compiler, validator,
profiler and judge as a model's.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import Any

from dsl_compiler import shapes
from dsl_compiler.diagnostics import kernels_named
from dsl_compiler.frontend import TraceOptions, TraceResult, trace_problem
from dsl_compiler.ir import Program
from dsl_compiler.parser import parse
from dsl_compiler.precision import admitted
from dsl_compiler.printer import program_key
from run_vocabulary.records import AttemptRecord, Hypothesis
from nodes.tier_types import WriterReply, WriterRequest
from sol_models import search

MODEL_NAME = "offline"
CONFIGS_PER_KERNEL = 8
MEASURED_MISS = 1.25  # re-rank when a measurement is this far (either way) from its estimate
# 16-bit math over fp32 data: f16 first (10 mantissa bits, as TF32; bf16 has 7), at tolerances it meets
HALF_MATHS = ("f16", "bf16")
HALF_MIN_TOLERANCE = 1e-3
# candidates after the chosen one whose kernels are built with it, in one translation unit (a unit's
# front-end time is most of its cost: dsl_compiler.build.KERNELS_PER_UNIT = 8 kernels a unit)
BUILD_AHEAD = 7


@dataclass(frozen=True)
class Candidate:
    title: str
    program: Program
    t_est_us: float
    configs: tuple[tuple[str, Any], ...]  # (kernel name, KernelConfig) of every kernel
    varied: str | None = None  # the kernel whose configuration differs from the base
    math: str | None = None  # the 16-bit math of the program (None: each storage type's own, tf32 over f32)

    @functools.cached_property
    def key(self) -> str:
        """The program's key (``dsl_compiler.printer.program_key``): candidates and attempts are matched by it."""
        return program_key(self.program)

    @property
    def program_text(self) -> str:
        """The canonical text of the program, as the tier answers with it."""
        return self.key


@dataclass
class _Plan:
    trace: TraceResult
    options: TraceOptions
    candidates: list[Candidate] = field(default_factory=list)


def _problem_key(problem: Any) -> str:
    source = getattr(problem, "source", None)
    if source:
        return hashlib.sha256(source.encode()).hexdigest()[:16] + ":" + str(getattr(problem, "tolerance", ""))
    return str(getattr(problem, "path", problem))


def half_math(allowed_precisions, tolerance) -> str | None:
    """The 16-bit math a problem allows over fp32 data without a prediction: f16 before bf16, and only at a
    tolerance of at least HALF_MIN_TOLERANCE (half-precision operands fail tighter ones)."""
    if tolerance is None or float(tolerance) < HALF_MIN_TOLERANCE:
        return None
    return next((m for m in HALF_MATHS if m in tuple(allowed_precisions or ())), None)


def choose_half_math(problem: Any, allowed_precisions, tolerance, failed: tuple[str, ...] = ()) -> tuple[str | None, dict]:
    """The 16-bit math the tier tries beside TF32, and the predicted errors behind the choice: the first of the
    problem's 16-bit maths (f16, then bf16), less those that gave it a wrong result (``failed``), that the error
    model (``dsl_compiler.frontend.error_model``, the reference run with its GEMM / conv operands rounded)
    predicts within the tolerance; None when none is. Below HALF_MIN_TOLERANCE only a prediction proposes one
    (at KernelBench's 1e-4 that takes data a 16-bit operand holds exactly); without a prediction (a reference
    that does not run on the CPU) the rule of ``half_math`` stands."""
    from dsl_compiler.frontend.error_model import predict_errors

    if tolerance is None:
        return None, {}
    candidates = tuple(m for m in HALF_MATHS if m in tuple(allowed_precisions or ()) and m not in failed)
    if not candidates:
        return None, {}
    errors = predict_errors(problem, candidates, float(tolerance), until_pass=True)
    if not errors:
        first = half_math(allowed_precisions, tolerance)
        return (first if first in candidates else None), {}
    return next((m for m in candidates if m in errors and errors[m].passes), None), errors


# fp32 data below HALF_MIN_TOLERANCE: TF32 (one MMA a product) where the error model predicts it passes, else the
# split-precision product (three TF32 MMAs, fp32-accurate); exact fp32 has no tensor-core kernel
FP32_MATHS = ("tf32", "tf32x3")


def choose_fp32_math(problem: Any, allowed_precisions, tolerance, failed: tuple[str, ...] = ()) -> tuple[str | None, dict]:
    """The math of the tier's fp32 kernels below HALF_MIN_TOLERANCE, and the predicted errors behind it: the
    fastest of FP32_MATHS the problem admits, less those that gave it a wrong result (``failed``), that the
    error model predicts within the tolerance, else the most precise of them. None (the storage types' own rule:
    TF32 where allowed) at looser tolerances or without a prediction, unless TF32 failed: then tf32x3."""
    from dsl_compiler.frontend.error_model import predict_errors
    from dsl_compiler.precision import admitted

    if tolerance is None or float(tolerance) >= HALF_MIN_TOLERANCE:
        return None, {}
    candidates = tuple(m for m in FP32_MATHS if admitted(m, tuple(allowed_precisions or ())) and m not in failed)
    if not candidates:
        return None, {}
    errors = predict_errors(problem, candidates, float(tolerance), until_pass=True)
    if not errors:
        return ("tf32x3" if "tf32" in failed and "tf32x3" in candidates else None), {}
    return next((m for m in candidates if m in errors and errors[m].passes), candidates[-1]), errors


def failed_maths(history: list[AttemptRecord], tolerance) -> tuple[str, ...]:
    """The maths not retried for this problem: both 16-bit maths once one of their programs gave a wrong result
    (at any tolerance: the precision, not the program, is the first suspect, and the other 16-bit math lost to it
    in the prediction already), and TF32 after a wrong result below HALF_MIN_TOLERANCE (at KernelBench's 1e-4
    TF32's rounding is the first suspect; at looser tolerances the program is, and its epilogues and kernels
    fall back to PyTorch as before). tf32x3 is fp32-accurate: its wrong results are the program's."""
    strict = tolerance is not None and float(tolerance) < HALF_MIN_TOLERANCE
    out: list[str] = []
    for a in history:
        if a.correct or not (a.failure_reason or "").startswith("validate"):
            continue
        if attempt_math(a) in HALF_MATHS:
            out += [m for m in HALF_MATHS if m not in out]
        elif strict and attempt_fp32_math(a) == "tf32" and "tf32" not in out:
            out.append("tf32")
    return tuple(out)


def attempt_math(a: AttemptRecord) -> str | None:
    """The 16-bit math an attempt's program computed in (None: TF32 / the storage types' own)."""
    program = _program_of(a)
    return next((k.config.math for k in program.kernels if k.config.math in HALF_MATHS), None) if program else None


def attempt_fp32_math(a: AttemptRecord) -> str | None:
    """The math an attempt's fp32 kernels computed in: "tf32x3" where any kernel splits, "tf32" where any runs
    TF32, None (no kernel, or none over fp32 data)."""
    from dsl_compiler.precision import kernel_maths

    program = _program_of(a)
    if program is None or not program.kernels:
        return None
    try:
        maths = kernel_maths(program)
    except Exception:  # a program whose shapes do not infer: its declared knobs only
        maths = [k.config.math for k in program.kernels]
    return "tf32x3" if "tf32x3" in maths else ("tf32" if "tf32" in maths else None)


def _program_of(a: AttemptRecord) -> Program | None:
    """The program an attempt ran, as IR (None for an attempt without one, or one that does not parse)."""
    return _parsed(a.program_text) if a.program_text else None


@functools.lru_cache(maxsize=512)
def _parsed(text: str) -> Program | None:
    return parse(text)[0]  # the history is read on every write: each program is parsed once


def _key_of(a: AttemptRecord) -> str | None:
    """The key of the program an attempt ran (None when it has none that parses)."""
    return _key_of_text(a.program_text) if a.program_text else None


@functools.lru_cache(maxsize=512)
def _key_of_text(text: str) -> str | None:
    program = _parsed(text)
    return program_key(program) if program is not None else None


def _ms(t_us: float) -> str:
    return f"{t_us / 1000:.3f} ms" if t_us >= 100 else f"{t_us:.1f} us"


class OfflineTier:
    """The tier protocol of ``nodes.tiers``: ``propose`` nominates, ``write`` returns program text."""

    name = "offline"

    def __init__(self, record: search.ConfigRecord | None = None, configs_per_kernel: int = CONFIGS_PER_KERNEL,
                 use_record: bool = True, error_model: bool = True):
        self.configs_per_kernel = configs_per_kernel
        self.error_model = error_model  # predict each 16-bit math's error before proposing it
        self._record = record
        self.use_record = use_record
        self._plans: dict[tuple, _Plan] = {}
        self._precision: dict[tuple, tuple[str | None, dict]] = {}

    # -- state derived from the history ----------------------------------------------------------
    @property
    def record(self) -> search.ConfigRecord | None:
        if not self.use_record:
            return None
        if self._record is None:
            self._record = search.ConfigRecord()
        return self._record

    @staticmethod
    def fallback_options(history: list[AttemptRecord], kernel_names: set[str] | None = None) -> TraceOptions:
        """Fallbacks earned by failed attempts: a kernel named in a check/build error loses its
        epilogue, then its kernel; a wrong result drops all epilogues, then all kernels."""
        unfuse: list[str] = []
        demote: list[str] = []
        fuse = "all"
        wrong = 0
        compiled = {k.name for a in history if a.compile_ok for program in [_program_of(a)] if program
                    for k in program.kernels}
        for a in history:
            reason = a.failure_reason or ""
            if a.correct or not a.program_text or reason.startswith("write"):
                continue
            if reason.startswith("validate"):
                wrong += 1
            elif not a.compile_ok:
                text = " ".join(d.message for d in a.diagnostics)
                names = kernels_named(text)
                for name in dict.fromkeys(names):
                    if name in demote:
                        continue
                    if "nvcc rejected" in text and name in compiled:
                        continue  # that configuration failed; the kernel builds in others: try the next one
                    if name in unfuse:
                        demote.append(name)
                    else:
                        unfuse.append(name)
        if wrong == 1:
            fuse = "none"
        elif wrong >= 2:
            fuse = "none"
            demote.extend(n for n in sorted(kernel_names or ()) if n not in demote)
        return TraceOptions(fuse=fuse, unfuse=tuple(unfuse), demote=tuple(demote))

    def plan_for(self, problem: Any, gpu: str, options: TraceOptions) -> _Plan:
        key = (_problem_key(problem), gpu, options.model_dump_json())
        if key not in self._plans:
            self._plans[key] = self._make_plan(problem, gpu, options)
        return self._plans[key]

    def _make_plan(self, problem: Any, gpu: str, options: TraceOptions) -> _Plan:
        trace = trace_problem(problem, options)
        plan = _Plan(trace=trace, options=options)
        program = trace.program
        if program is None:
            return plan
        math = options.math
        if program.row_kernels:  # reductions, softmax, norms: the knobs of the lowest memory-bound estimate
            program = search.with_row_configs(program, gpu)
        if not program.kernels:
            rows = len(program.row_kernels)
            plan.candidates.append(Candidate(
                title=f"traced program: {rows} row kernel(s), {len(program.torch_steps)} PyTorch step(s)"
                      + (f": est {_ms(_program_estimate(program, gpu))}" if rows else ""),
                program=program, t_est_us=_program_estimate(program, gpu) if rows else 0.0, configs=()))
            return plan
        # kernels with one signature (a recurrence's step, a repeated block) share one ranking: ranking checks
        # and estimates the whole program per configuration, so a 65-kernel LSTM took minutes per plan
        types = shapes.infer(program)
        by_signature: dict[str, list] = {}
        ranked = {}
        for k in program.kernels:
            signature = search.kernel_signature(program, k.name, types)
            if signature not in by_signature:
                by_signature[signature] = search.rank_configs(program, k.name, problem, gpu, self.record,
                                                              self.configs_per_kernel)
            ranked[k.name] = by_signature[signature]
        base = program
        for name, options_ in ranked.items():
            if options_:
                base = search.with_config(base, name, options_[0].config)
        best_est = {name: (r[0].t_est_us if r else 0.0) for name, r in ranked.items()}
        t_base = _program_estimate(base, gpu)
        configs = tuple((k.name, k.config) for k in base.kernels)
        what = ", ".join(f"{k.name} {search.describe(k.config)}" for k in base.kernels)
        plan.candidates.append(Candidate(
            title=f"traced program ({len(base.kernels)} kernel(s), {len(base.torch_steps)} PyTorch step(s)): "
                  f"{what}: est {_ms(t_base)}",
            program=base, t_est_us=t_base, configs=configs, math=math))
        alternatives: list[Candidate] = []
        for name, options_ in ranked.items():
            for alt in options_[1:]:
                program_alt = search.with_config(base, name, alt.config)
                t = t_base - best_est[name] + alt.t_est_us
                prefix = f"{name}: " if len(ranked) > 1 else ""
                alternatives.append(Candidate(
                    title=f"{prefix}{search.describe(alt.config)}: est {_ms(t)}",
                    program=program_alt, t_est_us=t,
                    configs=tuple((k.name, k.config) for k in program_alt.kernels), varied=name, math=math))
        alternatives.sort(key=lambda c: c.t_est_us)  # stable: ties keep the ranking's order
        seen = {plan.candidates[0].key}
        for c in alternatives:
            if c.key not in seen:
                seen.add(c.key)
                plan.candidates.append(c)
        return plan

    def plans(self, problem: Any, gpu: str, history: list[AttemptRecord], allowed_precisions=None,
              tolerance=None) -> list[_Plan]:
        """The plans the history leaves: the TF32 (storage-type) plan under its fallbacks, and the
        16-bit plan the problem allows, under its own, until one of its programs gives a wrong result.
        The first plan's trace is the one that explains the program."""
        first = self.plan_for(problem, gpu, TraceOptions())
        kernel_names = {k.name for k in first.trace.program.kernels} if first.trace.program else set()
        if allowed_precisions is None:
            allowed_precisions = getattr(problem, "allowed_precisions", ())
        if tolerance is None:
            tolerance = getattr(problem, "tolerance", None)
        failed = failed_maths(history, tolerance)  # a precision that gave this problem a wrong result is not retried
        # the fp32 plan's own history: its fallbacks are earned by its programs, not by a precision that failed
        own = [a for a in history if attempt_math(a) is None and attempt_fp32_math(a) not in failed]
        options = self.fallback_options(own, kernel_names)
        if self.error_model and kernel_names:  # below 1e-3: TF32, or the split product where TF32 would miss
            fp32_math, _ = self.precision_choice(problem, allowed_precisions, tolerance, choose_fp32_math, failed)
            if fp32_math == "tf32x3":
                options = options.model_copy(update={"math": fp32_math})
        elif "tf32" in failed and admitted("tf32x3", tuple(allowed_precisions or ())):
            options = options.model_copy(update={"math": "tf32x3"})
        plans = [self.plan_for(problem, gpu, options)]
        # tf32 operands that are not K-major: read as stored (CUTLASS's register-sourced mainloop) or
        # after one transposing copy each (the K-major mainloop); the estimate ranks the two
        copied = self.plan_for(problem, gpu, options.model_copy(update={"kmajor": tuple(sorted(kernel_names))}))
        if copied.trace.program is not None and plans[0].trace.program is not None and \
                len(copied.trace.program.kernels) == len(plans[0].trace.program.kernels) and \
                copied.trace.program != plans[0].trace.program:
            plans.append(copied)
        if self.error_model and kernel_names:
            half, _ = self.precision_choice(problem, allowed_precisions, tolerance, choose_half_math, failed)
        else:
            half = half_math(allowed_precisions, tolerance)
            half = half if half not in failed else None
        if half is None or not kernel_names:
            return plans
        tried = [a for a in history if attempt_math(a) == half]
        if any((a.failure_reason or "").startswith("validate") for a in tried):
            return plans  # a wrong result in 16 bits: the precision, not the program, is the first suspect
        options = self.fallback_options(tried, kernel_names).model_copy(update={"math": half})
        plan = self.plan_for(problem, gpu, options)
        program, base = plan.trace.program, plans[0].trace.program
        # only where every kernel of the TF32 plan stays a kernel (a demoted GEMM is no 16-bit program)
        if program is not None and base is not None and len(program.kernels) >= len(base.kernels) and any(
                k.config.math == half for k in program.kernels):
            plans.append(plan)
        return plans

    def precision_choice(self, problem: Any, allowed_precisions, tolerance, choose=choose_half_math,
                         failed: tuple[str, ...] = ()) -> tuple[str | None, dict]:
        """``choose`` (``choose_half_math``, ``choose_fp32_math``) once per problem, tolerance and failed maths."""
        key = (choose.__name__, _problem_key(problem), tuple(allowed_precisions or ()), tolerance, tuple(failed))
        if key not in self._precision:
            self._precision[key] = choose(problem, allowed_precisions, tolerance, failed)
        return self._precision[key]

    def _state(self, request: WriterRequest) -> tuple[_Plan, list[tuple[Candidate, float]], dict[str, AttemptRecord]]:
        """The plan that explains the program (the first), and the untried candidates of every plan
        with their predicted times, best first."""
        problem = request.problem
        if problem is None:
            raise ValueError("the offline tier needs the loaded problem in the request")
        history = list(request.history)
        plans = self.plans(problem, request.gpu, history, request.allowed_precisions or None, request.tolerance)
        tried = {key: a for a in history for key in [_key_of(a)] if key is not None}
        for plan in plans:
            self._learn(plan, history, request.gpu)
        candidates = _merged(plans)
        untried = [c for c in candidates if c.key not in tried]
        return plans[0], self._rerank(candidates, untried, history), tried

    def candidates(self, problem: Any, gpu: str, history: list[AttemptRecord] | None = None) -> list[Candidate]:
        """Every untried candidate in the order the tier would write them (no measurements: the estimate's)."""
        history = list(history or [])
        tried = {_key_of(a) for a in history} - {None}
        return [c for c in _merged(self.plans(problem, gpu, history)) if c.key not in tried]

    def _learn(self, plan: _Plan, history: list[AttemptRecord], gpu: str) -> None:
        """Measured GPU times of single-kernel programs go into the per-shape record."""
        record = self.record
        if record is None or plan.trace.program is None:
            return
        by_key = {c.key: c for c in plan.candidates}
        for a in history:
            c = by_key.get(_key_of(a))
            if c is None or not a.correct or a.flags or a.timing_source != "gpu" or not a.t_us or len(c.configs) != 1:
                continue
            name, config = c.configs[0]
            try:
                # the shape key does not depend on the configuration: the traced program gives it
                record.update(search.shape_key(plan.trace.program, name), config, a.t_us, gpu)
            except Exception:  # a record that cannot be written never stops the search
                pass

    @staticmethod
    def _rerank(candidates: list[Candidate], untried: list[Candidate], history: list[AttemptRecord]) -> list[tuple[Candidate, float]]:
        by_key = {c.key: c for c in candidates}
        measured = [(by_key[key], a.t_us) for a in history for key in [_key_of(a)]
                    if key in by_key and a.correct and a.t_us and by_key[key].t_est_us > 0]
        ratios = [(c, t / c.t_est_us) for c, t in measured]
        if all(1 / MEASURED_MISS <= r <= MEASURED_MISS for _, r in ratios):
            return [(c, c.t_est_us) for c in untried]

        def similarity(a: Candidate, b: Candidate) -> int:
            score = 8 * (a.math == b.math)  # a precision misses its estimate its own way
            for (_, ca), (_, cb) in zip(a.configs, b.configs):
                score += 4 * (ca.tile == cb.tile) + 2 * (ca.schedule == cb.schedule) + (ca.cluster == cb.cluster)
                score += 2 * (ca.decomposition == cb.decomposition)
            return score

        def predicted(c: Candidate) -> float:
            best = max(ratios, key=lambda cr: (similarity(c, cr[0]), -abs(cr[1] - 1)))
            return c.t_est_us * best[1]

        scored = [(c, predicted(c), i) for i, c in enumerate(untried)]
        return [(c, t) for c, t, _ in sorted(scored, key=lambda x: (x[1], x[2]))]

    # -- the tier protocol -------------------------------------------------------------------------
    def propose(self, request: WriterRequest) -> list[Hypothesis]:
        plan, untried, _ = self._state(request)
        if plan.trace.program is None:
            return [Hypothesis(title="trace the reference", rationale=_diag_text(plan.trace), expected_gain=1.0, risk=1.0)]
        if not untried:
            return []
        correct = [a.t_us for a in request.history if a.correct and a.t_us]
        t_ref = min(correct) if correct else untried[0][1]
        hyps = []
        for rank_, (c, t_pred) in enumerate(untried[:8]):
            gain = t_ref / t_pred if t_pred > 0 else 1.0
            title = c.title if not correct else f"{c.title}, {gain:.2f}x over best"
            hyps.append(Hypothesis(
                title=title,
                rationale=("configuration ranked by the config-aware SOL estimate"
                           + (f"; varies kernel {c.varied}" if c.varied else f"; traced: {_coverage_text(plan.trace)}")
                           + (_math_text(c.math) if c.math else "")
                           + (f"; measured times of similar configurations predict {_ms(t_pred)}"
                              if abs(t_pred - c.t_est_us) > 1e-9 * max(1.0, c.t_est_us) else "")),
                expected_gain=max(gain, 1e-3), risk=1.0 + 0.01 * rank_, ))
        return hyps

    def write(self, request: WriterRequest) -> WriterReply:
        try:
            plan, untried, _ = self._state(request)
        except Exception as exc:  # the tier's failures are attempt failures
            return WriterReply("", model=MODEL_NAME, error=f"offline tier: {type(exc).__name__}: {exc}")
        if plan.trace.program is None:
            return WriterReply("", model=MODEL_NAME, error="tracing the reference failed: " + _diag_text(plan.trace))
        if not untried:
            return WriterReply("", model=MODEL_NAME, out_of_ideas=True,
                               error="offline search exhausted: every candidate configuration was tried")
        chosen = untried[0][0]
        wanted = request.plan.title if request.plan is not None else ""
        for c, _ in untried:
            if wanted and wanted.startswith(c.title):
                chosen = c
                break
        ahead = tuple(c.program for c, _ in untried if c is not chosen)[:BUILD_AHEAD]
        return WriterReply(chosen.program_text, tokens_in=0, tokens_out=0, model=MODEL_NAME, cost_usd=0.0,
                           hypothesis=Hypothesis(title=chosen.title, rationale="offline configuration search",
                                                 expected_gain=1.0, risk=1.0), ahead=ahead)


def _math_text(math: str) -> str:
    if math == "tf32x3":
        return ("; computes in tf32x3 (three TF32 MMAs a product over the operands' big and small parts: "
                "fp32-accurate, for a tolerance TF32 misses)")
    return (f"; computes in {math} (params converted once, other operands by a `to` step; "
            "fp32 accumulation and epilogue)")


def _merged(plans: list[_Plan]) -> list[Candidate]:
    """The candidates of several plans, each program once: every plan's traced program first, in
    estimated order (the estimate's error differs by precision and layout by up to 2x on the H200:
    f16 with two converted inputs measured slower than TF32 where it was estimated faster, so the
    best of each is measured before configurations are varied), then the rest in estimated order,
    each plan keeping its own."""
    import heapq

    seen: set[str] = set()
    out = []
    firsts = sorted((p.candidates[0] for p in plans if p.candidates), key=lambda c: c.t_est_us)
    for c in [*firsts, *heapq.merge(*(p.candidates[1:] for p in plans), key=lambda c: c.t_est_us)]:
        if c.key not in seen:
            seen.add(c.key)
            out.append(c)
    return out


def _program_estimate(program, gpu: str) -> float:
    from sol_models.estimate import estimate_program
    from sol_models.hardware import get_gpu

    try:
        return estimate_program(program, get_gpu(gpu)).t_us
    except Exception:
        return 0.0


def _coverage_text(trace: TraceResult) -> str:
    """One line: what became kernels, epilogues and PyTorch steps, and why anything fell back."""
    counts = trace.summary()
    parts = [f"{counts.get(k, 0)} {label}" for k, label in
             (("kernel", "kernel op(s)"), ("epilogue", "epilogue op(s)"), ("reduction", "reduction(s)"),
              ("torch_step", "PyTorch step(s)"))]
    fallbacks = [f"{r.op}: {r.reason}" for r in trace.coverage if r.placement == "torch_step" and r.reason]
    notes = [f"{r.op}: {r.reason}" for r in trace.coverage if r.placement == "kernel" and r.reason]
    return (", ".join(parts) + (f" (fallbacks: {'; '.join(fallbacks[:3])})" if fallbacks else "")
            + (f" (kernels: {'; '.join(notes[:3])})" if notes else ""))


def _diag_text(trace: TraceResult) -> str:
    return " | ".join(d.message for d in trace.diagnostics[:3]) or "no program"
