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
import random
import re
import select
import sys
import threading
import time
import traceback
from contextlib import ExitStack, contextmanager
from typing import Any

import torch

from evals.judge import wire, probes, sealed, verdicts
from evals.locks import DeviceTimingLock, device_key
from evals.judge.attribution import OpRecorder, WorkSplit, pytorch_only_reason, split_kernel_time, work_share
from evals.problems import Problem, ProblemError
from evals.judge.sandbox import CandidateProcess, ProtectedTree, sandbox_refused
from evals.judge.timing import TimingMethod, make_flusher, time_candidate

NAN_POISON = float("nan")
# input sets and reference outputs prepared ahead of need hold at most this much memory (per kind of operation)
PREPARED_MAX_BYTES = {"cuda": 4 << 30, "cpu": 1 << 30}
WALL_TARGET_US = 20_000.0  # the back-to-back wall request spans about this much of the candidate's reported time
WALL_REPEATS = 3  # back-to-back wall requests at most before a GPU time is flagged as under the judge's clock
VALUE_POISON = 1.0e4
# Guarded names (evals.judge.candidate) that only measure the work: replaced, the attribution cannot stand.
ATTRIBUTION_NAMES = ("torch.utils.flop_counter.", "torch.profiler.", "torch.utils._python_dispatch.")


class Finding(Exception):
    """A rule broken by the candidate; ends the attempt's checks."""

    def __init__(self, rule: str, text: str, died: bool = False):
        super().__init__(text)
        self.rule = rule
        self.text = text
        self.died = died  # the candidate process died or hung (not merely raised)


def _seed() -> int:
    return int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF


def _as_list(x) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _device_key(device) -> str:
    """One spelling per device for the judge's caches (reference models, prepared sets, sealed K). The judge's
    device is ``cuda`` while its tensors report ``cuda:0``: keyed by ``str(device)`` the references of a set
    (looked up by the inputs' device) missed the prepared model and built a second one, and a Model whose
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


class Stages:
    """Where the judge's time goes in one operation (seconds per stage), for the overhead breakdown.
    Stages nest: an inner stage's time is not counted in the outer one."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._stack: list[list] = []  # [name, started, inner seconds]

    @contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        self._stack.append([name, t0, 0.0])
        try:
            yield
        finally:
            _, _, inner = self._stack.pop()
            total = time.perf_counter() - t0
            self.add(name, max(0.0, total - inner))
            if self._stack:
                self._stack[-1][2] += total

    def add(self, name: str, seconds: float) -> None:
        """``seconds`` more in ``name`` (negative: moved out of it, as the measurement out of `candidate`)."""
        self.seconds[name] = max(0.0, self.seconds.get(name, 0.0) + seconds)
        if seconds > 0.0 and self._stack:  # spent inside an open stage (a request in `end`): not twice
            self._stack[-1][2] += seconds

    def take(self) -> dict[str, float]:
        out, self.seconds = self.seconds, {}
        return {k: round(v, 4) for k, v in out.items()}


class Prepared:
    """Input sets and their reference outputs under one model seed, drawn before the operation that uses
    them (while a closing linger runs, or while the judge waits for its next request) from the same
    ``os.urandom`` seeds, kept in this process only, and used by one operation: every validation and
    profile still gets sets no earlier one saw."""

    def __init__(self, model_seed: int, model) -> None:
        self.model_seed, self.model = model_seed, model
        self.sets: list[tuple[int, list, list]] = []  # (seed, inputs, reference outputs)
        self.shuffled: tuple[list, list] | None = None  # set 1's values reordered, and their reference
        self.sealed: list[tuple[int, list, list]] = []  # a profile's: sets for its sealed calls (evals.judge.sealed)
        self.ready = 0  # of the sets an operation took, how many were drawn before it

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for _, x, r in (*self.sets, *self.sealed) for t in (*x, *r)
                   if isinstance(t, torch.Tensor))

    def room_for_one(self, cap_bytes: int) -> bool:
        """Whether one more set of the size of those held stays under ``cap_bytes``."""
        n = len(self.sets) + len(self.sealed)
        return n == 0 or self.nbytes() * (n + 1) / n <= cap_bytes


class Attempt:
    """One candidate in one candidate process, seen from the judge."""

    def __init__(self, judge: "Judge", proc: CandidateProcess, digest: str, device: torch.device, watchdog_s: float):
        self.judge, self.proc, self.digest, self.device, self.watchdog_s = judge, proc, digest, device, watchdog_s
        proc.device = str(device)  # the reply's tensors land where the judge compares them
        self.loaded = False
        self.is_program = False
        # In the sandbox the candidate can write nothing protected, and writes seen meanwhile are another
        # process's: no snapshot. Elsewhere every write seen during the attempt is blamed on it.
        self.snapshot = None
        if not proc.sandboxed:
            with judge.stages("snapshot"):
                self.snapshot = judge.snapshot_now()
        self.instances = 0
        self.work: dict | None = None  # what the last counted call recorded
        self.program = None  # a μCUTLASS candidate's IR

    def request(self, op: str, payload: dict, timeout_s: float | None = None, during=None) -> dict:
        """The candidate's checked reply. ``during``: the judge's own work, done while the candidate
        answers (never around a request whose time is judged: the timing, the wall clock, sealed go)."""
        t0 = time.perf_counter()
        try:
            if during is None:
                reply = self.proc.request(op, payload, timeout_s or self.watchdog_s)
                self._account(op, reply, time.perf_counter() - t0)
            else:
                self.proc.send(op, payload)
                t1 = time.perf_counter()
                try:
                    during()
                finally:  # the reply is read whatever happened, so the next request meets no stale one
                    during_s = time.perf_counter() - t1
                    reply = self.proc.receive(timeout_s or self.watchdog_s)
                self._account(op, reply, time.perf_counter() - t0 - during_s, hidden_s=during_s)
        except wire.ChannelError as exc:
            if exc.rule in ("crash", "timeout"):
                state = self.proc.supervisor_report(timeout_s=2.0) or {}
                if state.get("memory_limit_hit"):
                    raise Finding(verdicts.CONTAINMENT, "the candidate's processes passed the memory limit and were killed") from None
                _stopped_finding(state)
            raise Finding(exc.rule, exc.text, died=exc.rule in (verdicts.CRASH, verdicts.TIMEOUT)) from None
        if self.proc.supervisor_stopped():
            _stopped_finding({"supervisor_stopped": True})
        tampered = reply.get("tampered") or (reply.get("result") or {}).get("tampered") or []
        if tampered:
            if all(str(name).startswith(ATTRIBUTION_NAMES) for name in tampered):
                raise Finding(verdicts.PYTORCH_ONLY, f"the candidate replaced {', '.join(tampered)}, which the harness "
                              f"counts its work with: its work cannot be attributed")
            raise Finding(verdicts.TIMING_TAMPERED,
                          f"the candidate replaced {', '.join(tampered)}, which the harness times and checks with")
        if not reply.get("ok"):
            kind = reply.get("kind")
            text = reply.get("error", "the candidate failed")
            if kind == "cuda":
                self.proc.finish()
                raise Finding(verdicts.CRASH, f"a fatal CUDA error ({text}); the candidate process was ended", died=True)
            raise Finding(verdicts.CRASH, f"the candidate raised {text}" if kind == "exception" else text)
        result = reply.get("result") or {}
        changed = result.get("framework") or []
        if changed:
            raise Finding(verdicts.FRAMEWORK_STATE,
                          f"the candidate changed framework settings the harness set: {'; '.join(changed[:3])}")
        return result

    def _account(self, op: str, reply: dict, total_s: float, hidden_s: float = 0.0) -> None:
        """The request's time split into the candidate process's work (its handler, as it reports it:
        a claim, used for the breakdown only) and the transfer around it. ``hidden_s``: the judge's own
        work done meanwhile (counted in its own stage), which hid as much of the handler."""
        handler_s = reply.get("handler_s") if isinstance(reply, dict) else None
        handler_s = float(handler_s) if isinstance(handler_s, (int, float)) and math.isfinite(handler_s) else 0.0
        handler_s = min(max(handler_s - hidden_s, 0.0), max(total_s, 0.0))
        stage = "process_start" if op == "ping" and not self.loaded else "candidate"
        self.judge.stages.add(stage, handler_s if stage == "candidate" else total_s)
        if stage == "candidate":
            self.judge.stages.add("transfer", total_s - handler_s)

    def end_checks(self, linger_s: float = 0.0, during=None) -> None:
        """After the attempt's last call: the process must still answer, ``linger_s`` after it (one that
        exits right after answering is a crash), no process may have left its session, nothing protected
        was written. ``during``: the judge's own work, done while the linger runs."""
        self.request("ping", {"linger_s": linger_s} if linger_s > 0 else {}, timeout_s=10.0 + linger_s, during=during)
        state = self.proc.supervisor_report() or {}
        _stopped_finding(state)
        if state.get("escaped"):
            raise Finding(verdicts.CONTAINMENT, f"{state['escaped']} process(es) left the candidate's session or "
                          f"were detached from it (a daemon); they were killed")
        if state.get("memory_limit_hit"):
            raise Finding(verdicts.CONTAINMENT, "the candidate's processes passed the memory limit")

    def writes(self) -> dict | None:
        """Writes into the protected folders since the attempt began: undone, and the verdict."""
        if self.snapshot is None:  # the sandbox refused them
            return None
        changed = self.judge.tree.written(self.snapshot)
        if not changed:
            return None
        self.proc.finish()  # nothing of it may keep writing
        self.judge.tree.undo(self.snapshot, changed)
        text = (f"wrote into a protected folder (undone): {', '.join(changed[:3])}"
                + (f" and {len(changed) - 3} more" if len(changed) > 3 else ""))
        return {"rule": verdicts.CONTAINMENT, "reason": verdicts.reason(verdicts.CONTAINMENT, text), "died": False}


