"""New values written into the first set's buffers (set 2's): a cache keyed by the inputs' address sees no
change and answers for the old values."""

from __future__ import annotations

from evals.judge import verdicts
from evals.judge.findings import Finding


def new_values_in_same_buffers(v) -> None:
    if len(v.sets) < 2:
        return
    x1, ref1 = v.kept(1)
    outs = v.attempt.call(v.inst, x1, ref1, inplace="set0")
    v.inplace = v.record("new values in the same buffers (input set 2)", None, outs, ref1).summary
    del outs
    cmp = v.inplace.cmp
    if not cmp["correct"]:
        right_fresh = v.sets[1].summary.cmp["correct"]
        rule = verdicts.INPUT_INDEPENDENT if right_fresh else cmp["rule"]
        raise Finding(rule, "wrong after new values were written into the same input buffers"
                      + (" (right on fresh tensors): the result is cached by address" if right_fresh
                         else f": {cmp['text']}"))
