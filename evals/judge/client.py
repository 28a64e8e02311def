"""The GPU harness: validates and times candidates against a problem's reference, crash-isolated.

All work runs in a worker subprocess (``evals.judge.process``, one per GPU), so a crash, an illegal
address or a hang costs one call: the worker is killed or exits, the call returns a failed result
with the reason, and a fresh worker is started for the next call. The parent never imports torch.

    harness = Harness(HarnessSettings(n_input_sets=5))
    v = harness.validate(problem, Candidate.from_source(text))       # -> Validation
    t = harness.profile(problem, candidate, t_sol_us=123.0)          # -> Timing
    r = harness.reference_timings(problem)                           # -> ReferenceTimings

Without a GPU, validation runs on the CPU for real, and a μCUTLASS program's time is the SOL
model's estimate (``timing_source="estimate"``); a ``ModelNew`` gets no timing.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from evals.judge import integrity, verdicts
from evals.judge.integrity import CheckResult
from evals.problems import Problem, default_precisions
from evals.judge.settings import HarnessSettings

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class Candidate(BaseModel):
    """What is judged: a μCUTLASS program (``program_json`` from ``Program.model_dump_json()``,
    its backend and built artifacts) or Python source defining ``ModelNew``."""

    program_json: str | None = None
    backend: Literal["interpreter", "cutlass"] = "interpreter"
    artifacts: dict[str, str] = Field(default_factory=dict)
    source: str | None = None
    name: str = "candidate"

    @model_validator(mode="after")
    def _one_kind(self) -> "Candidate":
        if (self.program_json is None) == (self.source is None):
            raise ValueError("a Candidate is either a program (program_json) or Python source (source), not both")
        return self

    @property
    def kind(self) -> Literal["program", "python"]:
        return "program" if self.program_json is not None else "python"

    @classmethod
    def from_program(cls, program, backend: str = "interpreter", artifacts: dict[str, str] | None = None) -> "Candidate":
        return cls(program_json=program.model_dump_json(), backend=backend, artifacts=artifacts or {},
                   name=program.name or "program")

    @classmethod
    def from_source(cls, source: str, name: str = "ModelNew") -> "Candidate":
        return cls(source=source, name=name)

    @classmethod
    def from_file(cls, path: str | Path) -> "Candidate":
        p = Path(path)
        return cls(source=p.read_text(encoding="utf-8"), name=p.stem)

    def program(self):
        from dsl_compiler.ir import Program

        return Program.model_validate_json(self.program_json)

    def worker_view(self) -> dict:
        return self.model_dump()

    @property
    def digest(self) -> str:
        import hashlib

        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:24]


class SetResult(BaseModel):
    seed: int
    correct: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    reason: str = ""
    rule: str | None = None


class Validation(BaseModel):
    correct: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    reason: str = ""  # "rule: why" (evals.judge.verdicts) when not correct
    rule: str | None = None  # the verdict's rule (evals.judge.verdicts.RULES); when correct, a flag's rule or None
    judge_failed: bool = False  # the judge itself failed (its error, its memory): no verdict on the candidate
    sets: list[SetResult] = Field(default_factory=list)
    checks: list[CheckResult] = Field(default_factory=list)
    precision: str | None = None  # the lowest math precision the candidate uses (static, programs)
    precisions: list[str] = Field(default_factory=list)
    measured_precision: str | None = None  # a disallowed precision the candidate's errors carry (None: none)
    info: dict = Field(default_factory=dict)  # the judge's measurements: precision probes, work attribution
    tolerance: float | None = None
    device: str | None = None
    crashed: bool = False  # the worker died, hung or hit a fatal CUDA error
    wall_s: float = 0.0
    memory_allocated_bytes: int | None = None  # the worker's device memory after the call (0 on CPU)
    memory_reserved_bytes: int | None = None  # held by torch's caching allocator after the call (0 on CPU)
    worker_rss_bytes: int | None = None  # the worker's resident host memory after the call

    @property
    def flags(self) -> list[str]:
        return integrity.flags_of(self.checks)


class Timing(BaseModel):
    median_us: float | None = None
    spread_pct: float | None = None
    trials: int = 0
    timing_source: Literal["gpu", "cpu", "estimate"] | None = None
    mean_us: float | None = None
    min_us: float | None = None
    wall_median_us: float | None = None
    timed_s: float | None = None  # the worker's time in the measurement (warm-up and timed calls)
    valid: bool = True  # False when a timing check failed (the number cannot be trusted)
    reason: str = ""
    rule: str | None = None  # the verdict's rule when not valid (evals.judge.verdicts.RULES)
    judge_failed: bool = False  # the judge itself failed (its error, its memory): no verdict on the candidate
    method: str | None = None  # how the time was taken: cuda_graph, events_device_sync, estimate
    calls_per_trial: int | None = None  # back-to-back calls averaged in one trial (median_us is the median trial)
    wall_bound_us: float | None = None  # the judge's own clock over back-to-back timed calls, per call
    # sealed calls (evals.judge.sealed): k, bound_us (U), t_us, alpha, beta_us, floor_us, flagged, method (what they prove)
    sealed: dict = Field(default_factory=dict)
    timing_lock: dict = Field(default_factory=dict)  # held (bool) and waited_s: the GPU's lock (evals.locks)
    work: dict = Field(default_factory=dict)  # kernels that ran and the candidate's share of GPU time
    stages: dict[str, float] = Field(default_factory=dict)  # the judge's seconds per stage (Validation: info["stages"])
    memory: dict = Field(default_factory=dict)  # peak device and host bytes of the judge and the candidate
    checks: list[CheckResult] = Field(default_factory=list)
    counters: dict[str, float] = Field(default_factory=dict)
    crashed: bool = False
    wall_s: float = 0.0
    memory_allocated_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    worker_rss_bytes: int | None = None

    @property
    def flags(self) -> list[str]:
        return integrity.flags_of(self.checks)


class ReferenceTimings(BaseModel):
    """The reference timed like candidates: eager with PyTorch's default precision (matmul fp32,
    cuDNN TF32), eager with TF32 allowed, and torch.compile (TF32 allowed, compiled once)."""

    eager_fp32_us: float | None = None
    eager_tf32_us: float | None = None
    compile_us: float | None = None
    eager_fp32_spread_pct: float | None = None
    eager_tf32_spread_pct: float | None = None
    compile_spread_pct: float | None = None
    compile_s: float | None = None
    timed_s: float | None = None  # the worker's time in the three measurements (compile_s not included)
    timing_source: Literal["gpu"] | None = None
    method: str | None = None  # how the eager fp32 time was taken (the others the same way when graphs capture)
    calls_per_trial: dict[str, int] = Field(default_factory=dict)  # per measurement
    timing_lock: dict = Field(default_factory=dict)  # held (bool) and waited_s: the GPU's lock (evals.locks)
    reason: str = ""
    crashed: bool = False

    def as_reference_us(self) -> dict[str, float]:
        """``{"eager_fp32": ..., "eager_tf32": ..., "compile": ...}`` (``RunSummary.reference_us``)."""
        pairs = (("eager_fp32", self.eager_fp32_us), ("eager_tf32", self.eager_tf32_us), ("compile", self.compile_us))
        return {k: v for k, v in pairs if v is not None}


MEMORY_FIELDS = ("memory_allocated_bytes", "memory_reserved_bytes", "worker_rss_bytes")


def _memory_of(result: dict) -> dict:
    """The worker's memory readings in a reply (None where one is missing)."""
    return {k: result.get(k) for k in MEMORY_FIELDS}