def _stopped_finding(state: dict) -> None:
    """A supervisor (or a process of the candidate's tree) stopped by a signal: the watcher was disabled."""
    if state.get("supervisor_stopped") or state.get("stopped") or state.get("reason") == "stopped":
        who = "its supervisor" if state.get("supervisor_stopped") else "a process of its tree"
        raise Finding(verdicts.CONTAINMENT, f"the candidate stopped {who} (SIGSTOP); its processes were killed",
                      died=True)


class Judge:
    def __init__(self) -> None:
        self.problems: dict[str, Problem] = {}
        self.cuda = torch.cuda.is_available()
        self.device = torch.device("cuda") if self.cuda else torch.device("cpu")
        self.flusher = None
        self.settings: dict = {}
        self.spares: list[CandidateProcess] = []  # started ahead of need, oldest first
        self.current: Attempt | None = None
        self.tree = ProtectedTree()
        self.ref_flops_cache: dict[tuple, int] = {}
        self.stages = Stages()
        self.models: dict[tuple, Any] = {}  # this operation's reference models, by (problem, seed, device)
        self.ending: list = []  # threads awaiting the exit of ended candidate processes
        self.prepared: dict[tuple, Prepared] = {}  # by (problem, device, "validate" | "profile")
        self.next_up: tuple | None = None  # (problem, device, validation sets, profile sets): prepared when idle
        self.validate_sets = 5  # the last validation's number of input sets
        self.sealed_k: dict[tuple, int] = {}  # the last profile's sealed calls per (problem, device): K sets to prepare
        self.sealed_floor_us: dict[tuple, float] = {}  # the sealed passes' measured floor per ((problem, device), K)

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
        want = int(self.settings.get("spare_processes") or (3 if self.cuda else 1))
        rss = int(float(self.settings.get("memory_limit_gb", 0) or 0) * 1024**3)
        while len(self.spares) < want:
            self.spares.append(CandidateProcess.start(sys.executable, rss_limit_bytes=rss))

    def snapshot_now(self) -> dict:
        return self.tree.snapshot()

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

    # -- setup ------------------------------------------------------------------------------
    def problem(self, spec: dict) -> Problem:
        key = hashlib.sha256((spec["path"] + "\0" + spec["source"]).encode()).hexdigest()
        if key not in self.problems:
            self.problems[key] = Problem.from_spec(spec)
        p = self.problems[key]
        p.tolerance, p.allowed_precisions = float(spec["tolerance"]), tuple(spec["allowed_precisions"])
        return p

    def device_for(self, settings: dict) -> torch.device:
        if settings.get("device", "auto") == "cpu" or not self.cuda:
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

    # -- input sets prepared ahead of need ------------------------------------------------------
    def _prepared_key(self, problem: Problem, device, purpose: str) -> tuple:
        return (problem.path, problem.source_hash, _device_key(device), purpose)

    def _use_model(self, problem: Problem, b: Prepared, device) -> None:
        self.models[(problem.path, problem.source_hash, b.model_seed, _device_key(device))] = b.model

    def prepare(self, problem: Problem, device, purpose: str, n_sets: int, until=None) -> None:
        """Top up the prepared sets for the next ``purpose`` ("validate", "profile") on ``problem`` to
        ``n_sets`` (a validation's also its reordered set), stopping early once ``until()`` is true or the
        sets would pass ``PREPARED_MAX_BYTES``."""
        key = self._prepared_key(problem, device, purpose)
        for other in [k for k in self.prepared if k[:3] != key[:3]]:  # another problem's: not needed next
            del self.prepared[other]
        stop = until or (lambda: False)
        b = self.prepared.get(key)
        if b is None:
            if stop():
                return
            b = self.prepared[key] = self._new_prepared(problem, _seed(), device)
        self._use_model(problem, b, device)
        cap = PREPARED_MAX_BYTES.get(torch.device(device).type, PREPARED_MAX_BYTES["cpu"])
        while len(b.sets) < n_sets:
            if stop() or not b.room_for_one(cap):
                return
            b.sets.append(self._new_set(problem, b, _seed(), device))
        if purpose == "validate" and b.shuffled is None and not stop():
            self._add_shuffled(problem, b)
        # a profile's sealed calls: as many sets as the last profile of this problem staged (its K)
        while purpose == "profile" and b.sets and len(b.sealed) < self.sealed_k.get(key[:3], 0):
            if stop() or not b.room_for_one(cap):
                return
            b.sealed.append(self._new_set(problem, b, _seed(), device))

    def take(self, problem: Problem, device, purpose: str, n_sets: int, fixed: int | None = None) -> Prepared:
        """The sets for this operation: the prepared ones (removed: never used twice), completed to
        ``n_sets``; with a ``fixed`` seed, the ones it determines."""
        b = None if fixed is not None else self.prepared.pop(self._prepared_key(problem, device, purpose), None)
        if b is None:
            b = self._new_prepared(problem, fixed if fixed is not None else _seed(), device)
        self._use_model(problem, b, device)
        b.sets = b.sets[:n_sets]
        b.ready = len(b.sets)
        while len(b.sets) < n_sets:
            b.sets.append(self._new_set(problem, b, fixed + 1_000_003 * len(b.sets) if fixed is not None else _seed(), device))
        return b

    def _new_prepared(self, problem: Problem, model_seed: int, device) -> Prepared:
        with self.stages("reference"):
            return Prepared(model_seed, problem.make_model(model_seed, device))

    def _new_set(self, problem: Problem, b: Prepared, seed: int, device) -> tuple[int, list, list]:
        x = self.inputs(problem, [seed], device)[0]
        return seed, x, self.reference(problem, b.model_seed, x)

    def _add_shuffled(self, problem: Problem, b: Prepared) -> None:
        """Set 1's values in another order (first and last kept) and their reference."""
        with self.stages("reference"):
            shuffled = _interior_permutation(b.sets[0][1])
        b.shuffled = (shuffled, self.reference(problem, b.model_seed, shuffled) if shuffled is not None else None)

    def idle(self, busy) -> None:
        """While no request waits (``busy()`` false): the next validation's and profile's sets for the
        problem last judged."""
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
        try:
            self.prepare(problem, device, "validate", n_validate, until=busy)
            if device.type == "cuda" or self.settings.get("cpu_timing"):
                self.prepare(problem, device, "profile", n_profile, until=busy)
        except Exception:  # noqa: BLE001 - the operation itself will meet (and report) the problem's failure
            self.prepared.clear()
        finally:
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
        except Exception as exc:
            raise ProblemError(f"{problem.path}: the reference failed: {_one_line(exc)}") from None
        return [o.detach() if isinstance(o, torch.Tensor) else o for o in _as_list(out)]

    def load(self, attempt: Attempt, problem: Problem, cand: dict, model_seed: int, boot_timeout_s: float) -> None:
        info = self.boot(attempt, boot_timeout_s)
        info["pid"] = attempt.proc.runner_pid() or info.get("pid")  # its own pid is 1 in the sandbox
        attempt.proc.info = info
        self.model(problem, model_seed, attempt.device)  # built (usually already): says where candidates are built
        payload: dict[str, Any] = {"candidate": {k: cand.get(k) for k in ("source", "program_json", "backend", "name")},
                                   "init_args": list(problem.module.get_init_inputs()), "device": str(attempt.device),
                                   "init_on_cpu": problem.init_on_cpu}
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
            req["state_dict"] = {k: v.detach() for k, v in ref.state_dict().items()}  # copied into the arena
        attempt.request("build", req)
        return attempt.instances

    # -- one call, judged -----------------------------------------------------------------------
    def call(self, attempt: Attempt, instance: int, inputs: list, refs: list, tol: float, *, poison=None,
             keep: str | None = None, inplace: str | None = None, count: dict | None = None) -> tuple[list, dict]:
        """The candidate's outputs for ``inputs`` (checked: types, inputs unchanged) and the
        comparison with ``refs``: ``{"correct", "max_abs_error", "max_rel_error", "rule", "text"}``.
        With ``count`` the call's work is recorded as well (``attempt.work``): the operators it dispatched
        and the CPU time the candidate's other processes spent meanwhile."""
        out_nbytes = [r.nbytes for r in refs if isinstance(r, torch.Tensor)]
        runner_pid = (getattr(attempt.proc, "info", None) or {}).get("pid") if count else None
        others_before = sealed.tree_cpu_s(runner_pid) if runner_pid else None
        res = attempt.request("call", {"instance": instance, "inputs": list(inputs), "poison": poison,
                                       "keep": keep, "inplace": inplace, "out_nbytes": out_nbytes, "count": count})
        if count:
            others_after = sealed.tree_cpu_s(runner_pid) if runner_pid else None
            attempt.work = dict(res.get("work") or {"error": "the counted call reported no work"})
            attempt.work["other_processes_cpu_s"] = (others_after or 0.0) - (others_before or 0.0)
        with self.stages("compare"):
            outs = self.check_outputs(res.get("outputs"), res.get("output_problems"), res.get("n_outputs"), refs)
            after = res.get("inputs_after") or []
            for i, x in enumerate(inputs):
                if isinstance(x, torch.Tensor):
                    y = after[i] if i < len(after) else None
                    if not isinstance(y, torch.Tensor) or y.shape != x.shape or y.dtype != x.dtype or \
                            not torch.equal(y.to(x.device), x.detach()):
                        raise Finding(verdicts.INPUTS_MUTATED, f"input {i} differs from the judge's copy after the "
                                      f"call: inputs are read-only")
            return outs, compare(outs, refs, tol)

    def check_outputs(self, outs, problems, n_outputs, refs) -> list:
        if n_outputs != len(refs) or not isinstance(outs, list):
            raise Finding(verdicts.OUTPUT_TYPE, f"returns {n_outputs} output(s), the reference returns {len(refs)}")
        for i, text in enumerate(problems or []):
            if text:
                raise Finding(verdicts.OUTPUT_TYPE, text)
        for i, (o, r) in enumerate(zip(outs, refs)):
            if type(o) is not torch.Tensor:
                raise Finding(verdicts.OUTPUT_TYPE, f"output {i} is not a plain tensor ({type(o).__name__})")
            if o.dtype != r.dtype:
                raise Finding(verdicts.OUTPUT_TYPE, f"output {i} has dtype {o.dtype}, expected {r.dtype}")
            if tuple(o.shape) != tuple(r.shape):
                raise Finding(verdicts.OUTPUT_TYPE, f"output {i} has shape {list(o.shape)}, expected {list(r.shape)}")
        return outs

    # -- operations ---------------------------------------------------------------------------
    def op_ping(self, req: dict) -> dict:
        self.settings = req.get("settings") or self.settings
        self.start_spares()
        return {"pid": os.getpid(), "cuda": self.cuda, "gpu_name": torch.cuda.get_device_name() if self.cuda else None,
                "torch": torch.__version__, "memory_allocated_bytes": torch.cuda.memory_allocated() if self.cuda else 0}

    def op_validate(self, req: dict) -> dict:
        problem = self.problem(req["problem"])
        settings = self.settings = req["settings"]
        device = self.device_for(settings)
        tol = problem.tolerance
        cand = req["candidate"]
        fixed = req.get("seed")
        n_sets = int(req.get("n_input_sets", 5))
        n_profile = int(settings.get("timing_input_sets", 3)) + 3  # the profile's sets (op_profile)
        self.models.clear()
        self.stages.take()
        attempt = self.attempt_for(req["digest"], device, float(settings.get("watchdog_s", 120)), fresh=True)
        sets: list[dict] = []
        info: dict[str, Any] = {"device": str(device)}
        linger_s = float(settings.get("closing_linger_s", 0.25))
        gpu_hold = ExitStack()  # the GPU's timing lock, shared: no other judge measures beside these calls
        try:
            bundle = self.take(problem, device, "validate", n_sets, fixed)
            model_seed = bundle.model_seed
            seeds = [seed for seed, _, _ in bundle.sets]
            ref_inputs = [x for _, x, _ in bundle.sets]
            refs = [r for _, _, r in bundle.sets]
            info["prepared_sets"] = bundle.ready
            self.load(attempt, problem, cand, model_seed, float(settings.get("startup_timeout_s", 300)))
            inst = self.build(attempt, problem, model_seed)
            info["timing_lock"] = gpu_hold.enter_context(self.timing_lock(device, settings, shared=True)).record()
            outs = []
            counted = len(seeds) - 1  # the work is recorded on a set the candidate has not seen, and compared
            for i, (seed, inputs, ref) in enumerate(zip(seeds, ref_inputs, refs)):
                o, cmp = self.call(attempt, inst, inputs, ref, tol, poison=NAN_POISON if i == 0 else None, keep=f"set{i}",
                                   count={"kernels": False} if i == counted else None)
                outs.append(o)
                sets.append({"seed": seed, **{k: cmp[k] for k in ("correct", "max_abs_error", "max_rel_error")},
                             "reason": cmp["text"], "rule": cmp["rule"]})
            # Output must follow the input: the same output for different inputs (the reference's differ).
            with self.stages("compare"):
                for i in range(1, len(outs)):
                    if _same(outs[0], outs[i]) and not _close(refs[0], refs[i], tol):
                        raise Finding(verdicts.INPUT_INDEPENDENT, f"input sets 1 and {i + 1} give the same output (the "
                                      f"reference's differ): the result does not follow the input")
            # Repeated call on the same instance, other poison: every element must be written, and right.
            again, cmp_again = self.call(attempt, inst, ref_inputs[0], refs[0], tol, poison=VALUE_POISON)
            with self.stages("compare"):
                if not _same_or_both_nan(outs[0], again) and not _close(outs[0], again, tol):
                    raise Finding(verdicts.MISMATCH, "a repeated call on the same inputs differs from the first: part "
                                  "of the output depends on memory's previous contents (never written) or on earlier calls")
            bad = next((s for s in sets if not s["correct"]), None)
            if bad is not None:
                k = sets.index(bad)
                if _same(outs[k], outs[k - 1] if k else outs[-1]) and len(outs) > 1:
                    raise Finding(verdicts.INPUT_INDEPENDENT, f"input set {k + 1}: the output did not change with the input")
                if bad["rule"] in (verdicts.MISMATCH, verdicts.NONFINITE):  # a lower precision explains them better
                    measured = self.measure_precision(attempt, inst, problem, model_seed, [ref_inputs[k]], [refs[k]],
                                                      [(f"input set {k + 1}", 0, outs[k])])
                    if measured.get("measured_precision"):
                        info.update(measured)
                        raise Finding(verdicts.PRECISION, _precision_text(info, problem))
                raise Finding(bad["rule"], f"input set {k + 1}: {bad['reason']}")
            if not cmp_again["correct"]:
                raise Finding(cmp_again["rule"], f"repeated call on input set 1: {cmp_again['text']}")
            # New values in the same buffers (a cache keyed by address sees no change).
            inplace_out = None
            if len(ref_inputs) > 1:
                inplace_out, cmp = self.call(attempt, inst, ref_inputs[1], refs[1], tol, inplace="set0")
                if not cmp["correct"]:
                    rule = verdicts.INPUT_INDEPENDENT if sets[1]["correct"] else cmp["rule"]
                    raise Finding(rule, "wrong after new values were written into the same input buffers"
                                  + (" (right on fresh tensors): the result is cached by address" if sets[1]["correct"]
                                     else f": {cmp['text']}"))
            # The same values in another order (first and last element, sum and shape unchanged): a cache
            # keyed by a cheap digest of the content answers stale.
            if bundle.shuffled is None:
                self._add_shuffled(problem, bundle)
            shuffled, ref_sh = bundle.shuffled
            if shuffled is not None:
                with self.stages("compare"):
                    differs = not _close(ref_sh, refs[0], tol)
                if differs:
                    _, cmp = self.call(attempt, inst, shuffled, ref_sh, tol)
                    if not cmp["correct"]:
                        raise Finding(verdicts.INPUT_INDEPENDENT, "wrong on input set 1 with its values reordered (first "
                                      "and last values, sum and shape kept): the result is cached by a digest of the "
                                      f"content; {cmp['text']}")
            # Precision, measured on every output read (each against its own set's signatures), then f16's range.
            judged = [(f"input set {i + 1}", i, o) for i, o in enumerate(outs)]
            judged += [("the repeated call on input set 1", 0, again)]
            judged += [("new values in the same buffers (input set 2)", 1, inplace_out)] if inplace_out is not None else []
            info.update(self.measure_precision(attempt, inst, problem, model_seed, ref_inputs, refs, judged))
            # Work attribution: the share of the problem's FLOPs the candidate did outside ATen (the counted call).
            info.update(self.attribution(attempt, problem, model_seed, ref_inputs[counted]))
            # the profile's sets are drawn while the linger runs (a rejected candidate gets no profile: at
            # most the linger's time is spent on them)
            t_linger_end = time.perf_counter() + linger_s
            prepare_profile = None if fixed is not None else (lambda: self.prepare(
                problem, device, "profile", n_profile, until=lambda: time.perf_counter() >= t_linger_end))
            with self.stages("end"):
                attempt.end_checks(linger_s=linger_s, during=prepare_profile)
            verdict = None
        except Finding as f:
            verdict = {"rule": f.rule, "reason": verdicts.reason(f.rule, f.text), "died": f.died}
        finally:
            gpu_hold.close()
        with self.stages("snapshot"):
            written = attempt.writes()
        if written is not None and (verdict is None or verdict["rule"] not in (verdicts.CRASH, verdicts.TIMEOUT)):
            verdict = written
        if verdict is not None:  # no profile reuses a rejected candidate's process: it ends now, not at the next attempt
            self.end_current()
        self.validate_sets = n_sets
        if fixed is None:
            self.next_up = (problem, device, n_sets, n_profile)
        if verdict is None and info.get("measured_precision"):
            verdict = {"rule": verdicts.PRECISION, "reason": verdicts.reason(verdicts.PRECISION, _precision_text(info, problem))}
        flags = []
        if info.get("candidate_work_share") is not None and info["candidate_work_share"] < 0.5:
            flags.append({"rule": verdicts.PYTORCH_ONLY, "reason": verdicts.reason(
                verdicts.PYTORCH_ONLY, info.get("work_reason") or f"{100 * (1 - info['candidate_work_share']):.0f}% "
                f"of the problem's FLOPs ran in PyTorch's own operators; less than half of the work is in kernels "
                f"the candidate brought")})
        self.models.clear()
        info["stages"] = self.stages.take()
        return {"sets": sets, "verdict": verdict, "flags": flags, "info": _plain(info), "device": str(device),
                "crashed": bool(verdict and verdict.get("died"))}

    def measure_precision(self, attempt, inst, problem, model_seed, input_sets: list, refs: list, judged: list,
                          range_probe: bool = True, timed: bool = False) -> dict:
        """The precision the candidate's outputs carry. ``judged``: ``(what, set index, outputs)`` for every
        call whose output was read, each judged against its own input set's signatures; then, where f16 is
        not allowed and nothing was found, one call on the range probe of the first set (f16's overflow).
        With ``timed`` the range probe runs as the first timed call, in its buffers (``timed_sample``): a
        precision switched on for the timed path only, or for a later instance, overflows there."""
        allowed = tuple(problem.allowed_precisions)
        if all(level in allowed for level in probes.LEVELS):
            return {}
        model = self.model(problem, model_seed, input_sets[0][0].device if input_sets[0] and
                           isinstance(input_sets[0][0], torch.Tensor) else self.device)
        found, numbers, where = None, {}, None
        with self.stages("probes"):
            sigs = self.sampled_signatures(model, input_sets, refs, judged)
            probed = [sum(sig is not None for sig in sigs), len({i for _, i, outs in judged if outs is not None})]
            for what, i, outs in judged:
                if outs is None or sigs[i] is None:
                    continue
                level, nums = probes.judge(outs, sigs[i], allowed)
                numbers = numbers or nums
                if level is not None:
                    found, numbers, where = level, nums, what
                    break
        if found is None and range_probe and "f16" not in allowed:
            for what, scaled, ref, probe in self.range_probes(problem, model, model_seed, input_sets[0]):
                if timed:
                    res = attempt.request("timed_sample", {"index": 0, "inputs": list(scaled)})
                    res["n_outputs"] = len(res.get("outputs") or [])
                    what = f"{what}, as a timed call"
                else:
                    res = attempt.request("call", {"instance": inst, "inputs": scaled, "poison": None,
                                                   "keep": None, "inplace": None, "out_nbytes": []})
                with self.stages("probes"):
                    outs = self.check_outputs(res.get("outputs"), res.get("output_problems"), res.get("n_outputs"), ref)
                    level, nums = probes.judge(outs, probe, allowed)
                if level is not None:
                    found, numbers, where = level, nums, what
                    break
        return {"measured_precision": found, "probe": numbers, "probed_sets": probed,
                **({"probe_call": where} if where else {})}

    def sampled_signatures(self, model, input_sets: list, refs: list, judged: list) -> list:
        """The signatures of the sets whose outputs are judged: of all of them where that fits the probe
        budget (``probe_budget_s``, float64 runs of the model at every level), else of a sample drawn from
        the judge's own randomness after the outputs are in, at least two sets: a candidate cannot tell
        which of its calls were probed, so one that lowers its precision on some of them is caught with a
        probability that grows with their share, while a large problem's validation stays seconds."""
        needed = sorted({i for _, i, outs in judged if outs is not None})
        sigs: list = [None] * len(input_sets)
        if not needed:
            return sigs
        random.SystemRandom().shuffle(needed)
        budget_s = float(self.settings.get("probe_budget_s", 2.0) or 0.0)
        t0 = time.perf_counter()
        first = needed[0]
        sigs[first] = probes.signatures_many(model, [input_sets[first]], [refs[first]])[0]
        per_set_s = time.perf_counter() - t0
        rest = needed[1:]
        if budget_s > 0 and per_set_s * len(needed) > budget_s:
            rest = rest[:max(1, int(budget_s / max(per_set_s, 1e-9)) - 1)]
        for i, sig in zip(rest, probes.signatures_many(model, [input_sets[i] for i in rest], [refs[i] for i in rest])):
            sigs[i] = sig
        return sigs

    def range_probes(self, problem: Problem, model, model_seed: int, inputs: list):
        """f16's range probes for ``inputs`` that say something: (what, input set, signatures). The set
        past f16's range (its operands overflow), and random signs inside it whose sums overflow f16's
        arithmetic (a few draws, until the emulated f16 output passes 65504 somewhere)."""
        with self.stages("probes"):
            scaled = probes.range_probe(inputs)
        ref = self.reference(problem, model_seed, scaled)
        with self.stages("probes"):
            probe = probes.signatures(model, scaled, ref)
        if probe is not None and math.isinf(probe["errors"]["f16"]):
            yield "the range probe (values past f16's range)", scaled, ref, probe
        for _ in range(3):
            with self.stages("probes"):
                signs = probes.in_range_probe(inputs, _seed())
            ref = self.reference(problem, model_seed, signs)
            with self.stages("probes"):
                probe = probes.signatures(model, signs, ref)
            if probe is not None and math.isinf(probe["errors"]["f16"]):
                yield "the range probe (values f16 holds, sums it does not)", signs, ref, probe
                return

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
        return self.ref_flops_cache[key]

    def attribution(self, attempt: Attempt, problem: Problem, model_seed: int, inputs: list) -> dict:
        """Who did the counted call's work (``attempt.work``): the share of the reference's FLOPs the
        candidate's own code did, with the GPU kernels that ran where they were recorded."""
        work = attempt.work or {"error": "no call was counted"}
        ref_flops = self.reference_flops(problem, model_seed, inputs)
        with self.stages("attribution"):
            out = work_share(work, ref_flops, attempt.program, problem)
        return out

    def op_profile(self, req: dict) -> dict:
        problem = self.problem(req["problem"])
        settings = self.settings = req["settings"]
        device = self.device_for(settings)
        if device.type != "cuda" and not settings.get("cpu_timing"):
            return {"timing_source": None, "reason": "no GPU in this process: no measured timing"}
        tol = problem.tolerance
        self.models.clear()
        self.stages.take()
        attempt = self.attempt_for(req["digest"], device, float(settings.get("watchdog_s", 120)), fresh=False)
        k = int(settings.get("timing_input_sets", 3))
        timing_hold = ExitStack()  # the GPU's timing lock, from the first timed call to the last sealed one
        try:
            bundle = self.take(problem, device, "profile", k + 3)  # k timed, 2 re-run in the timed buffers, 1 counted
            model_seed = bundle.model_seed
            inputs = [x for _, x, _ in bundle.sets]
            refs = [r for _, _, r in bundle.sets]
            if not attempt.loaded:
                self.load(attempt, problem, req["candidate"], model_seed, float(settings.get("startup_timeout_s", 300)))
            inst = self.build(attempt, problem, model_seed)
            lock = timing_hold.enter_context(self.timing_lock(device, settings))
            t_req = time.perf_counter()
            res = attempt.request("time", {"instance": inst, "input_sets": [list(x) for x in inputs[:k]],
                                           "settings": settings, "graph": True})
            res["timing_lock"] = lock.record()
            request_s = time.perf_counter() - t_req
            if res.get("threads"):
                raise Finding(verdicts.TIMING_TAMPERED, f"{len(res['threads'])} thread(s) of the candidate's ran while it "
                              f"was timed ({', '.join(res['threads'][:3])}): work they launch runs outside the timed calls")
            _summarize_timing(res)  # from the raw event times, here: not the candidate process's summary
            timed_s = float(res.get("timed_s") or 0.0)  # the measurement itself, inside the candidate's handler
            self.stages.add("timed", timed_s)
            self.stages.add("candidate", -timed_s)
            # every input set's last timed call, then timed calls re-run on new values in the same buffers
            timed_outs = []
            for i, last in enumerate(res["last_outputs"]):
                with self.stages("compare"):
                    outs = self.check_outputs(last["outputs"], last["output_problems"], len(last["outputs"]), refs[i])
                    cmp = compare(outs, refs[i], tol)
                if not cmp["correct"]:
                    raise Finding(verdicts.TIMED_CALL_WRONG, f"timed call on input set {i + 1}: {cmp['text']}")
                timed_outs.append((f"the timed calls on input set {i + 1}", i, outs))
            for j, (x, ref) in enumerate(zip(inputs[k:k + 2], refs[k:k + 2])):
                s = attempt.request("timed_sample", {"index": j % k, "inputs": list(x)})
                with self.stages("compare"):
                    outs = self.check_outputs(s["outputs"], s["output_problems"], len(s["outputs"]), ref)
                    cmp = compare(outs, ref, tol)
                if not cmp["correct"]:
                    raise Finding(verdicts.TIMED_CALL_WRONG, f"a timed call re-run on new inputs in the same buffers: "
                                  f"{cmp['text']}")
                timed_outs.append(("a timed call re-run on new inputs in the same buffers", k + j, outs))
            # the precision the timed outputs carry, each against its own set's signatures (a candidate that
            # turns a lower precision on only while it is timed or captured)
            measured = self.measure_precision(attempt, inst, problem, model_seed, inputs[:k + 2], refs[:k + 2],
                                              timed_outs, range_probe=False)
            if measured.get("measured_precision"):
                raise Finding(verdicts.PRECISION, _precision_text(measured, problem))
            # The judge's own clock: back-to-back timed calls cannot take less wall time than their GPU time.
            # Up to WALL_REPEATS requests, the least disturbed one judged: another process's work on the host
            # or the GPU can only lengthen a request, never shorten it.
            # enough calls to span WALL_TARGET_US (a ping's jitter spread thin), at least 10, at most 100: on a
            # 1.4 ms call 15, not 100 (0.12 s less of each attempt's overhead)
            n_wall = max(10, min(int(res["trials"]), 100, math.ceil(WALL_TARGET_US / max(float(res["median_us"]), 1.0))))

            def under_wall(wall_us: float) -> bool:
                return res["median_us"] < 0.5 * wall_us - 20.0

            wall_us = math.inf
            for _ in range(WALL_REPEATS if device.type == "cuda" else 1):
                t0 = time.perf_counter()
                attempt.request("ping", {})
                ping_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                attempt.request("wall", {"n": n_wall})
                wall_us = min(wall_us, max(0.0, time.perf_counter() - t0 - ping_s) * 1e6 / n_wall)
                if not under_wall(wall_us):
                    break
            res["wall_bound_us"] = wall_us
            res["request_s"] = request_s
            if device.type == "cuda" and under_wall(wall_us):
                raise Finding(verdicts.TIMING_TAMPERED, f"reported GPU time {res['median_us']:.1f} us per call, but the "
                              f"judge's clock saw {wall_us:.1f} us per call back to back")
            cur = res.get("current_stream_median_us")
            if cur is not None and res["median_us"] > 1.5 * cur + 50.0:
                raise Finding(verdicts.TIMING_TAMPERED, f"the current stream's part of a call took {cur:.1f} us but all "
                              f"streams took {res['median_us']:.1f} us: work runs on a stream the caller does not wait for")
            with self.stages("sealed"):
                self.sealed_calls(attempt, inst, problem, model_seed, inputs[0], refs[0], res, device, pool=bundle.sealed)
            timing_hold.close()
            # f16's range, probed as a timed call (the sealed calls are done with its buffers): the mantissa probes
            # above cannot tell f16 from TF32, and the validation's range probes ran on another instance, untimed
            measured = self.measure_precision(attempt, inst, problem, model_seed, inputs[:1], refs[:1], [], timed=True)
            if measured.get("measured_precision"):
                raise Finding(verdicts.PRECISION, _precision_text(measured, problem))
            # the work, recorded on a fresh set in a call whose output is compared like every other's
            _, cmp = self.call(attempt, inst, inputs[k + 2], refs[k + 2], tol, count={"kernels": device.type == "cuda"})
            if not cmp["correct"]:
                raise Finding(cmp["rule"], f"the call whose work was recorded: {cmp['text']}")
            work = self.attribution(attempt, problem, model_seed, inputs[k + 2])
            with self.stages("end"):
                attempt.end_checks()
            verdict = None
        except Finding as f:
            verdict = {"rule": f.rule, "reason": verdicts.reason(f.rule, f.text), "died": f.died}
            res, work = locals().get("res") or {}, {}
        finally:
            timing_hold.close()
        with self.stages("snapshot"):
            written = attempt.writes()
        if written is not None and (verdict is None or verdict["rule"] not in (verdicts.CRASH, verdicts.TIMEOUT)):
            verdict = written
        self.end_current()  # the attempt is over: its process ends (the spare is already starting)
        self.next_up = (problem, device, self.validate_sets, k + 3)
        flags = []
        # GPU time says who did the work where the candidate's kernels are real ones: Python candidates and
        # built programs (a program on the interpreter runs its kernels as PyTorch operators by design)
        timed_kernels = req["candidate"].get("source") is not None or req["candidate"].get("backend") == "cutlass"
        why = None
        if work.get("work_reason"):  # the work ran where no record reaches (another process)
            why = work["work_reason"]
        elif timed_kernels and work.get("split_us") is not None:
            # the kernels' names say it (a library called from C++ bypasses a FLOP counter), with data movement
            # around the candidate's kernels left out; a Python candidate's operator FLOPs beside them
            why = pytorch_only_reason(WorkSplit(**work["split_us"]),
                                      work.get("candidate_work_share") if not attempt.is_program else None)
        elif work.get("candidate_work_share") is not None and work["candidate_work_share"] < 0.5:
            why = (f"{100 * (1 - work['candidate_work_share']):.0f}% of the problem's FLOPs ran in PyTorch's own "
                   f"operators; less than half of the work is in kernels the candidate brought")
        if why:
            flags.append({"rule": verdicts.PYTORCH_ONLY, "reason": verdicts.reason(verdicts.PYTORCH_ONLY, why)})
        keep = ("median_us", "mean_us", "min_us", "spread_pct", "trials", "method", "capture_error", "timed_s",
                "wall_bound_us", "warmup_calls", "request_s", "calls_per_trial", "warmup_s", "sealed", "timing_lock")
        out = {k2: res.get(k2) for k2 in keep}
        self.models.clear()
        out.update(timing_source="gpu" if device.type == "cuda" else "cpu", verdict=verdict, flags=flags, work=_plain(work),
                   crashed=bool(verdict and verdict.get("died")), stages=self.stages.take())
        return out

    def sealed_calls(self, attempt: Attempt, inst: int, problem: Problem, model_seed: int, x0: list, ref0: list,
                     res: dict, device, pool: list | None = None) -> None:
        """The judge-clocked bound (``evals.judge.sealed``): K fresh input sets staged masked, then unmasked, called
        and checksummed inside one request this process times, then fetched and checked. Records
        ``res["sealed"]``; a reported time under the bound's rule, a wrong output or a checksum that does
        not match the fetched outputs is a Finding."""
        t_us = float(res["median_us"])
        if not any(isinstance(x, torch.Tensor) and x.numel() for x in x0) or \
                not all(isinstance(r, torch.Tensor) for r in ref0):
            res["sealed"] = {"skipped": "no tensor inputs or a non-tensor output: nothing to mask or checksum"}
            return
        in_bytes = sum(x.numel() * x.element_size() for x in x0 if isinstance(x, torch.Tensor))
        out_bytes = sum(r.numel() * r.element_size() for r in ref0)
        out_numel = sum(r.numel() for r in ref0)
        gbps = sealed.bandwidth_gbps(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
        k = sealed.choose_k(t_us, sealed.floor_us(in_bytes + out_bytes, gbps),
                            sealed.staged_bytes(in_bytes, out_bytes, out_numel), device.type)
        where = (problem.path, problem.source_hash, _device_key(device))
        self.sealed_k[where] = k  # the next profile's sets are drawn ahead
        # the same unmask and checksum passes, timed here (the judge's process: nothing of the candidate's
        # runs) once per problem and K; on a GPU at least their bytes at the device's bandwidth, since for
        # small sets the passes' host launches, not their bytes, set their time (an honest launch-bound
        # candidate was flagged without this)
        if (where, k) not in self.sealed_floor_us:
            self.sealed_floor_us[(where, k)] = sealed.measured_floor_us(x0, ref0, k)
        floor_us = self.sealed_floor_us[(where, k)]
        if device.type == "cuda":
            floor_us = max(floor_us, sealed.floor_us(sealed.overhead_bytes(in_bytes, out_numel, out_bytes), gbps))
        info: dict[str, Any] = {"k": k, "t_us": t_us, "alpha": sealed.ALPHA, "floor_us": floor_us,
                                "bandwidth_gbps": gbps, "method": sealed.METHOD_NOTE, "bounds_us": []}
        res["sealed"] = info
        # a few go requests with fresh sets, the least disturbed one judged: the host's other work can only
        # lengthen a request, never shorten it
        for _ in range(sealed.REPEATS.get(device.type, 1)):
            wall_s, ping_s, cpu_s, ping_cpu_s = self.sealed_go(attempt, inst, problem, model_seed, x0, ref0, k, device,
                                                               pool)
            # the judge's clock; on the CPU also the kernel's count of the candidate's processes' CPU time (a
            # shared host's waits for a core lengthen the first, not the second); the smaller bound is judged
            pairs = [(wall_s, ping_s)] + ([(cpu_s, ping_cpu_s)] if cpu_s is not None and ping_cpu_s is not None else [])
            u_us, spent_s, ping = min((sealed.bound_us(a, b, k, floor_us), a, b) for a, b in pairs)
            info["bounds_us"].append(u_us)
            if u_us == min(info["bounds_us"]):
                info.update(bound_us=u_us, wall_s=wall_s, ping_s=ping_s, cpu_s=cpu_s,
                            beta_us=sealed.beta_us(device.type, ping, k))
            if not sealed.tampered(t_us, info["bound_us"], info["beta_us"]):
                break
        u_us, beta = info["bound_us"], info["beta_us"]
        info.update(ratio=t_us / u_us if u_us > 0 else None, flagged=sealed.tampered(t_us, u_us, beta))
        if info["flagged"]:
            raise Finding(verdicts.TIMING_TAMPERED, sealed.rule_text(t_us, u_us, k, beta))

    def sealed_go(self, attempt: Attempt, inst: int, problem: Problem, model_seed: int, x0: list, ref0: list,
                  k: int, device, pool: list | None = None) -> tuple[float, float, float | None, float | None]:
        """One stage, go and fetch of ``k`` fresh sets (taken first from ``pool``: sets with their references
        drawn ahead of need, each used once); returns the go request's and a ping's round trip (seconds, from
        sending to the reply's arrival) and, on the CPU, the CPU time the candidate's processes spent in each,
        after checking every output and checksum."""
        ready = [pool.pop(0) for _ in range(min(k, len(pool)))] if pool else []
        sets = [x for _, x, _ in ready] + self.inputs(problem, [_seed() for _ in range(k - len(ready))], device)
        mask_seeds = [sealed.seed() for _ in x0]
        with self.stages("sealed_mask"):
            masked = [sealed.mask(torch.stack([s[p] for s in sets]), mask_seeds[p]) if isinstance(x, torch.Tensor)
                      else x for p, x in enumerate(x0)]
        refs: list = [r for _, _, r in ready]  # the others computed while the candidate stages the sets

        def references() -> None:
            refs.extend(self.reference(problem, model_seed, s) for s in sets[len(ready):])

        attempt.request("sealed_stage", {"instance": inst, "masked": masked, "out_specs": [
            [list(r.shape), sealed.dtype_name(r.dtype)] for r in ref0]}, during=references)
        del masked
        cpu = (lambda: sealed.tree_cpu_s(attempt.proc.proc.pid)) if device.type == "cpu" else (lambda: None)
        c0 = cpu()
        attempt.request("ping", {})
        ping_s = float(attempt.proc.last_transfer.get("wait_s", 0.0))
        c1 = cpu()
        checksum_seed = sealed.seed()
        go = attempt.request("sealed_go", {"mask_seeds": mask_seeds, "checksum_seed": checksum_seed})
        wall_s = float(attempt.proc.last_transfer.get("wait_s", 0.0))
        c2 = cpu()
        fetched = attempt.request("sealed_fetch", {}).get("outputs")
        with self.stages("compare"):
            if not isinstance(fetched, list) or len(fetched) != len(ref0) or any(
                    type(o) is not torch.Tensor or o.dtype != r.dtype or tuple(o.shape) != (k, *r.shape)
                    for o, r in zip(fetched, ref0)):
                raise Finding(verdicts.TIMED_CALL_WRONG, "the sealed calls' outputs are missing or of the wrong "
                              "type, dtype or shape")
            # on a GPU the K calls are compared at once (the rules are elementwise; one read-back instead of K), a
            # failure then found call by call; on the CPU call by call (small operations: no thread pool to wake)
            together = device.type == "cuda" and k > 1
            if not together or not compare(fetched, [torch.stack([refs[i][o] for i in range(k)])
                                                     for o in range(len(ref0))], problem.tolerance)["correct"]:
                for i in range(k):
                    cmp = compare([o[i] for o in fetched], refs[i], problem.tolerance)
                    if not cmp["correct"]:
                        raise Finding(verdicts.TIMED_CALL_WRONG, f"sealed call {i + 1} of {k}: {cmp['text']}")
            expected, scales = sealed.expected_checksums(fetched, checksum_seed)
        bad = sealed.checksums_agree(go.get("checksums"), expected, scales)
        if bad:
            raise Finding(verdicts.TIMING_TAMPERED, f"the checksums the timed request replied for {len(bad)} of {k} "
                          f"sealed calls do not match their outputs: the outputs were not computed inside it")
        if None in (c0, c1, c2):
            return wall_s, ping_s, None, None
        return wall_s, ping_s, c2 - c1, c1 - c0

    def op_end_attempt(self, req: dict) -> dict:
        self.end_current()
        return {}

    def op_reference_timings(self, req: dict) -> dict:
        problem = self.problem(req["problem"])
        settings = req["settings"]
        device = self.device_for(settings)
        if device.type != "cuda":
            return {"timing_source": None, "reason": "no GPU in this process: reference timings need one"}
        seeds = [_seed() for _ in range(int(settings.get("timing_input_sets", 3)))]
        model = problem.make_model(seeds[0], device)
        input_sets = [problem.make_inputs(s, device) for s in seeds]
        method = TimingMethod.from_settings(settings)
        self.flusher = make_flusher(device, method, self.flusher)
        out: dict[str, Any] = {"timing_source": "gpu"}
        compiled = None
        if settings.get("compile", True):
            # compiling is minutes of CPU and a little GPU work, not a measurement: judges sharing the GPU
            # compile and validate side by side, and only the timings below hold it alone
            with self.timing_lock(device, settings, shared=True):
                compiled = self.compile_reference(model, input_sets[0], out)
        with self.timing_lock(device, settings) as lock:
            self.reference_timings(model, compiled, input_sets, method, out)
        out["timing_lock"] = lock.record()
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

    def timing_lock(self, device, settings: dict, shared: bool = False) -> DeviceTimingLock:
        """The GPU's timing lock (``evals.locks.DeviceTimingLock``: exclusive for a measurement, shared for
        validation); off off a GPU or with a zero wait."""
        wait_s = float(settings.get("timing_lock_wait_s", 120.0))
        key = device_key(device) if device.type == "cuda" and wait_s > 0 else None
        return DeviceTimingLock(key, shared=shared, wait_s=wait_s)

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


# ---------------------------------------------------------------------------------------------
# comparisons


def _summarize_timing(res: dict) -> None:
    """The measurement's median, mean, minimum and spread computed in the judge from the per-call event
    times the candidate process sent (its own summary is not used): trials of ``calls_per_trial`` calls."""
    import statistics

    from evals.judge.timing import spread_pct

    calls, n = res.get("call_us"), res.get("calls_per_trial")
    if not (isinstance(calls, list) and calls and isinstance(n, int) and 1 <= n <= len(calls)
            and all(isinstance(v, (int, float)) and math.isfinite(v) for v in calls)):
        raise Finding(verdicts.TIMING_TAMPERED, "the timing reply carries no usable per-call event times")
    trials = [statistics.fmean(calls[i:i + n]) for i in range(0, len(calls) - n + 1, n)]
    res.update(median_us=statistics.median(trials), mean_us=statistics.fmean(trials), min_us=min(trials),
               spread_pct=spread_pct(trials), trials=len(trials))


def _precision_text(info: dict, problem: Problem) -> str:
    err = (info.get("probe") or {}).get("candidate_error")
    return (f"its errors carry {info['measured_precision']} rounding (relative error "
            f"{'inf' if err is None else f'{err:.2e}'} on {info.get('probe_call') or 'a probe'}); this problem "
            f"allows only {', '.join(problem.allowed_precisions)}")


def compare(outs: list, refs: list, tol: float) -> dict:
    """Outputs against the reference: a non-finite value where the reference is finite (``nonfinite``),
    then any element outside ``atol = rtol = tol`` (``mismatch``); with the largest absolute and relative
    errors. The statistics of every output are reduced on its device and read back once."""
    stats = [_compare_stats(o.to(r.device), r, tol) for o, r in zip(outs, refs)]
    values = torch.stack([t.to(stats[0].device) for t in stats]).tolist() if stats else []
    max_abs = max_rel = 0.0
    for i, ((n_nonfinite, o_abs, o_rel, n_far), o) in enumerate(zip(values, outs)):
        if n_nonfinite:
            return dict(correct=False, max_abs_error=None, max_rel_error=None, rule=verdicts.NONFINITE,
                        text=f"output {i} has {int(n_nonfinite)} non-finite values where the reference is finite")
        max_abs, max_rel = max(max_abs, o_abs), max(max_rel, o_rel)
        if n_far:
            return dict(correct=False, max_abs_error=max_abs, max_rel_error=max_rel, rule=verdicts.MISMATCH,
                        text=f"output {i}: {int(n_far)} of {o.numel()} elements differ from the reference beyond "
                             f"atol = rtol = {tol:g} (max abs error {max_abs:.3g})")
    return dict(correct=True, max_abs_error=max_abs, max_rel_error=max_rel, rule=None, text="")


def _compare_stats(o: torch.Tensor, r: torch.Tensor, tol: float) -> torch.Tensor:
    """[non-finite where the reference is finite, max abs error, max rel error, elements not close] as
    float64 on the device (no read back). The errors count where the reference is finite only."""
    finite_r = torch.isfinite(r)
    n_nonfinite = (finite_r & ~torch.isfinite(o)).sum()
    if o.numel():
        rd = r.double()
        diff = (o.double() - rd).abs_().masked_fill_(~finite_r, 0.0)
        max_abs = diff.max()
        max_rel = diff.div_(rd.abs_().clamp_min_(1e-12)).max()
    else:
        max_abs = max_rel = torch.zeros((), dtype=torch.float64, device=r.device)
    n_far = (~torch.isclose(o, r, atol=tol, rtol=tol, equal_nan=True)).sum()
    return torch.stack([n_nonfinite.double(), max_abs, max_rel, n_far.double()])


def _interior_permutation(inputs: list):
    """The inputs with every float tensor's values reordered except its first and last (None when no
    tensor is large enough)."""
    out, changed = [], False
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() >= 4:
            flat = x.reshape(-1).clone()
            n = flat.numel()
            # drawn where the values are (a GPU draws millions in a millisecond, a CPU in a fraction of a second)
            g = torch.Generator(device=flat.device).manual_seed(_seed())
            perm = torch.randperm(n - 2, generator=g, device=flat.device) + 1
            flat[1:n - 1] = flat[perm]
            out.append(flat.reshape(x.shape))
            changed = True
        else:
            out.append(x)
    return out if changed else None


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y.to(x.device)) for x, y in zip(a, b))


def _same_or_both_nan(a: list, b: list) -> bool:
    pairs = [(x, y.to(x.device)) for x, y in zip(a, b)]
    return len(a) == len(b) and all(x.shape == y.shape and (torch.equal(x, y) or bool(((x == y) | (x.isnan() & y.isnan())).all()))
                                    for x, y in pairs)


def _close(a: list, b: list, tol: float) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.allclose(x.double(), y.to(x.device).double(), atol=tol,
                                                                          rtol=tol) for x, y in zip(a, b))


def _finite(t) -> bool:
    return bool(torch.isfinite(t).all())


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
            except Exception as exc:  # noqa: BLE001 - a judge bug must not look like a verdict
                traceback.print_exc(file=sys.stderr)
                reply = {"id": req.get("id"), "ok": False, "error": f"the judge failed: {_one_line(exc)}", "kind": "judge"}
            if reply.get("ok") and isinstance(reply.get("result"), dict) and op in ("validate", "profile"):
                reply["result"].update(_memory(judge.device))
            proto.write(json.dumps(_plain(reply), default=str, allow_nan=False) + "\n")
            proto.flush()
            judge.idle(lambda: _request_waiting(sys.stdin))
    finally:
        judge.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
