"""One attempt seen from the judge: a candidate in its own candidate process, its checked replies, its
judged calls, and the checks at its end (the process still answers, nothing escaped, nothing protected
was written). Every reply is checked for what the candidate process reports of itself: guarded names
replaced, framework settings changed, a failure of the candidate's code."""

from __future__ import annotations

import math
import time
from contextlib import contextmanager

import torch

from evals.judge import compare, memory, sealed, verdicts, wire
from evals.judge.findings import Finding
from evals.judge.sandbox import CandidateProcess

# Guarded names (evals.judge.candidate) that only measure the work: replaced, the attribution cannot stand.
ATTRIBUTION_NAMES = ("torch.utils.flop_counter.", "torch.profiler.", "torch.utils._python_dispatch.",
                     "torch.autograd.profiler", "torch._C._profiler.", "torch._C._autograd.")


class Stages:
    """Where the judge's time goes in one operation (seconds per stage), for the overhead breakdown.
    Stages nest: an inner stage's time is not counted in the outer one."""

    def __init__(self, peak_bytes=None) -> None:
        self.seconds: dict[str, float] = {}
        self.peak_mb: dict[str, float] = {}  # the device memory the judge held at most in each stage (``peak_bytes``)
        self._peak_bytes = peak_bytes  # () -> bytes held at most since the last call (and resets that peak)
        self._stack: list[list] = []  # [name, started, inner seconds]

    @property
    def current(self) -> str:
        """The innermost open stage ("" when none): where an out-of-memory error was raised."""
        return "/".join(s[0] for s in self._stack)

    @contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        self._peak()
        self._stack.append([name, t0, 0.0])
        try:
            yield
        finally:
            self._peak()
            _, _, inner = self._stack.pop()
            total = time.perf_counter() - t0
            self.add(name, max(0.0, total - inner))
            if self._stack:
                self._stack[-1][2] += total

    def _peak(self) -> None:
        """The peak since the last mark goes to the stage open until now (an outer one's on entering an inner;
        none before the first stage)."""
        if self._peak_bytes is None:
            return
        mb = round(self._peak_bytes() / 2**20, 1)
        if self._stack:
            name = self._stack[-1][0]
            self.peak_mb[name] = max(self.peak_mb.get(name, 0.0), mb)

    def add(self, name: str, seconds: float) -> None:
        """``seconds`` more in ``name`` (negative: moved out of it, as the measurement out of `candidate`)."""
        self.seconds[name] = max(0.0, self.seconds.get(name, 0.0) + seconds)
        if seconds > 0.0 and self._stack:  # spent inside an open stage (a request in `end`): not twice
            self._stack[-1][2] += seconds

    def take(self) -> dict[str, float]:
        out, self.seconds, self.peak_mb = self.seconds, {}, {}
        return {k: round(v, 4) for k, v in out.items()}

    def take_peaks(self) -> dict[str, float]:
        """The stages' peak device memory (MB) since the last ``take``; read before it."""
        return dict(self.peak_mb)


class Attempt:
    """One candidate in one candidate process, seen from the judge."""

    def __init__(self, judge, proc: CandidateProcess, digest: str, device: torch.device, watchdog_s: float):
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
        self.memory: dict = {}  # the candidate's peak device and host memory, as of its last closing ping
        self.work: dict | None = None  # what the last counted call recorded
        self.program = None  # a μCUTLASS candidate's IR

    def request(self, op: str, payload: dict, timeout_s: float | None = None, during=None,
                max_stream_bytes: int = 0) -> dict:
        """The candidate's checked reply. ``during``: the judge's own work, done while the candidate
        answers (never around a request whose time is judged: the timing, the wall clock, sealed go).
        ``max_stream_bytes``: the most the reply's tensors may stream past the arena's free part (the
        outputs the request asks for; a reply claiming more is ``channel``)."""
        t0 = time.perf_counter()
        limit = timeout_s or self.watchdog_s
        try:
            if during is None:
                reply = self.proc.request(op, payload, limit, max_stream_bytes)
                self._account(op, reply, time.perf_counter() - t0)
            else:
                self.proc.send(op, payload, limit)
                t1 = time.perf_counter()
                try:
                    during()
                finally:  # the reply is read whatever happened, so the next request meets no stale one
                    during_s = time.perf_counter() - t1
                    reply = self.proc.receive(limit, max_stream_bytes)
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

    # -- one call, judged ---------------------------------------------------------------------
    def call(self, instance: int, inputs: list, refs: list, *, poison=None, keep: str | None = None,
             inplace: str | None = None, count: dict | None = None) -> list:
        """The candidate's outputs for ``inputs``, checked: as many as the reference's, plain tensors of its
        dtypes and shapes, and every input unchanged after the call (its digest under a key drawn for this
        call, against the judge's own copy). With ``count`` the call's work is recorded as well
        (``self.work``): the operators it dispatched and the CPU time the candidate's other processes spent
        meanwhile."""
        out_nbytes = [r.nbytes for r in refs if isinstance(r, torch.Tensor)]
        runner_pid = (getattr(self.proc, "info", None) or {}).get("pid") if count else None
        others_before = sealed.tree_cpu_s(runner_pid) if runner_pid else None
        key = sealed.seed()
        res = self.request("call", {"instance": instance, "inputs": list(inputs), "poison": poison, "keep": keep,
                                    "inplace": inplace, "out_nbytes": out_nbytes, "count": count, "input_key": key},
                           max_stream_bytes=sum(out_nbytes))
        if count:
            others_after = sealed.tree_cpu_s(runner_pid) if runner_pid else None
            self.work = dict(res.get("work") or {"error": "the counted call reported no work"})
            self.work["other_processes_cpu_s"] = (others_after or 0.0) - (others_before or 0.0)
        with self.judge.stages("compare"):
            outs = compare.check_outputs(res.get("outputs"), res.get("output_problems"), res.get("n_outputs"), refs)
            after = res.get("inputs_after") or []
            mine = compare.content_digests(list(inputs), key)
            for i, x in enumerate(inputs):
                if isinstance(x, torch.Tensor) and (i >= len(after) or after[i] != mine[i]):
                    raise Finding(verdicts.INPUTS_MUTATED, f"input {i} differs from the judge's copy after the "
                                  f"call: inputs are read-only")
        return outs

    def outputs_of(self, op: str, payload: dict, refs: list) -> list:
        """The outputs a reply to ``op`` carries (a timed call's, a range probe's), checked as a call's are."""
        res = self.request(op, payload, max_stream_bytes=memory.nbytes(refs))
        with self.judge.stages("compare"):
            return compare.check_outputs(res.get("outputs"), res.get("output_problems"),
                                         len(res.get("outputs") or []), refs)

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
        pong = self.request("ping", {"linger_s": linger_s} if linger_s > 0 else {}, timeout_s=10.0 + linger_s,
                            during=during)
        state = self.proc.supervisor_report() or {}
        self.memory = {"candidate_peak_device_bytes": pong.get("peak_device_bytes"),
                       "candidate_peak_host_bytes": state.get("peak_rss_bytes")}
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