# ---------------------------------------------------------------------------------------------
# The worker process


class WorkerFailure(Exception):
    """The worker died, hung, or exited after a fatal CUDA error. ``reason`` says which."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class WorkerProcess:
    """One ``python -m evals.judge.process`` process and its JSON-lines pipe."""

    def __init__(self, settings: HarnessSettings):
        self.settings = settings
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.setdefault("PYTHONUNBUFFERED", "1")
        # the judge allocates and frees outputs of many sizes (a 4 GiB one, its float64 copies, chunks): segments
        # that grow in place keep them from fragmenting its share of the GPU (its candidates: evals.judge.sandbox)
        env.setdefault("MUCUTLASS_JUDGE_ALLOC_CONF", "expandable_segments:True")
        env.setdefault("PYTORCH_CUDA_ALLOC_CONF", env["MUCUTLASS_JUDGE_ALLOC_CONF"])
        if settings.gpu_index is not None:
            outer = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
            # an index into the devices this process may already be limited to
            env["CUDA_VISIBLE_DEVICES"] = outer[settings.gpu_index] if settings.gpu_index < len(outer) else str(settings.gpu_index)
        if settings.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        # the worker's stderr goes to an unnamed temporary file: nothing is left in the temp folder
        # however this process ends (SIGKILL included); stderr_tail reads it through the descriptor
        self.log = tempfile.TemporaryFile(prefix="mucutlass-worker-", suffix=".log")
        self.proc = subprocess.Popen(
            [settings.python, "-m", "evals.judge.process"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            cwd=str(PROJECT_ROOT), env=env, start_new_session=True,
        )
        self._buf = b""
        self._next_id = 0
        self.info: dict | None = None

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, op: str, payload: dict, timeout_s: float) -> dict:
        self._next_id += 1
        msg = json.dumps({"id": self._next_id, "op": op, **payload}) + "\n"
        try:
            self.proc.stdin.write(msg.encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerFailure(self._death_reason("before the request")) from None
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise WorkerFailure(f"timeout: no answer within the {timeout_s:g} s watchdog (a hang); the worker was restarted")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise WorkerFailure(self._death_reason("while running the request"))
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            self.kill()
            raise WorkerFailure(f"crash: the worker answered something unreadable ({line[:80]!r}); it was restarted") from None
        if reply.get("fatal"):
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
            raise WorkerFailure(f"crash: a fatal CUDA error in the judge ({reply.get('error', '')}); it was restarted")
        return reply

    def _death_reason(self, when: str) -> str:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        if code is not None and code < 0:
            try:
                what = f"signal {signal.Signals(-code).name}"
            except ValueError:
                what = f"signal {-code}"
        else:
            what = f"exit code {code}"
        tail = self.stderr_tail()
        return f"crash: the worker died ({what}) {when}" + (f"; last output: {tail}" if tail else "")

    def stderr_tail(self, n_chars: int = 300) -> str:
        try:  # pread: the worker shares the file offset, which must stay at the end for its writes
            fd = self.log.fileno()
            text = os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")
        except (OSError, ValueError):
            return ""
        lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
        return " | ".join(lines[-3:])[-n_chars:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: children (compile workers) too
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        if self.info is None:  # never asked anything (started ahead, then not needed): nothing to wind down
            self.kill()
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=1)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self.log.close()


# ---------------------------------------------------------------------------------------------
# The harness


class Harness:
    """Validation and timing of candidates in a crash-isolated worker (one per ``gpu_index``)."""

    def __init__(self, settings: HarnessSettings | None = None):
        self.settings = settings or HarnessSettings()
        self._worker: WorkerProcess | None = None
        self._reference_cache: dict[str, ReferenceTimings] = {}
        self.restarts = 0  # workers replaced after a crash, hang or fatal CUDA error
        self.last_failure: str = ""

    # -- worker management ----------------------------------------------------------------
    def _ensure_worker(self) -> WorkerProcess:
        if self._worker is None or not self._worker.alive:
            if self._worker is not None:
                self._worker.close()
            self._worker = WorkerProcess(self.settings)
        w = self._worker
        if w.info is None:
            reply = w.request("ping", {"settings": self.settings.worker_view()}, self.settings.startup_timeout_s)
            w.info = reply.get("result", {})
        return w

    def start(self) -> None:
        """Start the judge process now without waiting for it: its start-up (torch's import, its fork server's)
        overlaps the caller's own work until the first call, which finds it ready or nearly so."""
        if self._worker is None or not self._worker.alive:
            if self._worker is not None:
                self._worker.close()
            self._worker = WorkerProcess(self.settings)

    def _call(self, op: str, payload: dict, timeout_s: float) -> dict:
        """The worker's reply; on a crash, hang or fatal CUDA error a fresh worker is started at
        once (so the next call finds it ready) and ``WorkerFailure`` is raised."""
        try:
            worker = self._ensure_worker()
            return worker.request(op, payload, timeout_s)
        except WorkerFailure as exc:
            self.last_failure = exc.reason
            self.restarts += 1
            if self._worker is not None:
                self._worker.kill()
                self._worker.close()
            self._worker = WorkerProcess(self.settings)  # started now; pinged on its first use
            raise

    @property
    def has_gpu(self) -> bool:
        """Whether the worker sees a CUDA device (starts the worker)."""
        if self.settings.device == "cpu":
            return False
        return bool(self._ensure_worker().info.get("cuda"))

    def worker_info(self) -> dict:
        return dict(self._ensure_worker().info or {})

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def __enter__(self) -> "Harness":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # -- helpers --------------------------------------------------------------------------
    def _problem_view(self, problem: Problem) -> dict:
        spec = problem.to_spec()
        if self.settings.tolerance is not None:
            spec["tolerance"] = self.settings.tolerance
            allowed = default_precisions(self.settings.tolerance)
            spec["allowed_precisions"] = [p for p in spec["allowed_precisions"] if p in allowed] or list(allowed)
        return spec

    def static_checks(self, problem_view: dict, candidate: Candidate) -> tuple[list[CheckResult], list[str]]:
        """What a μCUTLASS program says of itself is data, not code: its kernels' precisions and
        whether it has a kernel at all are read from it. A Python source is judged by what it does."""
        if candidate.kind != "program":
            return [], []
        allowed = problem_view["allowed_precisions"]
        try:
            program = candidate.program()
        except Exception as exc:  # pydantic ValidationError, ImportError
            return [CheckResult(name=verdicts.CRASH, ok=False,
                                reason=f"the program does not load: {exc}".splitlines()[0])], []
        used = integrity.program_precisions(program)
        checks = [integrity.result(verdicts.PYTORCH_ONLY, integrity.pytorch_only_program_check(program)),
                  integrity.result(verdicts.PRECISION, integrity.precision_check(used, allowed))]
        return checks, used

    def _payload(self, problem: Problem, candidate: Candidate | None) -> dict:
        payload = {"problem": self._problem_view(problem), "settings": self.settings.worker_view()}
        if candidate is not None:
            payload.update(candidate=candidate.worker_view(), digest=candidate.digest)
        return payload

    # -- the three calls ------------------------------------------------------------------
    def validate(self, problem: Problem, candidate: Candidate) -> Validation:
        """Correctness on ``n_input_sets`` fresh input sets, repeated and in-place calls, measured
        precision and work attribution, judged in the judge process; the candidate runs in a fresh
        candidate process. A rejected candidate's ``reason`` starts with its rule."""
        start = time.perf_counter()
        view = self._problem_view(problem)
        static, used = self.static_checks(view, candidate)
        base = dict(precisions=used, precision=integrity.lowest_precision(used) if used else None,
                    tolerance=view["tolerance"])
        broken = [c for c in static if c.hard and not c.ok]
        if broken:
            c = broken[0]
            return Validation(correct=False, reason=verdicts.reason(c.name, c.reason), rule=c.name, checks=static,
                              wall_s=time.perf_counter() - start, **base)
        payload = self._payload(problem, candidate) | {"seed": self.settings.seed,
                                                        "n_input_sets": self.settings.n_input_sets}
        try:
            reply = self._call("validate", payload, self.settings.watchdog_s * 4 + self.settings.startup_timeout_s)
        except WorkerFailure as exc:
            return Validation(correct=False, reason=exc.reason, rule=verdicts.rule_of(exc.reason), checks=static,
                              crashed=True, wall_s=time.perf_counter() - start, **base)
        if not reply.get("ok"):
            return Validation(correct=False, reason=reply.get("error", "the judge failed"), checks=static,
                              judge_failed=True, wall_s=time.perf_counter() - start, **base)
        res = reply["result"]
        sets = [SetResult(**{k: v for k, v in s.items() if k in SetResult.model_fields}) for s in res["sets"]]
        checks = list(static)
        verdict = res.get("verdict")
        if verdict:
            checks.append(CheckResult(name=verdict["rule"], ok=False, reason=verdict["reason"].split(": ", 1)[-1]))
        for f in res.get("flags", []):
            checks.append(CheckResult(name=f["rule"], ok=False, reason=f["reason"].split(": ", 1)[-1]))
        info = res.get("info") or {}
        errs_abs = [s.max_abs_error for s in sets if s.max_abs_error is not None]
        errs_rel = [s.max_rel_error for s in sets if s.max_rel_error is not None]
        correct = verdict is None and len(sets) == self.settings.n_input_sets and all(s.correct for s in sets)
        flag_rule = next((f["rule"] for f in res.get("flags", [])), None)
        return Validation(
            correct=correct, reason=verdict["reason"] if verdict else "",
            rule=verdict["rule"] if verdict else flag_rule,
            sets=sets, checks=checks, measured_precision=info.get("measured_precision"), info=info,
            max_abs_error=max(errs_abs) if errs_abs else None, max_rel_error=max(errs_rel) if errs_rel else None,
            device=res.get("device"), crashed=bool(res.get("crashed")), wall_s=time.perf_counter() - start,
            **_memory_of(res), **base,
        )

    def profile(self, problem: Problem, candidate: Candidate, t_sol_us: float | None = None) -> Timing:
        """The candidate's time: measured on the GPU (the harness replays CUDA graphs it captured,
        or eager calls with every stream drained; ``method`` says which), or (no GPU) the SOL
        model's estimate for a program and nothing for Python source. Sampled timed calls are
        checked against the reference. With ``t_sol_us`` the SOL ceiling is checked."""
        start = time.perf_counter()
        if (self.settings.device == "cpu" or not self._gpu_or_none()) and not self.settings.cpu_timing:
            timing = self._estimate(candidate)
        else:
            try:
                reply = self._call("profile", self._payload(problem, candidate),
                                   self.settings.watchdog_s * 6 + self.settings.startup_timeout_s)
            except WorkerFailure as exc:
                return Timing(valid=False, reason=exc.reason, rule=verdicts.rule_of(exc.reason), crashed=True,
                              wall_s=time.perf_counter() - start)
            if not reply.get("ok"):
                return Timing(valid=False, reason=reply.get("error", "the judge failed"), judge_failed=True,
                              wall_s=time.perf_counter() - start)
            res = reply["result"]
            checks = []
            verdict = res.get("verdict")
            if verdict:
                checks.append(CheckResult(name=verdict["rule"], ok=False, reason=verdict["reason"].split(": ", 1)[-1]))
            for f in res.get("flags", []):
                checks.append(CheckResult(name=f["rule"], ok=False, reason=f["reason"].split(": ", 1)[-1]))
            timing = Timing(
                median_us=res.get("median_us"), spread_pct=res.get("spread_pct"), trials=res.get("trials") or 0,
                timing_source=res.get("timing_source"), mean_us=res.get("mean_us"), min_us=res.get("min_us"),
                timed_s=res.get("timed_s"), checks=checks, reason=res.get("reason") or "", method=res.get("method"),
                wall_bound_us=res.get("wall_bound_us"), sealed=res.get("sealed") or {},
                timing_lock=res.get("timing_lock") or {}, work=res.get("work") or {}, crashed=bool(res.get("crashed")),
                calls_per_trial=res.get("calls_per_trial"), stages=res.get("stages") or {},
                memory=res.get("memory") or {},
                **_memory_of(res),
            )
            if verdict:
                timing.valid, timing.reason, timing.rule = False, verdict["reason"], verdict["rule"]
            if self.settings.ncu:
                timing.counters = self._ncu_counters(problem, candidate)
        if t_sol_us is not None and timing.median_us is not None:
            timing.checks.append(integrity.result(verdicts.SOL_CEILING, integrity.sol_ceiling_check(timing.median_us, t_sol_us)))
        bad = [c for c in timing.checks if not c.ok and c.hard]
        if bad and timing.valid:
            timing.valid = False
            timing.rule = bad[0].name
            timing.reason = timing.reason or verdicts.reason(bad[0].name, bad[0].reason)
        flagged = [c for c in timing.checks if not c.ok and not c.hard]
        if timing.valid and flagged and timing.rule is None:
            timing.rule = flagged[0].name  # a flag: the time stands, kept out of headline numbers
        timing.wall_s = time.perf_counter() - start
        return timing

    def _gpu_or_none(self) -> bool:
        try:
            return self.has_gpu
        except WorkerFailure as exc:
            self.last_failure = exc.reason
            return False

    def _estimate(self, candidate: Candidate) -> Timing:
        if candidate.kind != "program":
            return Timing(reason="no GPU: a ModelNew candidate gets no timing without one")
        try:
            from sol_models.estimate import estimate_program
            from sol_models.hardware import get_gpu

            est = estimate_program(candidate.program(), get_gpu(self.settings.gpu))
        except Exception as exc:  # the estimate is best effort; say why it is missing
            return Timing(reason=f"no GPU and no estimate: {type(exc).__name__}: {exc}".splitlines()[0])
        return Timing(median_us=float(est.t_us), spread_pct=0.0, trials=0, timing_source="estimate",
                      method="estimate", reason=f"no GPU: estimated by the SOL model for {self.settings.gpu}")

    def reference_timings(self, problem: Problem) -> ReferenceTimings:
        """The reference timed the same way as candidates, in the same worker; cached per problem."""
        key = problem.source_hash + problem.path
        if key in self._reference_cache:
            return self._reference_cache[key]
        if self.settings.device == "cpu" or not self._gpu_or_none():
            return ReferenceTimings(reason="no GPU: reference timings need one")
        try:
            reply = self._call("reference_timings", self._payload(problem, None), self.settings.reference_watchdog_s)
        except WorkerFailure as exc:
            return ReferenceTimings(reason=exc.reason, crashed=True)
        if not reply.get("ok"):
            return ReferenceTimings(reason=reply.get("error", "the worker failed"))
        res = reply["result"]
        fields = set(ReferenceTimings.model_fields)
        timings = ReferenceTimings(**{k: v for k, v in res.items() if k in fields})
        self._reference_cache[key] = timings
        return timings

    def memory_allocated_bytes(self) -> int:
        return int(self.worker_memory().get("memory_allocated_bytes", 0))

    def worker_memory(self) -> dict[str, int | None]:
        """The worker's memory now: ``memory_allocated_bytes`` and ``memory_reserved_bytes`` (torch's
        CUDA allocator, 0 without a GPU) and ``worker_rss_bytes`` (resident host memory)."""
        reply = self._call("memory", {}, self.settings.watchdog_s)
        return dict(reply.get("result", {}))

    # -- optional hardware counters -------------------------------------------------------
    def _ncu_counters(self, problem: Problem, candidate: Candidate) -> dict[str, float]:
        from evals.judge.timing import ncu_counters

        return ncu_counters(problem, candidate, self.settings)
