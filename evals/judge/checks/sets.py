"""Every input set, called once on one instance: the candidate's outputs against the reference, set by set.
The first set's memory is poisoned with NaN first (an element never written is then wrong), the last one's
work is recorded (evals.judge.checks.work). A wrong set is judged for a lower precision before its rule."""

from __future__ import annotations

from evals.judge import compare, verdicts
from evals.judge.checks import precision, probing
from evals.judge.findings import Finding

NAN_POISON = float("nan")


def call_every_set(v) -> None:
    """The validation's input sets, each drawn (or taken as prepared), called, compared and reduced to its
    summary as it arrives; only sets 1 and 2 (the later calls come back to them) and the first wrong set
    stay held."""
    counted = v.n_sets - 1  # the work is recorded on a set the candidate has not seen, and compared
    for i in range(v.n_sets):
        seed, x, ref = v.next_set()
        outs = v.attempt.call(v.inst, x, ref, poison=NAN_POISON if i == 0 else None, keep="set0" if i == 0 else None,
                              count={"kernels": False} if i == counted else None)
        rec = v.record(f"input set {i + 1}", seed, outs, ref)
        del outs  # the output arrived, was compared and reduced: let go before the probe's float64 runs
        if i == counted:
            v.counted_flops = v.judge.reference_flops(v.problem, v.model_seed, x)
            v.counted_products = v.judge.reference_products(v.problem, v.model_seed, x)
        rec.signature = probing.signature(v, v.model, i, x, ref, v.probes)
        if i in (0, 1) or (not rec.summary.cmp["correct"] and v.first_bad is None):
            v.keep(i, seed, x, ref)
        if not rec.summary.cmp["correct"] and v.first_bad is None:
            v.first_bad = i
        v.sets.append(rec)
        del x, ref  # before the next set is drawn: only the kept sets stay held


def every_set_correct(v) -> None:
    """The first wrong set's rule: the same output as the set before it (the result does not follow the input),
    a lower precision's rounding (its errors carry a disallowed level), or the comparison's rule."""
    k = v.first_bad
    if k is None:
        return
    bad = v.sets[k].summary
    if len(v.sets) > 1 and compare.same(bad, v.sets[k - 1 if k else -1].summary):
        raise Finding(verdicts.INPUT_INDEPENDENT, f"input set {k + 1}: the output did not change with the input")
    if bad.cmp["rule"] in (verdicts.MISMATCH, verdicts.NONFINITE):  # a lower precision explains them better
        x, ref = v.kept(k)
        sig = v.sets[k].signature
        if sig is None and probing.needed(v.problem):
            with v.judge.stages("probes"):
                from evals.judge import probes

                sig = probes.signatures(v.model, x, ref, v.keys.positions, v.problem.allowed_precisions)
        measured = precision.measure(v, [(f"input set {k + 1}", sig, bad)], x, range_probe=True)
        # a disallowed level's signature explains a wrong set; an error only larger than the budget does not (a
        # wrong answer's is too)
        if measured.get("measured_precision") and not (measured.get("probe") or {}).get("beyond_budget"):
            v.info.update(measured)
            raise Finding(verdicts.PRECISION, precision.text(v.info, v.problem))
    raise Finding(bad.cmp["rule"], f"input set {k + 1}: {bad.cmp['text']}")
