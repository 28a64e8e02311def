"""The harness worker: one process per GPU that validates and times candidates.

It speaks JSON lines with the parent (``evals.harness``): one request per line on stdin, one
answer per line on a private copy of stdout; the candidate's own prints go to stderr. The parent
restarts the process when it dies, hangs past the watchdog, or reports a fatal CUDA error (an
illegal address leaves the CUDA context unusable, so the worker answers and exits).

Torch is imported once per process; problems are cached per process. Reference timings are cached
by the parent (``Harness``), which outlives a restarted worker.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import os
import re
import sys
import time
import traceback
from contextlib import contextmanager
from typing import Any

import torch

from evals import integrity
from evals.problems import Problem, ProblemError
from evals.timing import L2Flusher, TimingMethod, make_flusher, time_cuda

FATAL_CUDA = re.compile(
    r"illegal memory access|illegal address|illegal instruction|unspecified launch failure|misaligned address|"
    r"device-side assert|CUDA error|cudaError|an illegal|hardware exception",
    re.IGNORECASE,
)
NAN_POISON = float("nan")
VALUE_POISON = 1.0e4  # finite garbage: an unwritten element that happens to hold it differs from the NaN run


def _guarded_functions() -> dict[tuple[object, str], object]:
    """The functions judging and timing rely on; a candidate that replaces one is tampering."""
    targets = [
        (torch, "allclose"), (torch, "isclose"), (torch, "equal"), (torch, "isfinite"),
        (torch.Tensor, "__eq__"), (time, "perf_counter"), (torch.cuda, "synchronize"), (torch.cuda, "Event"),
        (torch.cuda.Event, "record"), (torch.cuda.Event, "elapsed_time"), (torch.cuda, "current_stream"),
        (torch.nn.Module, "__call__"),
    ]
    return {(owner, name): getattr(owner, name) for owner, name in targets if hasattr(owner, name)}


class CandidateError(Exception):
    """The candidate could not be built or run; the message says why (one line)."""


class Worker:
    def __init__(self) -> None:
        self.problems: dict[str, Problem] = {}
        self.flusher: L2Flusher | None = None
        self.cuda = torch.cuda.is_available()
        self.device = torch.device("cuda") if self.cuda else torch.device("cpu")
        self.candidate_counter = 0
        self.candidate_modules: list[str] = []
        self.guarded = _guarded_functions()

    def tampered(self) -> list[str]:
        """Names of guarded functions a candidate replaced; they are put back."""
        changed = []
        for (owner, name), original in self.guarded.items():
            if getattr(owner, name, None) is not original:
                changed.append(f"{getattr(owner, '__name__', owner)}.{name}")
                setattr(owner, name, original)
        return changed

    def forget_candidates(self) -> None:
        """Drop the modules of this request's candidates (and whatever globals they hold)."""
        for name in self.candidate_modules:
            sys.modules.pop(name, None)
        self.candidate_modules.clear()

    # -- setup ------------------------------------------------------------------------------
    def problem(self, spec: dict) -> Problem:
        key = hashlib.sha256((spec["path"] + "\0" + spec["source"]).encode()).hexdigest()
        if key not in self.problems:
            self.problems[key] = Problem.from_spec(spec)
        p = self.problems[key]
        p.tolerance, p.allowed_precisions = float(spec["tolerance"]), tuple(spec["allowed_precisions"])
        return p

    def device_for(self, settings: dict) -> torch.device:
        want = settings.get("device", "auto")
        if want == "cpu" or not self.cuda:
            return torch.device("cpu")
        return self.device

    def get_flusher(self, method: TimingMethod) -> L2Flusher | None:
        """The L2 flusher of ``method``, kept between requests (its buffer is large); None for no flush."""
        self.flusher = make_flusher(self.device, method, self.flusher)
        return self.flusher

    def time(self, fn, input_sets, settings: dict):
        """``time_cuda`` under the request's timing settings."""
        method = TimingMethod.from_settings(settings)
        return time_cuda(fn, input_sets, flusher=self.get_flusher(method), **method.time_cuda_kwargs())

    # -- candidates -------------------------------------------------------------------------
    def candidate_factory(self, problem: Problem, cand: dict, device: torch.device):
        """Returns ``build(seed) -> nn.Module``: ModelNew seeded like the reference, or a program
        loaded with parameters bound from a reference model built with the same seed."""
        if cand.get("source") is not None:
            self.candidate_counter += 1
            name = f"mucutlass_candidate_{os.getpid()}_{self.candidate_counter}"
            module = type(sys)(name)
            module.__file__ = f"<candidate {cand.get('name', 'ModelNew')}>"
            sys.modules[name] = module  # dataclasses and pickling look a class's module up here
            self.candidate_modules.append(name)
            try:
                exec(compile(cand["source"], module.__file__, "exec"), module.__dict__)
            except Exception as exc:
                raise CandidateError(f"the candidate source failed to import: {_one_line(exc)}") from None
            cls = getattr(module, "ModelNew", None)
            if not isinstance(cls, type):
                raise CandidateError("the candidate source defines no class ModelNew")

            def build(seed: int):
                return problem.make_model_of(cls, seed, device)

            return build

        try:
            from dsl_compiler import runtime
            from dsl_compiler.ir import Program
        except ImportError as exc:
            raise CandidateError(f"the μCUTLASS runtime is not available: {_one_line(exc)}") from None
        program = Program.model_validate_json(cand["program_json"])
        backend = cand.get("backend", "interpreter")
        artifacts = cand.get("artifacts") or None

        def build(seed: int):
            reference = problem.make_model(seed, device)
            params = runtime.bind_params(program, reference)
            module = runtime.load(program, backend, params, artifacts)
            return module.to(device) if hasattr(module, "to") else module

        return build

    # -- operations ---------------------------------------------------------------------------
    def op_ping(self, req: dict) -> dict:
        return {
            "pid": os.getpid(),
            "cuda": self.cuda,
            "gpu_name": torch.cuda.get_device_name() if self.cuda else None,
            "torch": torch.__version__,
            "memory_allocated_bytes": torch.cuda.memory_allocated() if self.cuda else 0,
        }

    def op_validate(self, req: dict) -> dict:
        problem = self.problem(req["problem"])
        settings = req["settings"]
        device = self.device_for(settings)
        tol = problem.tolerance
        seeds = [int(s) for s in req["seeds"]]
        build = self.candidate_factory(problem, req["candidate"], device)
        sets: list[dict] = []
        checks: list[integrity.CheckResult] = []
        reached_reference = {"n": 0}
        with torch.no_grad(), _count_reference_calls(problem, reached_reference):
            for seed in seeds:
                try:
                    inputs = problem.make_inputs(seed, device)
                    with _fp32_strict():
                        ref_out = problem.make_model(seed, device)(*inputs)
                    _sync(device)
                except Exception as exc:
                    if _is_fatal(exc):
                        raise
                    raise ProblemError(f"{problem.path}: the reference failed (seed {seed}): {_one_line(exc)}") from None
                calls_before = reached_reference["n"]
                reached_reference["active"] = True
                out_sizes = [t.nbytes for t in _as_list(ref_out) if isinstance(t, torch.Tensor)]
                try:
                    model = build(seed)
                    snapshot = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
                    _poison(device, NAN_POISON, out_sizes)
                    out_a = model(*inputs)
                    _sync(device)
                    _poison(device, VALUE_POISON, out_sizes)
                    out_b = model(*inputs)
                    _sync(device)
                except Exception as exc:
                    if _is_fatal(exc):
                        raise
                    sets.append(_set(seed, False, None, None, f"the candidate raised {_one_line(exc)}"))
                    sets[-1]["ran"] = False
                    break
                finally:
                    reached_reference["active"] = False
                if reached_reference["n"] > calls_before:
                    checks.append(integrity.CheckResult(
                        name="calls_reference", ok=False,
                        reason="the candidate ran the reference Model's forward; compute the result itself"))
                    sets.append(_set(seed, False, None, None, "calls the reference"))
                    sets[-1]["ran"] = False
                    break
                verdict = self.compare(ref_out, out_a, out_b, inputs, tol)
                # checks come back only where output count, type, shape, dtype and device were right
                compared = verdict.pop("_checks", None)
                sets.append(_set(seed, **verdict))
                sets[-1]["ran"] = compared is not None
                checks.extend(compared or [])
                modified = [i for i, (x, s) in enumerate(zip(inputs, snapshot))
                            if isinstance(x, torch.Tensor) and not torch.equal(x, s)]
                if modified:
                    checks.append(integrity.CheckResult(
                        name="modifies_inputs", ok=False,
                        reason=f"the candidate wrote into input(s) {modified}; inputs must be read-only"))
                del model, out_a, out_b, ref_out, inputs, snapshot
                if not sets[-1]["correct"]:
                    break
            # Input dependence: one model, new values written into the same buffers (a pointer
            # cache sees the same addresses), then fresh tensors.
            if sets and sets[-1].get("ran", True):
                try:
                    checks.append(self.input_dependence(problem, build, seeds[0], device, tol))
                except Exception as exc:
                    if _is_fatal(exc):
                        raise
                    checks.append(integrity.CheckResult(
                        name="input_dependence", ok=False, reason=f"the candidate raised {_one_line(exc)}"))
        for s in sets:
            s.pop("ran", None)
        return {
            "sets": sets,
            "checks": [c.model_dump() for c in _dedupe(checks)],
            "device": str(device),
        }

    def compare(self, ref_out, out_a, out_b, inputs, tol: float) -> dict:
        refs, outs_a, outs_b = _as_list(ref_out), _as_list(out_a), _as_list(out_b)
        checks: list[integrity.CheckResult] = []
        def wrong(reason: str) -> dict:  # not comparable at all: no errors, no checks
            return dict(correct=False, max_abs_error=None, max_rel_error=None, reason=reason)

        if len(outs_b) != len(refs):
            return wrong(f"returns {len(outs_b)} output(s), the reference returns {len(refs)}")
        for i, (r, o) in enumerate(zip(refs, outs_b)):
            if not isinstance(o, torch.Tensor):
                return wrong(f"output {i} is a {type(o).__name__}, not a tensor")
            if tuple(o.shape) != tuple(r.shape):
                return wrong(f"output {i} has shape {list(o.shape)}, expected {list(r.shape)}")
            if o.dtype != r.dtype:
                return wrong(f"output {i} has dtype {o.dtype}, expected {r.dtype}")
            if o.device != r.device:
                return wrong(f"output {i} is on {o.device}, expected {r.device}")
        alias = integrity.result("output_aliases", integrity.alias_check(outs_b, inputs, refs))
        unwritten = integrity.result("unwritten_output", integrity.unwritten_output_check(outs_a, outs_b, tol))
        checks += [alias, unwritten]
        max_abs = max_rel = 0.0
        reason = ""
        correct = alias.ok and unwritten.ok
        if not alias.ok:
            reason = alias.reason
        elif not unwritten.ok:
            reason = unwritten.reason
        for i, (r, o) in enumerate(zip(refs, outs_b)):
            finite = torch.isfinite(o)
            if not bool(finite.all()):
                n_bad = int((~finite).sum())
                correct, reason = False, reason or f"output {i} has {n_bad} non-finite values (NaN or inf)"
                continue
            diff = (o.double() - r.double()).abs()
            max_abs = max(max_abs, float(diff.max()) if diff.numel() else 0.0)
            rel = diff / r.double().abs().clamp_min(1e-12)
            max_rel = max(max_rel, float(rel.max()) if rel.numel() else 0.0)
            close = torch.isclose(o, r, atol=tol, rtol=tol)
            if not bool(close.all()):
                n_bad = int((~close).sum())
                correct = False
                reason = reason or (
                    f"output {i}: {n_bad} of {o.numel()} elements differ from the reference beyond "
                    f"atol = rtol = {tol:g} (max abs error {max_abs:.3g})"
                )
        return dict(correct=correct, max_abs_error=max_abs, max_rel_error=max_rel, reason=reason, _checks=checks)

    def input_dependence(self, problem: Problem, build, seed: int, device, tol: float) -> integrity.CheckResult:
        other = seed + 7919
        model = build(seed)
        inputs = problem.make_inputs(seed, device)
        new_inputs = problem.make_inputs(other, device)
        with _fp32_strict():
            ref = problem.make_model(seed, device)
            ref_a, ref_b = _clone(ref(*inputs)), _clone(ref(*new_inputs))
        cand_a = _clone(model(*inputs))
        for x, y in zip(inputs, new_inputs):
            if isinstance(x, torch.Tensor):
                x.copy_(y)  # same addresses, new contents
        cand_b_inplace = _clone(model(*inputs))
        cand_c_fresh = _clone(model(*new_inputs))
        _sync(device)
        ok, reason = integrity.output_changes_check(ref_a, ref_b, cand_a, cand_b_inplace, tol)
        if ok:
            ok, reason = integrity.output_changes_check(ref_a, ref_b, cand_a, cand_c_fresh, tol)
        if ok:
            # Right on fresh tensors but wrong on the same buffers with new values: a cache keyed by address.
            def right(outs):
                return all(torch.allclose(c, r, atol=tol, rtol=tol) for c, r in zip(_as_list(outs), _as_list(ref_b)))

            if right(cand_c_fresh) and not right(cand_b_inplace):
                ok, reason = False, (
                    "wrong output after new values were written into the same input buffers: "
                    "the result is cached by address"
                )
        return integrity.CheckResult(name="input_dependence", ok=ok, reason=reason)

    def op_profile(self, req: dict) -> dict:
        problem = self.problem(req["problem"])
        settings = req["settings"]
        device = self.device_for(settings)
        if device.type != "cuda":
            return {"timing_source": None, "reason": "no GPU in this process: no measured timing"}
        build = self.candidate_factory(problem, req["candidate"], device)
        seeds = [int(s) for s in req["seeds"]]
        model = build(seeds[0])
        input_sets = [problem.make_inputs(s, device) for s in seeds]
        with torch.no_grad():
            sample = self.time(lambda inp: model(*inp), input_sets, settings)
        del model, input_sets
        out = sample.summary()
        out["timing_source"] = "gpu"
        out["checks"] = [integrity.result(
            "side_stream", integrity.side_stream_check(out["median_us"], out["wall_median_us"], out["sync_overhead_us"])).model_dump()]
        return out

    def op_reference_timings(self, req: dict) -> dict:
        problem = self.problem(req["problem"])
        settings = req["settings"]
        device = self.device_for(settings)
        if device.type != "cuda":
            return {"timing_source": None, "reason": "no GPU in this process: reference timings need one"}
        seeds = [int(s) for s in req["seeds"]]
        model = problem.make_model(seeds[0], device)
        input_sets = [problem.make_inputs(s, device) for s in seeds]
        out: dict[str, Any] = {"timing_source": "gpu"}
        timed_s = 0.0
        with torch.no_grad():
            with tf32_mode(matmul=False, cudnn=True):  # PyTorch's defaults: what "eager" means in KernelBench
                s = self.time(lambda inp: model(*inp), input_sets, settings)
            out["eager_fp32_us"], out["eager_fp32_spread_pct"] = s.median_us, s.spread_pct
            timed_s += s.elapsed_s
            with tf32_mode(matmul=True, cudnn=True):
                s = self.time(lambda inp: model(*inp), input_sets, settings)
                out["eager_tf32_us"], out["eager_tf32_spread_pct"] = s.median_us, s.spread_pct
                timed_s += s.elapsed_s
                if settings.get("compile", True):
                    try:
                        compiled = torch.compile(model)
                        t0 = time.perf_counter()
                        compiled(*input_sets[0])
                        torch.cuda.synchronize()
                        out["compile_s"] = time.perf_counter() - t0
                        s = self.time(lambda inp: compiled(*inp), input_sets, settings)
                        out["compile_us"], out["compile_spread_pct"] = s.median_us, s.spread_pct
                        timed_s += s.elapsed_s
                        del compiled
                        torch._dynamo.reset()  # compiled graphs hold the model's parameters
                    except Exception as exc:  # a model torch.compile cannot handle still has eager timings
                        if _is_fatal(exc):
                            raise
                        out["compile_us"] = None
                        out["reason"] = f"torch.compile failed: {_one_line(exc)}"
        out["timed_s"] = timed_s
        del model, input_sets
        return out

    def op_memory(self, req: dict) -> dict:
        return _memory(self.device)


