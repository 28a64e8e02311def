"""The judge process: holds the reference, the expected outputs, the comparison and the verdict.

It speaks JSON lines with the harness (``evals.judge.client``): one request per line on stdin, one
answer per line on a private copy of stdout. It never runs candidate code: every attempt runs in a
fresh candidate process (``evals.judge.sandbox``, ``evals.judge.candidate``), started ahead of need so
that its torch import and CUDA start overlap the previous attempt. The candidate process gets the
constructor arguments, a parameter seed and input tensors; it returns output tensors. Everything it
says is checked here: outputs against the reference, inputs against this process's own copies,
output types, repeated and in-place calls, the precision its errors carry, its share of the work,
its timing against this process's wall clock, and what it left behind (processes, files).

Input seeds come from ``os.urandom`` here and never leave this process. Reference timings run here,
in a process no candidate ever ran in.
"""

from __future__ import annotations

if __name__ == "__main__":  # before torch loads: no process of this user reads or writes this one's memory
    import ctypes as _ctypes

    _ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4

import gc
import hashlib
import json
import math
import os
import select
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from typing import Any

import torch

from evals.judge import memory, verdicts, wire
from evals.judge.attempt import Attempt, Stages
from evals.judge.attribution import OpRecorder
from evals.judge.checks import work
from evals.judge.findings import Finding, HarnessError, verdict_of
from evals.judge.profiling import Profile
from evals.judge.sandbox import CandidateProcess, ProtectedTree, sandbox_refused
from evals.judge.settings import HarnessSettings
from evals.judge.timing import TimingMethod, make_flusher, time_candidate
from evals.judge.validation import Validation
from evals.judge.zygote import Zygote
from evals.locks import DeviceHold, DeviceTimingLock, device_key
from evals.problems import Problem, ProblemError

# input sets and reference outputs prepared ahead of need hold at most this much memory (per kind of operation),
# and never more than the problem's memory plan leaves for them
PREPARED_MAX_BYTES = {"cuda": 4 << 30, "cpu": 1 << 30}


def _seed() -> int:
    return int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF


def _as_list(x) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _device_key(device) -> str:
    """One spelling per device for the judge's caches (reference models, prepared sets, sealed K, plans). The
    judge's device is ``cuda`` while its tensors report ``cuda:0``: keyed by ``str(device)`` the references of a
    set (looked up by the inputs' device) missed the prepared model and built a second one, and a Model whose
    parameters are not all drawn from the seed then compared the candidate, built from the first one's
    state_dict, against another model's outputs."""
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    elif d.type == "cpu":  # CPU tensors report no index
        d = torch.device("cpu")
    return str(d)


def _compile_failed(out: dict, exc: BaseException) -> None:
    """A reference torch.compile cannot handle keeps its eager timings; the reason says why it has no other."""
    out["compile_us"] = None
    out["reason"] = f"torch.compile failed: {_one_line(exc)}"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > 300:
        text = text[:300] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


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


class Prepared:
    """Input sets and their reference outputs under one model seed, drawn before the operation that uses
    them (while a closing linger runs, or while the judge waits for its next request) from ``os.urandom``
    seeds, kept in this process only, and used by one operation: every validation and profile still gets sets
    no earlier one saw. An operation takes the ready ones first and draws the rest as it goes
    (``Judge.next_set``), so a large problem's sets are never all held at once."""

    def __init__(self, model_seed: int, model, fixed: int | None = None) -> None:
        self.model_seed, self.model = model_seed, model
        self.sets: list[tuple[int, list, list]] = []  # (seed, inputs, reference outputs), ready
        self.shuffled: tuple[list, list] | None = None  # set 1's values reordered, and their reference
        self.sealed: list[tuple[int, list, list]] = []  # a profile's: sets for its sealed calls (evals.judge.sealed)
        self.ready = 0  # of the sets an operation took, how many were drawn before it
        self.fixed = fixed  # a fixed base seed: set i's seed follows from it
        self.drawn = 0  # sets handed to the operation so far

    def nbytes(self) -> int:
        shuffled = [t for part in (self.shuffled or ()) if part for t in part]
        return memory.nbytes([t for _, x, r in (*self.sets, *self.sealed) for t in (*x, *r)] + shuffled)

    def room_for_one(self, cap_bytes: int, set_bytes: int | None = None) -> bool:
        """Whether one more set of the size of those held (or ``set_bytes``) stays under ``cap_bytes``."""
        n = len(self.sets) + len(self.sealed)
        if n == 0:
            return cap_bytes > 0 and (set_bytes is None or set_bytes <= cap_bytes)
        return self.nbytes() * (n + 1) / n <= cap_bytes


