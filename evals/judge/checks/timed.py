"""The measurement (in the candidate's process, summarized here from its raw per-call event times), then
every timed set's last timed call and two timed calls re-run on new values in the same buffers, each
compared with its reference (``timed_call_wrong``) and kept for the precision probe."""

from __future__ import annotations

import math
import statistics

from evals.judge import verdicts
from evals.judge.checks import probing
from evals.judge.findings import Finding
from evals.judge.timing import spread_pct


def measure(p) -> None:
    """The timing request on the first ``k`` sets (the GPU's timing lock held from here to the last sealed
    call); a thread of the candidate's that ran while it was timed is tampering."""
    lock = p.hold_timing_lock()
    res = p.attempt.request("time", {"instance": p.inst, "input_sets": [list(x) for _, x, _ in p.timed_sets],
                                     "settings": p.settings.timing_view(), "graph": True})
    res["timing_lock"] = lock.record()
    if res.get("threads"):
        raise Finding(verdicts.TIMING_TAMPERED, f"{len(res['threads'])} thread(s) of the candidate's ran while it "
                      f"was timed ({', '.join(res['threads'][:3])}): work they launch runs outside the timed calls")
    summarize_timing(res)  # from the raw event times, here: not the candidate process's summary
    timed_s = float(res.get("timed_s") or 0.0)  # the measurement itself, inside the candidate's handler
    p.judge.stages.add("timed", timed_s)
    p.judge.stages.add("candidate", -timed_s)
    p.res = res


def timed_outputs(p) -> None:
    """Each timed set's last timed call (fetched one set at a time), then timed calls re-run on new values in
    the same buffers (sets k + 1, k + 2): right, and kept for the precision probe; only the first timed set
    stays held (the sealed calls and the range probe use it)."""
    k = len(p.timed_sets)
    for i, (seed, x, ref) in enumerate(p.timed_sets):
        outs = p.attempt.outputs_of("timed_output", {"index": i}, ref)
        summary = p.summary(outs, ref)
        del outs
        if not summary.cmp["correct"]:
            raise Finding(verdicts.TIMED_CALL_WRONG, f"timed call on input set {i + 1}: {summary.cmp['text']}")
        p.judged.append((f"the timed calls on input set {i + 1}", probing.signature(p, p.model, i, x, ref, p.probes),
                         summary))
    p.timed_sets = p.timed_sets[:1]
    del x, ref  # the loop's last set: no longer held by the profile (an 8 GiB input was drawn beside two others)
    for j in range(2):
        seed, x, ref = p.next_set()
        outs = p.attempt.outputs_of("timed_sample", {"index": j % k, "inputs": list(x)}, ref)
        summary = p.summary(outs, ref)
        del outs
        if not summary.cmp["correct"]:
            raise Finding(verdicts.TIMED_CALL_WRONG, f"a timed call re-run on new inputs in the same buffers: "
                          f"{summary.cmp['text']}")
        p.judged.append(("a timed call re-run on new inputs in the same buffers",
                         probing.signature(p, p.model, k + j, x, ref, p.probes), summary))
        del x, ref  # before the next set is drawn


def summarize_timing(res: dict) -> None:
    """The measurement's median, mean, minimum and spread computed in the judge from the per-call event
    times the candidate process sent (its own summary is not used): trials of ``calls_per_trial`` calls."""
    calls, n = res.get("call_us"), res.get("calls_per_trial")
    if not (isinstance(calls, list) and calls and isinstance(n, int) and 1 <= n <= len(calls)
            and all(isinstance(v, (int, float)) and math.isfinite(v) for v in calls)):
        raise Finding(verdicts.TIMING_TAMPERED, "the timing reply carries no usable per-call event times")
    trials = [statistics.fmean(calls[i:i + n]) for i in range(0, len(calls) - n + 1, n)]
    res.update(median_us=statistics.median(trials), mean_us=statistics.fmean(trials), min_us=min(trials),
               spread_pct=spread_pct(trials), trials=len(trials))