# ---------------------------------------------------------------------------------------------
# helpers


def _set(seed, correct, max_abs_error, max_rel_error, reason="") -> dict:
    return {"seed": seed, "correct": bool(correct), "max_abs_error": max_abs_error,
            "max_rel_error": max_rel_error, "reason": reason or ""}


def _as_list(x) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _clone(x):
    return [t.clone() if isinstance(t, torch.Tensor) else t for t in _as_list(x)]


def _dedupe(checks: list[integrity.CheckResult]) -> list[integrity.CheckResult]:
    """One verdict per check name: the first failure, else the first pass."""
    by_name: dict[str, integrity.CheckResult] = {}
    for c in checks:
        if c.name not in by_name or (by_name[c.name].ok and not c.ok):
            by_name[c.name] = c
    return list(by_name.values())


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > 400:
        text = text[:400] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _is_fatal(exc: BaseException) -> bool:
    if type(exc).__name__ == "AcceleratorError":
        return True
    return torch.cuda.is_available() and bool(FATAL_CUDA.search(str(exc)))


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _memory(device) -> dict:
    """The level the next attempt starts from: torch's allocated and reserved device memory after
    collecting garbage and emptying the allocator's cache, and the process's resident host memory."""
    out = {"memory_allocated_bytes": 0, "memory_reserved_bytes": 0, "worker_rss_bytes": _rss_bytes()}
    if device.type == "cuda":
        gc.collect()  # cycles holding device tensors; cheap, since the startup heap is frozen
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        out["memory_allocated_bytes"] = torch.cuda.memory_allocated()
        out["memory_reserved_bytes"] = torch.cuda.memory_reserved()
    return out


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None  # not Linux


