"""A validation: the candidate called on fresh input sets and on the calls that come back to them, each call
reduced to a summary as it arrives (evals.judge.compare), and the checks of evals.judge.checks run as one
list, in order. The judge holds input sets 1 and 2 with their references, the first wrong set, the set being
called and the output that just arrived; everything else it keeps is statistics, digests and samples."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evals.judge import compare
from evals.judge.checks import dependence, inplace, precision, probing, repeat, sets, work


@dataclass
class SetRecord:
    """One call as the judge keeps it: what it was, the set's seed, the outputs' summary, the reference at
    the sample positions, and (when probed) the set's signatures at those positions."""

    what: str
    seed: int | None
    summary: compare.Summary
    ref_sample: list = field(default_factory=list)
    signature: dict | None = None


# The checks of a validation, in the order they are judged (each makes the calls it needs).
STEPS = (
    sets.call_every_set,  # every set: compared, summarized, its work recorded on the last
    dependence.outputs_follow_inputs,  # two sets with different references give different outputs
    repeat.repeated_call,  # set 1 again, other poison: the same output
    sets.every_set_correct,  # the first wrong set's rule (a lower precision's, where its errors carry one)
    repeat.repeated_call_correct,
    inplace.new_values_in_same_buffers,  # set 2's values written into set 1's buffers
    dependence.reordered_values,  # set 1's values in another order
    precision.measured_precision,  # every output read, against its own set's signatures; f16's range
    work.attributed_work,  # the counted call's work
)


class Validation:
    """One validation's state: the attempt, the sets and records, the operation's keys, what it measured."""

    def __init__(self, judge, attempt, problem, device, settings, bundle, n_sets: int, inst: int, plan):
        self.judge, self.attempt, self.problem, self.device, self.settings = judge, attempt, problem, device, settings
        self.plan = plan
        self.bundle, self.n_sets, self.inst = bundle, int(n_sets), inst
        self.model_seed = bundle.model_seed
        self.model = bundle.model
        self.tol = problem.tolerance
        self.keys: compare.Keys | None = None
        self.sets: list[SetRecord] = []
        self._kept: dict[int, tuple] = {}  # set index -> (inputs, reference), or (seed, digest) to draw them again
        self.first_bad: int | None = None
        self.again: compare.Summary | None = None
        self.inplace: compare.Summary | None = None
        self.counted_flops: float = 0.0
        self.counted_products: list[float] = []
        self.probes = probing.ProbePlan(n_sets, settings.probe_budget_s)
        self.info: dict[str, Any] = {}

    def next_set(self) -> tuple[int, list, list]:
        return self.judge.next_set(self.problem, self.bundle, self.device)

    def keep(self, i: int, seed: int, inputs: list, ref: list) -> None:
        """Set ``i`` for the calls that come back to it: whole where the plan holds references, else its seed and
        a digest of its inputs (drawn again from the seed, and checked to be the same, when needed)."""
        if self.plan.hold_references:
            self._kept[i] = (inputs, ref)
        else:
            self._kept[i] = (seed, compare.content_digests(list(inputs), seed))

    def kept(self, i: int) -> tuple[list, list]:
        """Set ``i``'s inputs and reference."""
        held = self._kept[i]
        if self.plan.hold_references:
            return held
        seed, digest = held
        x = self.judge.inputs(self.problem, [seed], self.device)[0]
        if compare.content_digests(list(x), seed) != digest:
            from evals.judge.findings import HarnessError

            raise HarnessError(f"{self.problem.path}: get_inputs() gives other values under the same seed, so a "
                               "set cannot be drawn again; the judge holds too little memory to keep it whole")
        return x, self.judge.reference(self.problem, self.model_seed, x)

    def has_kept(self, i: int) -> bool:
        return i in self._kept

    def record(self, what: str, seed: int | None, outs: list, ref: list) -> SetRecord:
        """A call's outputs reduced to what the judge keeps (the sample positions drawn at the first call)."""
        with self.judge.stages("compare"):
            if self.keys is None:
                self.keys = compare.Keys(ref, self.settings.sample_elements)
            summary = compare.summarize(outs, ref, self.tol, self.keys)
            return SetRecord(what=what, seed=seed, summary=summary, ref_sample=self.keys.sample(ref))

    def run(self) -> None:
        steps_mb = self.info.setdefault("memory_steps_mb", {})
        for step in STEPS:
            step(self)
            steps_mb[step.__name__] = _held_mb(self.device)  # what the judge holds after each step

    def set_rows(self) -> list[dict]:
        """The reply's per-set rows."""
        return [{"seed": rec.seed, **{k: rec.summary.cmp[k] for k in ("correct", "max_abs_error", "max_rel_error")},
                 "reason": rec.summary.cmp["text"], "rule": rec.summary.cmp["rule"]} for rec in self.sets]


def _held_mb(device) -> float:
    """MB the judge holds: its GPU allocator's, or on the CPU its resident memory (the memory table's numbers)."""
    import os

    import torch

    if device.type == "cuda":
        return round(torch.cuda.memory_allocated() / 2**20, 1)
    try:
        with open("/proc/self/statm") as f:
            return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except (OSError, ValueError):
        return 0.0
