"""Work attribution: the share of the problem's FLOPs the candidate's own code did on its counted call
(evals.judge.attribution): below half, the candidate is flagged ``pytorch_only`` (a flag, not a verdict)."""

from __future__ import annotations

from evals.judge import verdicts
from evals.judge.attribution import (WorkSplit, low_precision_products, pytorch_only_reason, split_kernel_time,
                                     work_share)
from evals.judge.findings import Finding


def products_in_allowed_precision(attempt, problem) -> None:
    """A Python candidate's recorded products must run in a precision the problem admits: their operands' dtypes say
    what ran (a program's precision is read from its text)."""
    if attempt.is_program:
        return
    low = low_precision_products((attempt.work or {}).get("ops") or [], problem.allowed_precisions)
    if low:
        more = f" (and {len(low) - 1} more)" if len(low) > 1 else ""
        raise Finding(verdicts.PRECISION, f"the counted call ran {low[0]}{more}: not a precision this problem allows "
                      f"({', '.join(problem.allowed_precisions)})")


def attributed_work(v) -> None:
    work = v.attempt.work or {"error": "no call was counted"}
    with v.judge.stages("attribution"):
        v.info.update(work_share(work, v.counted_flops, v.attempt.program, v.problem, v.counted_products))
    products_in_allowed_precision(v.attempt, v.problem)


def validation_flags(info: dict) -> list[dict]:
    share = info.get("candidate_work_share")
    if share is None or share >= 0.5:
        return []
    why = info.get("work_reason") or (f"{100 * (1 - share):.0f}% of the problem's FLOPs ran in PyTorch's own "
                                      f"operators; less than half of the work is in kernels the candidate brought")
    return [{"rule": verdicts.PYTORCH_ONLY, "reason": verdicts.reason(verdicts.PYTORCH_ONLY, why)}]


def timed_work(p) -> None:
    """The kernels the timed calls ran (their graphs replayed once more under the profiler, on a GPU): a candidate
    that does its own work on the counted call and a library's on the timed ones shows here."""
    if p.device.type != "cuda":
        return
    reply = p.attempt.request("timed_kernels", {})
    kernels = reply.get("kernels") if isinstance(reply, dict) else None
    if isinstance(kernels, list) and kernels:
        p.timed_kernels = [(str(k[0]), float(k[1])) for k in kernels if isinstance(k, (list, tuple)) and len(k) == 2]
        p.timed_graphs = int(reply.get("graphs") or 0)


def timed_work_reason(timed_kernels, program: bool, graphs: int) -> str | None:
    """Why the timed calls' own kernels say the work was a library's (None: they do not)."""
    if not timed_kernels:
        return None
    why = pytorch_only_reason(split_kernel_time(timed_kernels, program=program), None)
    if why is None:
        return None
    where = "the timed calls' captured graphs" if graphs else "the timed calls, run again"
    return f"in {where}: {why}"


def counted_call(p) -> None:
    """A profile's work, recorded on a fresh set in a call whose output is compared like every other's."""
    seed, x, ref = p.next_set()
    p.attempt.request("release_timed", {})  # the last check of the timed calls is done: their memory goes first
    outs = p.attempt.call(p.inst, x, ref, count={"kernels": p.device.type == "cuda"})
    from evals.judge import compare

    with p.judge.stages("compare"):
        cmp = compare.summarize(outs, ref, p.tol, None).cmp
    del outs
    if not cmp["correct"]:
        raise Finding(cmp["rule"], f"the call whose work was recorded: {cmp['text']}")
    flops = p.judge.reference_flops(p.problem, p.model_seed, x)
    products = p.judge.reference_products(p.problem, p.model_seed, x)
    with p.judge.stages("attribution"):
        p.work = work_share(p.attempt.work or {"error": "no call was counted"}, flops, p.attempt.program, p.problem,
                            products)
        if p.timed_kernels:
            p.work["timed_split_us"] = split_kernel_time(p.timed_kernels, program=p.attempt.is_program)._asdict()
    products_in_allowed_precision(p.attempt, p.problem)


def profile_flags(p, candidate: dict) -> list[dict]:
    """GPU time says who did the work where the candidate's kernels are real ones: Python candidates and built
    programs (a program on the interpreter runs its kernels as PyTorch operators by design)."""
    work = p.work or {}
    timed_kernels = candidate.get("source") is not None or candidate.get("backend") == "cutlass"
    why = None
    if work.get("work_reason"):  # the work ran where no record reaches (another process)
        why = work["work_reason"]
    elif timed_kernels and work.get("split_us") is not None:
        # the kernels' names say it (a library called from C++ bypasses a FLOP counter), with data movement
        # around the candidate's kernels left out; a Python candidate's operator FLOPs beside them
        why = pytorch_only_reason(WorkSplit(**work["split_us"]),
                                  work.get("candidate_work_share") if not p.attempt.is_program else None)
    elif work.get("candidate_work_share") is not None and work["candidate_work_share"] < 0.5:
        why = (f"{100 * (1 - work['candidate_work_share']):.0f}% of the problem's FLOPs ran in PyTorch's own "
               f"operators; less than half of the work is in kernels the candidate brought")
    if why is None and timed_kernels:  # the counted call is one call; the timed ones are what the speedup is of
        why = timed_work_reason(p.timed_kernels, p.attempt.is_program, p.timed_graphs)
    return [{"rule": verdicts.PYTORCH_ONLY, "reason": verdicts.reason(verdicts.PYTORCH_ONLY, why)}] if why else []