class Judge:
    def __init__(self) -> None:
        self.problems: dict[str, Problem] = {}
        self.cuda = torch.cuda.is_available()
        self.device = torch.device("cuda") if self.cuda else torch.device("cpu")
        self.flusher = None
        self.settings = HarnessSettings()
        self.spares: list[CandidateProcess] = []  # started ahead of need, oldest first
        self.zygote: Zygote | None = None  # the fork server the spares are forked from (settings.fork_server)
        self.zygote_starts = 0
        self.current: Attempt | None = None
        self.tree = ProtectedTree()
        self.ref_flops_cache: dict[tuple, int] = {}
        self.ref_products_cache: dict[tuple, list[float]] = {}
        self.peak = PeakMeter(self.cuda)
        self.stages = Stages(self.peak.since_mark)
        self.models: dict[tuple, Any] = {}  # this operation's reference models, by (problem, seed, device)
        self.ending: list = []  # threads awaiting the exit of ended candidate processes
        self.prepared: dict[tuple, Prepared] = {}  # by (problem, device, "validate" | "profile")
        self.next_up: tuple | None = None  # (problem, device, validation sets, profile sets): prepared when idle
        self.validate_sets = 5  # the last validation's number of input sets
        self.sealed_k: dict[tuple, int] = {}  # the last profile's sealed calls per (problem, device): K sets to prepare
        self.sealed_floor_us: dict[tuple, float] = {}  # the sealed passes' measured floor per ((problem, device), K)
        self.plans: dict[tuple, memory.MemoryPlan] = {}  # per (problem, device)
        self.last_plan: memory.MemoryPlan | None = None  # the plan of the problem judged last
        self.device_bytes = 0  # this judge's share of its GPU (judge and candidates); 0 without one
        self._warm_recorder()

    @staticmethod
    def _warm_recorder() -> None:
        """The operator recorder's first use writes torch's default compile folder: done before any attempt, so
        no attempt's snapshot sees the judge's own write as the candidate's."""
        try:
            with torch.no_grad(), OpRecorder():
                torch.zeros(2).add_(1)
        except Exception:  # noqa: BLE001 - a recorder that will not start fails the counted call instead
            pass

    def apply(self, settings: dict | None) -> HarnessSettings:
        """The request's settings, validated by the one settings model; on the first with a GPU, this judge's share
        of the device, the part of it its own allocator may take, and the part each candidate process is told."""
        if settings is not None:
            self.settings = HarnessSettings.model_validate(settings)
        if self.cuda and not self.device_bytes:
            total = torch.cuda.mem_get_info()[1]
            self.device_bytes = memory.device_share(total, self.settings.judges_per_gpu, self.settings.gpu_memory_gb)
            torch.cuda.set_per_process_memory_fraction(
                memory.fraction(int(self.device_bytes * memory.JUDGE_SHARE), total))
            os.environ["MUCUTLASS_GPU_FRACTION"] = str(
                memory.fraction(self.device_bytes - int(self.device_bytes * memory.JUDGE_SHARE), total))
        pin = self.settings.pin_arena_mb
        os.environ["MUCUTLASS_PIN_ARENA_MB"] = str(wire.ARENA_BYTES >> 20 if pin is None else pin)
        return self.settings

    # -- candidate processes ------------------------------------------------------------------
    def start_spares(self) -> None:
        """Keep ``spare_processes`` candidate processes starting or ready (a dead one is replaced)."""
        # outside the sandbox a candidate can signal its siblings: a frozen spare is replaced like a dead one (a
        # stopped process below its supervisor ends the supervisor within a poll; a stopped supervisor cannot
        # see itself, and finish() kills its tree)
        for dead in [p for p in self.spares if not p.alive() or (not p.sandboxed and p.supervisor_stopped())]:
            if (dead.finish() or {}).get("reason") == "sandbox_failed":
                sandbox_refused()  # the kernel refused a namespace after all: the next ones start without
            self.spares.remove(dead)
        # two on the CPU: an attempt takes one while the next is still importing torch (a wait of seconds each)
        want = int(self.settings.spare_processes or (3 if self.cuda else 2))
        # a spare starts under the floor; the attempt's plan sets the problem's limit (Attempt.start)
        floor = self.settings.memory_limit_gb
        rss = int((memory.HOST_FLOOR_BYTES / memory.GB if floor is None else floor) * memory.GB)
        zygote = self.fork_server()
        if zygote is None and self.zygote is not None:  # started at boot, then turned off by the settings
            self.zygote.close()
            self.zygote = None
        if zygote is not None and not zygote.is_ready():
            return  # its torch import is the spares' (take_spare waits for it): a new Python each would be slower
        while len(self.spares) < want:
            self.spares.append(CandidateProcess.start(sys.executable, rss_limit_bytes=rss, zygote=zygote))

    def fork_server(self) -> Zygote | None:
        """The running fork server (started, or replaced when it died or was stopped), or None: off in the
        settings, or failed three times (spares are then new Pythons)."""
        on = self.settings.fork_server
        if not (on if on is not None else not self.cuda):  # unset: not on a GPU host until measured there
            return None
        if self.zygote is not None and not self.zygote.alive():
            self.zygote.close()
            self.zygote = None
        if self.zygote is None and self.zygote_starts < 3:
            self.zygote_starts += 1
            self.zygote = Zygote.start(sys.executable)
        return self.zygote

    def snapshot_now(self) -> dict:
        return self.tree.snapshot()

    def out_of_memory_at(self, exc: BaseException) -> str:
        """Where the judge ran out of memory, for the harness's reason: the stage, the judge's innermost line, what
        the plan gave it and what each stage held at most (the numbers to fix the plan with)."""
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/evals/" in f.filename.replace(os.sep, "/")]
        line = f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno} {frames[-1].name}" if frames else "?"
        plan = self.last_plan
        share = (f"; plan: judge {plan.judge_bytes / 2**30:.1f} GiB (need {plan.judge_need_bytes / 2**30:.1f}), "
                 f"references {'kept' if plan.hold_references else 'drawn again'}") if plan is not None else ""
        peaks = ", ".join(f"{k} {v / 1024:.1f}" for k, v in self.stages.take_peaks().items())
        return (f"(in {self.stages.current or 'no stage'}, at {line}{share}; GiB held at most by stage: {peaks}; "
                f"held now: {_largest_tensors(self.device)})")

    def end_current(self) -> None:
        """End the current attempt's process: the kill is sent at once, its exit is awaited in a thread
        (the reply need not wait for the driver to tear its context down); the next attempt's process
        starts only after it is gone (``reap``)."""
        if self.current is not None:
            with self.stages("process_end"):
                proc, self.current = self.current.proc, None
                ender = threading.Thread(target=proc.finish, name="candidate-end", daemon=True)
                ender.start()
                self.ending.append(ender)

    def reap(self, timeout_s: float = 30.0) -> None:
        """Wait until every ended candidate process has exited."""
        for ender in self.ending:
            ender.join(timeout_s)
        self.ending = [e for e in self.ending if e.is_alive()]
        self.sweep_orphans()  # here, not in the thread: no spare is being started meanwhile

    def sweep_orphans(self) -> None:
        """Kill processes orphaned to this one (a child subreaper) from candidate trees whose supervisor
        died first: children in another session than the judge's that are not a spare's supervisor."""
        from evals.judge.supervisor import descendants

        mine, keep = os.getsid(0), {p.proc.pid for p in self.spares}
        if self.zygote is not None:
            keep.add(self.zygote.proc.pid)
        for pid, (ppid, sid) in descendants(os.getpid()).items():
            if ppid == os.getpid() and sid != mine and pid not in keep:
                try:
                    os.kill(pid, 9)
                    os.waitpid(pid, os.WNOHANG)
                except (ProcessLookupError, ChildProcessError, PermissionError):
                    pass

    def attempt_for(self, digest: str, device: torch.device, watchdog_s: float, fresh: bool) -> Attempt:
        cur = self.current
        if not fresh and cur is not None and cur.digest == digest and cur.proc.alive() and cur.device == device:
            return cur
        self.end_current()
        self.current = Attempt(self, self.take_spare(), digest, device, watchdog_s)
        self.arm_spares(self.current.proc)
        return self.current

    def take_spare(self) -> CandidateProcess:
        """A pre-started candidate process; the next attempts' start importing torch while it runs."""
        with self.stages("process_start"):
            self.reap()
            self.start_spares()
            if not self.spares and self.zygote is not None and not self.zygote.wait_ready():
                self.zygote.close()  # it never became ready: this spare and the next are new Pythons
                self.zygote, self.zygote_starts = None, 3
            self.start_spares()
            proc = self.spares.pop(0)
            self.start_spares()
        return proc

    def arm_spares(self, proc: CandidateProcess) -> None:
        """Outside the sandbox the candidate in ``proc`` sees the new spares: its code runs only once they
        are undumpable."""
        if proc.sandboxed:
            return
        with self.stages("process_start"):
            for spare in self.spares:
                if not spare.wait_armed(30.0):
                    spare.finish()
            self.spares = [p for p in self.spares if p.alive()]

    def boot(self, attempt: Attempt, boot_timeout_s: float) -> dict:
        """The attempt's process's first answer (it waits for the process to be ready). A process that
        dies before it was sent anything of the candidate's is the harness's failure, not the candidate's
        (with eight judges starting at once on one H200 a fresh process's CUDA start failed about once in
        a hundred attempts): one more fresh process, then a death counts."""
        for last in (False, True):
            try:
                return attempt.request("ping", {}, timeout_s=boot_timeout_s)
            except Finding as f:
                if last or not f.died or attempt.loaded:
                    raise
            attempt.proc.finish()
            attempt.proc = self.take_spare()
            attempt.proc.device = str(attempt.device)
            self.arm_spares(attempt.proc)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.end_current()
        self.reap()
        for p in self.spares:
            p.finish()
        self.spares = []
        if self.zygote is not None:
            self.zygote.close()
            self.zygote = None

    # -- setup ------------------------------------------------------------------------------
    def problem(self, spec: dict) -> Problem:
        key = hashlib.sha256((spec["path"] + "\0" + spec["source"]).encode()).hexdigest()
        if key not in self.problems:
            self.problems[key] = Problem.from_spec(spec)
        p = self.problems[key]
        p.tolerance, p.allowed_precisions = float(spec["tolerance"]), tuple(spec["allowed_precisions"])
        return p

    def problem_key(self, problem: Problem, device) -> tuple:
        return (problem.path, problem.source_hash, _device_key(device))

    def device_for(self, settings: HarnessSettings) -> torch.device:
        if settings.device == "cpu" or not self.cuda:
            return torch.device("cpu")
        return self.device

    def model(self, problem: Problem, seed: int, device) -> Any:
        """The reference model for ``seed`` on ``device``, built once per operation: one instance is
        called on every input set, as the candidate's is."""
        key = (problem.path, problem.source_hash, seed, _device_key(device))
        if key not in self.models:
            with self.stages("reference"):
                self.models[key] = problem.make_model(seed, device)
        return self.models[key]

    # -- the memory plan --------------------------------------------------------------------------
    def plan(self, problem: Problem, device, bundle: "Prepared") -> memory.MemoryPlan:
        """The problem's memory plan (evals.judge.memory), from its first set and the reference's parameters;
        once per problem and device. A plan that refuses the problem is the harness's failure, said at once."""
        key = self.problem_key(problem, device)
        if key not in self.plans:
            if device.type == "cuda" and self.device_bytes:
                # the first set is drawn under the judge's whole share, not the last problem's plan (an 8 GiB-output
                # reference ran out under the share a small problem's plan had left the judge)
                total = torch.cuda.mem_get_info()[1]
                torch.cuda.set_per_process_memory_fraction(
                    memory.fraction(max(self.device_bytes - memory.CONTEXT_BYTES, 1), total))
            if not bundle.sets:
                bundle.sets.append(self._new_set(problem, bundle, self._seed_for(bundle, 0), device))
            _, x, ref = bundle.sets[0]
            params = memory.nbytes(list(bundle.model.state_dict().values())) if hasattr(bundle.model, "state_dict") else 0
            fp = memory.Footprint(input_bytes=memory.nbytes(x), output_bytes=memory.nbytes(ref), param_bytes=params,
                                  output_numel=memory.numel(ref),
                                  reference_work_bytes=self.reference_work_bytes(problem, bundle, x, device))
            floor = self.settings.memory_limit_gb
            self.plans[key] = memory.plan(
                fp, self.device_bytes if device.type == "cuda" else 0, timing_sets=self.settings.timing_input_sets,
                host_floor_bytes=None if floor is None else int(floor * memory.GB),
                arena_bytes=wire.ARENA_BYTES, on_gpu=device.type == "cuda")
            if floor is not None and floor > 0:  # a limit the user set is the limit
                self.plans[key] = memory.MemoryPlan(**{**self.plans[key].__dict__,
                                                       "host_limit_bytes": int(floor * memory.GB)})
        plan = self.last_plan = self.plans[key]
        if plan.refusal:
            raise HarnessError(plan.refusal)
        return plan

    def reference_work_bytes(self, problem: Problem, bundle: "Prepared", x: list, device) -> int:
        """What one reference call allocates on the GPU beyond its outputs: its intermediates (relu(conv(x)) holds
        two outputs at once) and the libraries' work space (a cuDNN convolution's); measured on one call, for the
        plan (0 off a GPU: there the plan sets no device share)."""
        if device.type != "cuda":
            return 0
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        out, peak = self.peak.during(lambda: self.reference(problem, bundle.model_seed, x))
        work = peak - base - memory.nbytes(out)
        del out
        return max(0, int(work))

    def prepared_cap(self, problem: Problem, device, purpose: str | None = None) -> int:
        """What sets drawn ahead of need may hold for ``purpose``: the plan's room for them, less what the other
        kinds of operation of the problem already hold (one cap for all of them)."""
        cap = PREPARED_MAX_BYTES.get(torch.device(device).type, PREPARED_MAX_BYTES["cpu"])
        plan = self.plans.get(self.problem_key(problem, device))
        cap = cap if plan is None else min(cap, plan.prepared_bytes)
        others = sum(b.nbytes() for k, b in self.prepared.items()
                     if k[:3] == self.problem_key(problem, device) and k[3] != purpose)
        return max(0, cap - others)

    # -- input sets prepared ahead of need ------------------------------------------------------
    def _prepared_key(self, problem: Problem, device, purpose: str) -> tuple:
        return (*self.problem_key(problem, device), purpose)

    def _use_model(self, problem: Problem, b: Prepared, device) -> None:
        self.models[(problem.path, problem.source_hash, b.model_seed, _device_key(device))] = b.model

    def prepare(self, problem: Problem, device, purpose: str, n_sets: int, until=None) -> None:
        """Top up the prepared sets for the next ``purpose`` ("validate", "profile") on ``problem`` to
        ``n_sets`` (a validation's also its reordered set), stopping early once ``until()`` is true or the
        sets would pass what the memory plan leaves for them."""
        key = self._prepared_key(problem, device, purpose)
        for other in [k for k in self.prepared if k[:3] != key[:3]]:  # another problem's: not needed next
            del self.prepared[other]
        stop = until or (lambda: False)
        cap = self.prepared_cap(problem, device, purpose)
        plan = self.plans.get(key[:3])
        hint = plan.footprint.set_bytes if plan is not None else None
        b = self.prepared.get(key)
        if b is None:
            if stop() or (plan is not None and not Prepared(0, None).room_for_one(cap, hint)):
                return
            b = self.prepared[key] = self._new_prepared(problem, _seed(), device)
        self._use_model(problem, b, device)
        while len(b.sets) < n_sets:
            if stop() or not b.room_for_one(cap, hint):
                return
            b.sets.append(self._new_set(problem, b, _seed(), device))
        if purpose == "validate" and b.shuffled is None and not stop() and b.room_for_one(cap, hint):
            self._add_shuffled(problem, b)
        # a profile's sealed calls: as many sets as the last profile of this problem staged (its K)
        while purpose == "profile" and b.sets and len(b.sealed) < self.sealed_k.get(key[:3], 0):
            if stop() or not b.room_for_one(cap, hint):
                return
            b.sealed.append(self._new_set(problem, b, _seed(), device))

    def take(self, problem: Problem, device, purpose: str, n_sets: int, fixed: int | None = None) -> Prepared:
        """The sets for this operation: the prepared ones (removed: never used twice), completed to ``n_sets``
        where the plan leaves room for them all (else the operation draws the rest as it goes); with a ``fixed``
        seed, the ones it determines."""
        b = None if fixed is not None else self.prepared.pop(self._prepared_key(problem, device, purpose), None)
        if b is None:
            b = self._new_prepared(problem, fixed if fixed is not None else _seed(), device, fixed=fixed)
        self._use_model(problem, b, device)
        b.sets = b.sets[:n_sets]
        b.ready = len(b.sets)
        plan = self.plan(problem, device, b)  # from the first set (drawn now where none was): before any other
        if n_sets * plan.footprint.set_bytes <= max(self.prepared_cap(problem, device, purpose), 0):
            while len(b.sets) < n_sets:
                b.sets.append(self._new_set(problem, b, self._seed_for(b, len(b.sets)), device))
        return b

    def next_set(self, problem: Problem, b: Prepared, device) -> tuple[int, list, list]:
        """The operation's next set: a ready one (let go by the bundle), else drawn now."""
        index, b.drawn = b.drawn, b.drawn + 1
        if b.sets:
            return b.sets.pop(0)
        return self._new_set(problem, b, self._seed_for(b, index), device)

    @staticmethod
    def _seed_for(b: Prepared, index: int) -> int:
        return b.fixed + 1_000_003 * index if b.fixed is not None else _seed()

    def _new_prepared(self, problem: Problem, model_seed: int, device, fixed: int | None = None) -> Prepared:
        with self.stages("reference"):
            return Prepared(model_seed, problem.make_model(model_seed, device), fixed=fixed)

    def _new_set(self, problem: Problem, b: Prepared, seed: int, device) -> tuple[int, list, list]:
        x = self.inputs(problem, [seed], device)[0]
        return seed, x, self.reference(problem, b.model_seed, x)

    def _add_shuffled(self, problem: Problem, b: Prepared) -> None:
        """Set 1's values in another order (first and last kept) and their reference."""
        from evals.judge.checks.dependence import interior_permutation

        with self.stages("reference"):
            shuffled = interior_permutation(b.sets[0][1])
        b.shuffled = (shuffled, self.reference(problem, b.model_seed, shuffled) if shuffled is not None else None)

    def idle(self, busy) -> None:
        """While no request waits (``busy()`` false): the spares' arenas pinned, then the next validation's and
        profile's sets for the problem last judged."""
        pin_mb = int(os.environ.get("MUCUTLASS_PIN_ARENA_MB") or 0)
        if pin_mb and self.cuda:  # the spares' arenas, on the judge's side (HarnessSettings.pin_arena_mb)
            for spare in self.spares:
                if busy():
                    return
                if spare.arena is not None and not spare.arena.pinned:
                    spare.arena.pin(pin_mb << 20)
        nxt, self.next_up = self.next_up, None
        if nxt is None:
            return
        problem, device, n_validate, n_profile = nxt
        # drawing sets is GPU work: under the shared lock, and given up for this judge's next request or another
        # judge's measurement (these sets are optional: the operation draws what it lacks)
        lock = self.timing_lock(device, self.settings, shared=True, give_up=busy).acquire()
        until = lambda: busy() or lock.measurement_waiting()  # noqa: E731
        try:
            if lock.off or lock.held:
                self.prepare(problem, device, "validate", n_validate, until=until)
                if device.type == "cuda" or self.settings.cpu_timing:
                    self.prepare(problem, device, "profile", n_profile, until=until)
            else:
                self.next_up = nxt  # not drawn now: perhaps at the next idle moment
        except Exception:  # noqa: BLE001 - the operation itself will meet (and report) the problem's failure
            self.prepared.clear()
        finally:
            lock.release()
            self.models.clear()
            self.stages.take()  # idle work is no operation's time

    def inputs(self, problem: Problem, seeds: list[int], device) -> list:
        with self.stages("reference"):
            return [problem.make_inputs(s, device) for s in seeds]

    def reference(self, problem: Problem, seed: int, inputs: list):
        """The reference's outputs (true fp32) for ``inputs``, detached."""
        device = inputs[0].device if inputs and isinstance(inputs[0], torch.Tensor) else self.device
        try:
            model = self.model(problem, seed, device)
            with self.stages("reference"), torch.no_grad(), _fp32_strict():
                out = model(*inputs)
        except ProblemError:
            raise
        except torch.OutOfMemoryError:
            raise  # the judge's share: reported as the harness's, with the stage, the plan and what was held
        except Exception as exc:
            raise ProblemError(f"{problem.path}: the reference failed: {_one_line(exc)}") from None
        # contiguous once, here: every comparison, digest and sample of it then reads it in place (a channels-last
        # 8 GiB output was copied again for each of them)
        return [o.detach().contiguous() if isinstance(o, torch.Tensor) else o for o in _as_list(out)]

    def load(self, attempt: Attempt, problem: Problem, cand: dict, model_seed: int, boot_timeout_s: float,
             gpu_fraction: float | None = None) -> None:
        info = self.boot(attempt, boot_timeout_s)
        info["pid"] = attempt.proc.runner_pid() or info.get("pid")  # its own pid is 1 in the sandbox
        attempt.proc.info = info
        self.model(problem, model_seed, attempt.device)  # built (usually already): says where candidates are built
        payload: dict[str, Any] = {"candidate": {k: cand.get(k) for k in ("source", "program_json", "backend", "name")},
                                   "init_args": list(problem.module.get_init_inputs()), "device": str(attempt.device),
                                   "init_on_cpu": problem.init_on_cpu, "gpu_fraction": gpu_fraction}
        payload["candidate"]["artifacts"] = dict(cand.get("artifacts") or {})
        attempt.is_program = cand.get("program_json") is not None
        if attempt.is_program:
            from dsl_compiler.ir import Program

            from dsl_compiler.runtime import module_paths

            try:
                attempt.program = Program.model_validate_json(cand["program_json"])
            except ValueError:
                attempt.program = None
            # `module` steps call the model's own submodules, which the candidate builds from the problem's
            # source (a program reaches nothing else of it: its steps name submodules by path, and no code
            # of the candidate's runs beside it)
            if attempt.program is not None and module_paths(attempt.program):
                payload["problem"] = {"source": problem.source, "path": problem.path}
        attempt.request("load", payload, timeout_s=2 * attempt.watchdog_s)  # the candidate's import runs here
        attempt.loaded = True

    def build(self, attempt: Attempt, problem: Problem, model_seed: int) -> int:
        """A new instance of the candidate. A program is handed the reference's parameters for this
        ``model_seed`` (each validation and profile draws its own seed, and one candidate process serves
        both; a program with ``module`` steps loads them into its own ``Model``); a ModelNew builds its own
        under the same seed."""
        attempt.instances += 1
        req: dict[str, Any] = {"instance": attempt.instances, "model_seed": model_seed}
        if attempt.is_program:
            ref = self.model(problem, model_seed, attempt.device)
            # through the arena; with the model's plain tensor attributes (an initial state drawn in __init__), which a
            # program binds by their path as it binds state_dict keys
            from dsl_compiler.runtime import plain_tensor_attributes

            held = {**plain_tensor_attributes(ref), **ref.state_dict()} if isinstance(ref, torch.nn.Module) \
                else ref.state_dict()
            req["state_dict"] = {k: v.detach().to(attempt.device) for k, v in held.items()}
        attempt.request("build", req)
        return attempt.instances

    def reference_flops(self, problem: Problem, model_seed: int, inputs: list) -> float:
        """The reference forward's FLOPs by the formulas the candidate's operators are counted with
        (``evals.judge.attribution.op_flops``), once per problem and input shapes."""
        key = (problem.path, problem.source_hash, tuple(tuple(x.shape) for x in inputs if isinstance(x, torch.Tensor)))
        if key not in self.ref_flops_cache:
            model = self.model(problem, model_seed, inputs[0].device if inputs and isinstance(inputs[0], torch.Tensor)
                               else self.device)
            with self.stages("attribution"), torch.no_grad(), OpRecorder() as recorder:
                model(*inputs)
            self.ref_flops_cache[key] = recorder.flops
            self.ref_products_cache[key] = recorder.products
        return self.ref_flops_cache[key]

    def reference_products(self, problem: Problem, model_seed: int, inputs: list) -> list[float]:
        """The FLOPs of each product operation of the reference forward (``reference_flops`` records them)."""
        self.reference_flops(problem, model_seed, inputs)
        key = (problem.path, problem.source_hash, tuple(tuple(x.shape) for x in inputs if isinstance(x, torch.Tensor)))
        return self.ref_products_cache.get(key, [])

    def timing_lock(self, device, settings: HarnessSettings, shared: bool = False, give_up=None) -> DeviceTimingLock:
        """The GPU's timing lock (``evals.locks.DeviceTimingLock``: exclusive for a measurement, shared for
        every other GPU work); off off a GPU or with a zero wait."""
        wait_s = float(settings.timing_lock_wait_s)
        key = device_key(device) if device.type == "cuda" and wait_s > 0 else None
        return DeviceTimingLock(key, shared=shared, wait_s=wait_s, give_up=give_up)

    def device_hold(self, device, settings: HarnessSettings) -> DeviceHold:
        """An operation's hold on the timing lock (``evals.locks.DeviceHold``), taken before its first GPU work."""
        return DeviceHold(lambda shared: self.timing_lock(device, settings, shared=shared))

    # -- operations ---------------------------------------------------------------------------
    def op_ping(self, req: dict) -> dict:
        self.apply(req.get("settings"))
        self.start_spares()
        return {"pid": os.getpid(), "cuda": self.cuda, "gpu_name": torch.cuda.get_device_name() if self.cuda else None,
                "torch": torch.__version__, "memory_allocated_bytes": torch.cuda.memory_allocated() if self.cuda else 0,
                "device_share_bytes": self.device_bytes}

    def _begin(self, attempt: Attempt, problem: Problem, device, bundle: Prepared, cand: dict) -> tuple[memory.MemoryPlan, int]:
        """The attempt's plan (its host limit set on the candidate's supervisor), the candidate loaded where it
        is not yet, and a new instance built."""
        plan = self.plan(problem, device, bundle)
        attempt.proc.set_memory_limit(plan.host_limit_bytes)
        total = torch.cuda.mem_get_info()[1] if device.type == "cuda" else 0
        if total and plan.judge_bytes:  # the split of this judge's share that the plan found for the problem
            torch.cuda.set_per_process_memory_fraction(memory.fraction(plan.judge_bytes, total))
        if not attempt.loaded:
            fraction = memory.fraction(plan.candidate_bytes, total) if total and plan.candidate_bytes else None
            self.load(attempt, problem, cand, bundle.model_seed, self.settings.startup_timeout_s, fraction)
        return plan, self.build(attempt, problem, bundle.model_seed)

    def _verdict(self, attempt: Attempt, verdict: dict | None) -> dict | None:
        """``verdict``, or a write into a protected folder (undone) where the candidate did not crash."""
        with self.stages("snapshot"):
            written = attempt.writes()
        if written is not None and (verdict is None or verdict["rule"] not in (verdicts.CRASH, verdicts.TIMEOUT)):
            return written
        return verdict

    def op_validate(self, req: dict) -> dict:
        problem = self.problem(req["problem"])
        settings = self.apply(req["settings"])
        device = self.device_for(settings)
        fixed = req.get("seed")
        n_sets = int(req.get("n_input_sets") or settings.n_input_sets)
        n_profile = settings.timing_input_sets + 3  # the profile's sets (op_profile)
        self.models.clear()
        self.stages.take()
        attempt = self.attempt_for(req["digest"], device, settings.watchdog_s, fresh=True)
        info: dict[str, Any] = {"device": str(device)}
        linger_s = settings.closing_linger_s
        # the GPU's timing lock, shared from the first set drawn: no other judge measures beside this work
        gpu_hold = self.device_hold(device, settings)
        v = None
        try:
            info["timing_lock"] = gpu_hold.shared().record()
            bundle = self.take(problem, device, "validate", n_sets, fixed)
            info["prepared_sets"] = bundle.ready
            plan, inst = self._begin(attempt, problem, device, bundle, req["candidate"])
            info["memory_plan"] = plan.as_dict()
            v = Validation(self, attempt, problem, device, settings, bundle, n_sets, inst, plan)
            try:
                v.run()
            finally:
                info.update(v.info)
            # the profile's sets are drawn while the linger runs (a rejected candidate gets no profile: at
            # most the linger's time is spent on them)
            t_linger_end = time.perf_counter() + linger_s
            prepare_profile = None if fixed is not None else (lambda: self.prepare(
                problem, device, "profile", n_profile, until=lambda: time.perf_counter() >= t_linger_end))
            with self.stages("end"):
                attempt.end_checks(linger_s=linger_s, during=prepare_profile)
            verdict = None
        except Finding as f:
            verdict = verdict_of(f)
        except BaseException:
            self.end_current()
            raise
        finally:
            gpu_hold.release()
        verdict = self._verdict(attempt, verdict)
        if verdict is not None:  # no profile reuses a rejected candidate's process: it ends now, not at the next attempt
            self.end_current()
        self.validate_sets = n_sets
        if fixed is None:
            self.next_up = (problem, device, n_sets, n_profile)
        if verdict is None and info.get("measured_precision"):
            from evals.judge.checks.precision import text

            verdict = {"rule": verdicts.PRECISION, "reason": verdicts.reason(verdicts.PRECISION, text(info, problem))}
        flags = work.validation_flags(info)
        self.models.clear()
        info.update(attempt.memory, judge_peak_device_bytes=self.peak.take())
        info["stages_peak_mb"] = self.stages.take_peaks()
        info["stages"] = self.stages.take()
        return {"sets": v.set_rows() if v is not None else [], "verdict": verdict, "flags": flags, "info": _plain(info),
                "device": str(device), "crashed": bool(verdict and verdict.get("died"))}

    def op_profile(self, req: dict) -> dict:
        problem = self.problem(req["problem"])
        settings = self.apply(req["settings"])
        device = self.device_for(settings)
        if device.type != "cuda" and not settings.cpu_timing:
            return {"timing_source": None, "reason": "no GPU in this process: no measured timing"}
        self.models.clear()
        self.stages.take()
        attempt = self.attempt_for(req["digest"], device, settings.watchdog_s, fresh=False)
        p = None
        k = settings.timing_input_sets
        gpu_hold = self.device_hold(device, settings)  # shared for the work, exclusive while the candidate is timed
        try:
            gpu_hold.shared()
            bundle = self.take(problem, device, "profile", k + 3)  # k timed, 2 re-run in the timed buffers, 1 counted
            plan, inst = self._begin(attempt, problem, device, bundle, req["candidate"])
            k = plan.timing_sets
            p = Profile(self, attempt, problem, device, settings, bundle, k, inst, gpu_hold)
            p.run()
            with self.stages("end"):
                attempt.end_checks()
            verdict = None
        except Finding as f:
            verdict = verdict_of(f)
        except BaseException:
            self.end_current()
            raise
        finally:
            gpu_hold.release()
        verdict = self._verdict(attempt, verdict)
        self.end_current()  # the attempt is over: its process ends (the spare is already starting)
        self.next_up = (problem, device, self.validate_sets, k + 3)
        res = p.res if p is not None else {}
        flags = work.profile_flags(p, req["candidate"]) if p is not None and verdict is None else []
        keep = ("median_us", "mean_us", "min_us", "spread_pct", "trials", "method", "capture_error", "timed_s",
                "wall_bound_us", "warmup_calls", "request_s", "calls_per_trial", "warmup_s", "sealed", "timing_lock")
        out = {k2: res.get(k2) for k2 in keep}
        self.models.clear()
        out.update(timing_source="gpu" if device.type == "cuda" else "cpu", verdict=verdict, flags=flags,
                   work=_plain(p.work if p is not None and verdict is None else {}),
                   crashed=bool(verdict and verdict.get("died")), stages=self.stages.take(),
                   memory={**attempt.memory, "judge_peak_device_bytes": self.peak.take()})
        return out

    def op_end_attempt(self, req: dict) -> dict:
        self.end_current()
        return {}

    def op_reference_timings(self, req: dict) -> dict:
        problem = self.problem(req["problem"])
        settings = self.apply(req["settings"])
        device = self.device_for(settings)
        if device.type != "cuda":
            return {"timing_source": None, "reason": "no GPU in this process: reference timings need one"}
        with self.device_hold(device, settings) as gpu_hold:
            gpu_hold.shared()
            return self._reference_timings(problem, settings, device, gpu_hold)

    def _reference_timings(self, problem: Problem, settings: HarnessSettings, device, gpu_hold: DeviceHold) -> dict:
        bundle = self.take(problem, device, "reference", 1)  # its plan says how many sets fit beside the graphs
        n_sets = self.plans[self.problem_key(problem, device)].timing_sets
        model = bundle.model
        input_sets = [x for _, x, _ in bundle.sets] + [self.inputs(problem, [_seed()], device)[0]
                                                       for _ in range(n_sets - len(bundle.sets))]
        del bundle
        method = TimingMethod.from_settings(settings.timing_view())
        self.flusher = make_flusher(device, method, self.flusher)
        out: dict[str, Any] = {"timing_source": "gpu"}
        compiled = None
        if settings.compile_reference:
            # compiling is minutes of CPU and a little GPU work, not a measurement: judges sharing the GPU
            # compile and validate side by side (the shared hold), and only the timings below hold it alone
            compiled = self.compile_reference(model, input_sets[0], out)
        lock = gpu_hold.exclusive()
        self.reference_timings(model, compiled, input_sets, method, out)
        out["timing_lock"] = lock.record()
        gpu_hold.shared()
        if compiled is not None:
            del compiled
            torch._dynamo.reset()
        return out

    @staticmethod
    def compile_reference(model, x0: list, out: dict):
        """``torch.compile(model)`` after its first call (TF32 allowed, as it is timed), or None with the reason
        in ``out``: a model torch.compile cannot handle still has eager timings."""
        try:
            with torch.no_grad(), tf32_mode(matmul=True, cudnn=True):
                compiled = torch.compile(model)
                t0 = time.perf_counter()
                compiled(*x0)
                torch.cuda.synchronize()
            out["compile_s"] = time.perf_counter() - t0
            return compiled
        except Exception as exc:
            _compile_failed(out, exc)
            torch._dynamo.reset()
            return None

    def reference_timings(self, model, compiled, input_sets: list, method, out: dict) -> None:
        """Eager fp32, eager TF32 and (when ``compiled`` is given) torch.compile timings of the reference
        model, into ``out``."""
        timed_s = 0.0

        def timed(fn, name: str):
            r = time_candidate(fn, input_sets, self.flusher, method)
            r.pop("graphs"), r.pop("last_outputs")
            out.setdefault("calls_per_trial", {})[name] = r["calls_per_trial"]
            return r

        with torch.no_grad():
            with tf32_mode(matmul=False, cudnn=True):  # PyTorch's defaults: what "eager" means in KernelBench
                s = timed(model, "eager_fp32")
            out["eager_fp32_us"], out["eager_fp32_spread_pct"], out["method"] = s["median_us"], s["spread_pct"], s["method"]
            timed_s += s["timed_s"]
            with tf32_mode(matmul=True, cudnn=True):
                s = timed(model, "eager_tf32")
                out["eager_tf32_us"], out["eager_tf32_spread_pct"] = s["median_us"], s["spread_pct"]
                timed_s += s["timed_s"]
                if compiled is not None:
                    try:
                        s = timed(compiled, "compile")
                        out["compile_us"], out["compile_spread_pct"] = s["median_us"], s["spread_pct"]
                        timed_s += s["timed_s"]
                    except Exception as exc:  # a recompile that fails on another input set
                        _compile_failed(out, exc)
        out["timed_s"] = timed_s

    def op_memory(self, req: dict) -> dict:
        return _memory(self.device)


