"""The same input set called again on the same instance, with the allocator's free memory poisoned with
another value (1e4 after NaN): an element never written, or one that depends on an earlier call, differs."""

from __future__ import annotations

from evals.judge import compare, verdicts
from evals.judge.findings import Finding

VALUE_POISON = 1.0e4


def repeated_call(v) -> None:
    x0, ref0 = v.kept(0)
    outs = v.attempt.call(v.inst, x0, ref0, poison=VALUE_POISON)
    v.again = v.record("the repeated call on input set 1", None, outs, ref0).summary
    del outs
    first = v.sets[0].summary
    with v.judge.stages("compare"):
        differs = not compare.same_or_both_nan(first, v.again) and not compare.samples_close(first.sample,
                                                                                            v.again.sample, v.tol)
    if differs:
        raise Finding(verdicts.MISMATCH, "a repeated call on the same inputs differs from the first: part of the "
                      "output depends on memory's previous contents (never written) or on earlier calls")


def repeated_call_correct(v) -> None:
    if not v.again.cmp["correct"]:
        raise Finding(v.again.cmp["rule"], f"repeated call on input set 1: {v.again.cmp['text']}")
