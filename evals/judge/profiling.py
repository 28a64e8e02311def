"""A profile: the candidate timed in its own process on the plan's timed sets, and the checks of that time
(evals.judge.checks) run as one list, in order: the timed calls' outputs, their precision, the judge's
clock over back-to-back calls, the current stream's share, the sealed calls' bound, f16's range as a timed
call, and the work recorded on a fresh set. The GPU's timing lock is held exclusively from the first timed call to the
last sealed one, shared before and after (the operation's hold)."""

from __future__ import annotations

from typing import Any

from evals.judge import compare
from evals.judge.checks import clock, precision, probing, sealed_bound, timed, work

STEPS = (
    timed.measure,  # the timing request (its threads, its raw event times summarized here)
    timed.timed_outputs,  # each timed set's last timed call, and two re-runs on new values in the same buffers
    precision.timed_precision,  # those outputs' precision
    clock.wall_bound,  # back-to-back calls against the judge's clock
    clock.current_stream,  # work left on a stream the caller does not wait for
    sealed_bound.sealed_calls,  # K masked sets unmasked, called and checksummed inside one request timed here
    precision.timed_range_probe,  # f16's range as a timed call
    work.timed_work,  # the kernels the timed calls ran (their graphs replayed under the profiler)
    work.counted_call,  # the work, on a fresh set
)


class Profile:
    """One profile's state: the attempt, the timed sets (the first held to the end), what was measured."""

    def __init__(self, judge, attempt, problem, device, settings, bundle, n_timed: int, inst: int, hold):
        self.judge, self.attempt, self.problem, self.device, self.settings = judge, attempt, problem, device, settings
        self.bundle, self.inst = bundle, inst
        self.model_seed, self.model = bundle.model_seed, bundle.model
        self.tol = problem.tolerance
        self.timed_sets = [judge.next_set(problem, bundle, device) for _ in range(int(n_timed))]
        self.x0 = self.timed_sets[0][1]
        self.keys = compare.Keys(self.timed_sets[0][2], settings.sample_elements)
        self.probes = probing.ProbePlan(int(n_timed) + 2, settings.probe_budget_s)
        self.judged: list = []  # (what, signature, summary) of every timed output read
        self.res: dict[str, Any] = {}
        self.work: dict = {}
        self.timed_kernels: list | None = None  # (name, us) of the timed calls' kernels, run once more (a GPU's)
        self.timed_graphs = 0  # of them, captured graphs
        self.hold = hold  # the operation's evals.locks.DeviceHold

    def next_set(self) -> tuple[int, list, list]:
        return self.judge.next_set(self.problem, self.bundle, self.device)

    def summary(self, outs: list, ref: list) -> compare.Summary:
        with self.judge.stages("compare"):
            return compare.summarize(outs, ref, self.tol, self.keys)

    def hold_timing_lock(self):
        return self.hold.exclusive()

    def release_timing_lock(self) -> None:
        """Back to the operation's shared hold (the checks after the sealed calls are GPU work too)."""
        self.hold.shared()

    def run(self) -> None:
        try:
            for step in STEPS:
                step(self)
        finally:
            self.release_timing_lock()