def _plain(x):
    """JSON-able: floats (NaN/inf as None), ints, strings, lists, dicts."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    return x


def _memory(device) -> dict:
    out = {"memory_allocated_bytes": 0, "memory_reserved_bytes": 0, "worker_rss_bytes": _rss_bytes()}
    if device.type == "cuda":
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        out["memory_allocated_bytes"] = torch.cuda.memory_allocated()
        out["memory_reserved_bytes"] = torch.cuda.memory_reserved()
    return out


def _host_peak_bytes(reset: bool = False) -> int:
    """This process's peak resident memory since the last reset (VmHWM); ``reset`` starts the next peak from now."""
    try:
        with open("/proc/self/status") as f:
            kb = next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), 0)
        if reset:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        return kb << 10
    except (OSError, ValueError, IndexError):
        return 0


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


# ---------------------------------------------------------------------------------------------
# main loop


def _request_waiting(stream) -> bool:
    """Whether the harness has sent the next request (the judge's idle work stops for it)."""
    try:
        return bool(select.select([stream], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def _largest_tensors(device, n: int = 6) -> str:
    """The largest tensors alive on ``device`` (their storages once each), for an out-of-memory reason."""
    import warnings

    seen: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # isinstance on a deprecated module attribute warns
        for o in gc.get_objects():
            try:
                if isinstance(o, torch.Tensor) and o.device.type == device.type:
                    st = o.untyped_storage()
                    if st.nbytes() >= 1 << 26:
                        seen[st.data_ptr()] = (st.nbytes(), f"{str(o.dtype).removeprefix('torch.')}{list(o.shape)}")
            except Exception:  # noqa: BLE001 - a diagnostic: whatever cannot be read is left out
                continue
    top = sorted(seen.values(), reverse=True)
    more = f" and {len(top) - n} more" if len(top) > n else ""
    return ", ".join(f"{b / 2**30:.2f} GiB {what}" for b, what in top[:n]) + more or "none over 64 MiB"


class PeakMeter:
    """The judge's own allocator's peak: per stage (``since_mark``, for Stages) and per operation (``take``),
    from one reset counter."""

    def __init__(self, cuda: bool) -> None:
        self.cuda, self.op_peak = cuda, 0

    def since_mark(self) -> int:
        if self.cuda:
            peak = int(torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()
        else:  # on the CPU every tensor is resident memory: its high-water mark, reset through clear_refs
            peak = _host_peak_bytes(reset=True)
        self.op_peak = max(self.op_peak, peak)
        return peak

    def during(self, fn):
        """``fn()``'s result and the peak while it ran (the stages it enters reset the counter: their peaks are
        gathered here), the operation's peak kept."""
        kept, self.op_peak = max(self.op_peak, self.since_mark()), 0
        try:
            out = fn()
            peak = max(self.op_peak, self.since_mark())
        finally:
            self.op_peak = max(kept, self.op_peak)
        return out, peak

    def take(self) -> int:
        """The peak since the last ``take`` (then reset for the next operation)."""
        peak = max(self.op_peak, self.since_mark())
        self.op_peak = 0
        return peak


def release_memory(cuda: bool) -> None:
    """After every operation, failed ones too: what it dropped goes back to the device, so judges sharing the GPU
    (and the next problem) find it free."""
    if cuda:
        gc.collect()
        torch.cuda.empty_cache()


def _undumpable() -> None:
    """Other processes of this user (a candidate) cannot read this one's memory through /proc/<pid>/mem
    or attach to it: the expected outputs and the seeds live here."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def main() -> int:
    _undumpable()
    try:  # orphans of a candidate whose supervisor died come back here, where sweep_orphans ends them
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER = 36
    except (OSError, AttributeError):
        pass
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    judge = Judge()
    judge.fork_server()  # its torch import overlaps this process's wait for the first request
    gc.freeze()
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                req = json.loads(line)
            except json.JSONDecodeError as exc:
                proto.write(json.dumps({"id": None, "ok": False, "error": f"bad request: {exc}"}) + "\n")
                continue
            op = req.get("op", "")
            handler = getattr(judge, f"op_{op}", None)
            try:
                if handler is None:
                    raise ProblemError(f"unknown operation {op!r}")
                reply = {"id": req.get("id"), "ok": True, "result": handler(req)}
            except ProblemError as exc:
                reply = {"id": req.get("id"), "ok": False, "error": str(exc), "kind": "input"}
            except HarnessError as exc:  # never a verdict on the candidate: the attempt fails with the reason
                reply = {"id": req.get("id"), "ok": False, "error": f"harness: {exc}", "kind": "harness"}
            except torch.OutOfMemoryError as exc:  # the judge's own share was too small: the harness's failure
                where = judge.out_of_memory_at(exc)
                judge.end_current()
                reply = {"id": req.get("id"), "ok": False, "kind": "harness",
                         "error": f"harness: the judge ran out of its GPU memory share {where}: {_one_line(exc)[:500]}"}
            except Exception as exc:  # noqa: BLE001 - a judge bug must not look like a verdict
                traceback.print_exc(file=sys.stderr)
                reply = {"id": req.get("id"), "ok": False, "error": f"the judge failed: {_one_line(exc)}", "kind": "judge"}
            if reply.get("ok") and isinstance(reply.get("result"), dict) and op in ("validate", "profile"):
                reply["result"].update(_memory(judge.device))
            proto.write(json.dumps(_plain(reply), default=str, allow_nan=False) + "\n")
            proto.flush()
            release_memory(judge.cuda)
            judge.idle(lambda: _request_waiting(sys.stdin))
    finally:
        judge.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