def _poison(device, value: float, out_nbytes: list[int] = ()) -> None:
    """Fill the allocator's free memory with ``value``, so that memory a candidate allocates but
    never writes holds it. On CUDA: empty the cache, then allocate, fill and free one large block
    (and a few small-pool blocks). On the CPU: allocate, fill and free blocks of the outputs' sizes,
    which the C allocator hands out again (last freed, first reused)."""
    if device.type != "cuda":
        blocks = []
        for nbytes in list(out_nbytes)[:8]:
            for _ in range(4):
                t = torch.empty(max(nbytes // 4, 1), dtype=torch.float32)
                t.fill_(value)
                blocks.append(t)
        del blocks
        return
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # the only cached free block is then the poisoned one
    free_bytes, _ = torch.cuda.mem_get_info()
    two_mb = 2 * 1024**2
    # A multiple of 2 MB fills its segment exactly: no unpoisoned tail for a best fit to pick.
    big_bytes = int(min(free_bytes * 0.5, 4 * 1024**3)) // two_mb * two_mb
    if big_bytes > 0:
        t = torch.empty(big_bytes // 4, dtype=torch.float32, device=device)
        t.fill_(value)
        del t
    # The small pool (allocations up to 1 MB) lives in 2 MB segments: two 1 MB blocks fill one.
    small = [torch.empty(1024**2 // 4, dtype=torch.float32, device=device) for _ in range(8)]
    for s in small:
        s.fill_(value)
    del small
    torch.cuda.synchronize()


@contextmanager
def tf32_mode(matmul: bool, cudnn: bool):
    """TF32 allowed (or not) in matmuls and in cuDNN convolutions, restored on exit."""
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _fp32_strict():
    """The correctness reference is true fp32 (no TF32 anywhere)."""
    return tf32_mode(matmul=False, cudnn=False)


@contextmanager
def _count_reference_calls(problem: Problem, counter: dict):
    """Counts calls of the reference ``Model.forward`` made while the candidate runs."""
    cls = problem.module.Model
    original = cls.forward

    def forward(self, *args, **kwargs):
        if counter.get("active"):
            counter["n"] += 1
        return original(self, *args, **kwargs)

    cls.forward = forward
    try:
        yield
    finally:
        cls.forward = original


# ---------------------------------------------------------------------------------------------
# main loop


def main() -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the candidate's prints must not corrupt the protocol
    sys.stdout = sys.stderr
    worker = Worker()
    gc.freeze()  # torch's own objects never need collecting: keeps each gc.collect() short
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
        except json.JSONDecodeError as exc:
            proto.write(json.dumps({"id": None, "ok": False, "error": f"bad request: {exc}", "fatal": False}) + "\n")
            continue
        op = req.get("op", "")
        handler = getattr(worker, f"op_{op}", None)
        fatal = False
        try:
            if handler is None:
                raise ProblemError(f"unknown operation {op!r}")
            reply = {"id": req.get("id"), "ok": True, "result": handler(req)}
        except (ProblemError, CandidateError) as exc:
            reply = {"id": req.get("id"), "ok": False, "error": str(exc), "kind": "input", "fatal": False}
        except BaseException as exc:  # noqa: BLE001 - a candidate may raise anything
            if isinstance(exc, KeyboardInterrupt):
                return 130
            fatal = _is_fatal(exc)
            kind = "cuda" if fatal else "exception"
            traceback.print_exc(file=sys.stderr)
            reply = {"id": req.get("id"), "ok": False, "error": _one_line(exc), "kind": kind, "fatal": fatal}
        worker.forget_candidates()
        changed = worker.tampered()
        if changed and reply.get("ok") and isinstance(reply.get("result"), dict):
            check = integrity.CheckResult(name="tampering", ok=False, reason=(
                f"the candidate replaced {', '.join(changed)}, which the harness uses to judge and time it"))
            reply["result"].setdefault("checks", []).append(check.model_dump())
        if reply.get("ok") and isinstance(reply.get("result"), dict) and not fatal:
            # after the candidate's module is gone: the level the next attempt starts from
            reply["result"].update(_memory(worker.device))
        proto.write(json.dumps(reply, default=_json_default, allow_nan=True) + "\n")
        proto.flush()
        if fatal:
            os._exit(3)  # a CUDA error leaves the context unusable: the parent starts a fresh worker
    return 0


def _json_default(x):
    if isinstance(x, float) and math.isnan(x):
        return None
    return str(x)


if __name__ == "__main__":
    sys.exit(main())
