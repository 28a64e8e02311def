"""Precision, measured on every output the judge read (evals.judge.probes): each call's kept values against
its own input set's signatures, then, where f16 is not allowed and nothing was found, f16's range probes
called on the first set (as an ordinary call at validation, as a timed call at profile)."""

from __future__ import annotations

import math
import os

from evals.judge import compare, probes, verdicts
from evals.judge.checks import probing
from evals.judge.findings import Finding


def text(info: dict, problem) -> str:
    probe = info.get("probe") or {}
    err = probe.get("candidate_error")
    if probe.get("beyond_budget"):
        return (f"its error against a float64 reference ({err:.2e} on {info.get('probe_call') or 'a probe'}) is "
                f"larger than the allowed precisions make there (at most {probe.get('error_budget', 0.0):.2e}); this "
                f"problem allows only {', '.join(problem.allowed_precisions)}: compute in one of them throughout")
    return (f"its errors carry {info['measured_precision']} rounding (relative error "
            f"{'inf' if err is None else f'{err:.2e}'} on {info.get('probe_call') or 'a probe'}); this problem "
            f"allows only {', '.join(problem.allowed_precisions)}")


def measure(op, judged: list, x0: list, range_probe: bool = True, timed: bool = False,
            probed: list | None = None) -> dict:
    """The precision the candidate's outputs carry: ``judged`` ((what, signature, summary) per call read),
    then f16's range probes on ``x0`` (the first set's inputs) where f16 is not allowed and nothing was
    found. With ``timed`` the range probe runs as the first timed call, in its buffers (``timed_sample``): a
    precision switched on for the timed path only, or for a later instance, overflows there."""
    if not probing.needed(op.problem):
        return {}
    with op.judge.stages("probes"):
        found, numbers, where = probing.judge_calls(op.problem, judged)
    if probed is None:  # [sets probed, sets judged]
        probed = [sum(sig is not None for _, sig, _ in judged), len(judged)]
    if found is None and range_probe and "f16" not in tuple(op.problem.allowed_precisions):
        for what, scaled, ref, probe in range_probes(op, x0):
            if timed:
                outs = op.attempt.outputs_of("timed_sample", {"index": 0, "inputs": list(scaled)}, ref)
                what = f"{what}, as a timed call"
            else:
                outs = op.attempt.outputs_of("call", {"instance": op.inst, "inputs": scaled, "poison": None, "keep": None,
                                                      "inplace": None, "out_nbytes": [], "input_key": 0}, ref)
            with op.judge.stages("probes"):
                summary = compare.summarize(outs, ref, op.tol, op.keys)
                del outs
                level, nums = probes.judge(summary.sample, probe, tuple(op.problem.allowed_precisions),
                                           nonfinite=summary.nonfinite)
            if level is not None:
                found, numbers, where = level, nums, what
                break
    return {"measured_precision": found, "probe": numbers, "probed_sets": probed,
            **({"probe_call": where} if where else {})}


def range_probes(op, inputs: list):
    """f16's range probes for ``inputs`` that say something: (what, input set, its reference, signatures). The
    set past f16's range (its operands overflow), and random signs inside it whose sums overflow f16's
    arithmetic (a few draws, until the emulated f16 output passes 65504 somewhere)."""
    with op.judge.stages("probes"):
        scaled = probes.range_probe(inputs)
    ref = op.judge.reference(op.problem, op.model_seed, scaled)
    with op.judge.stages("probes"):
        probe = probes.signatures(op.model, scaled, ref, op.keys.positions, op.problem.allowed_precisions)
    if probe is not None and math.isinf(probe["errors"]["f16"]):
        yield "the range probe (values past f16's range)", scaled, ref, probe
    del scaled
    for _ in range(3):
        with op.judge.stages("probes"):
            signs = probes.in_range_probe(inputs, int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF)
        ref = op.judge.reference(op.problem, op.model_seed, signs)
        with op.judge.stages("probes"):
            probe = probes.signatures(op.model, signs, ref, op.keys.positions, op.problem.allowed_precisions)
        if probe is not None and math.isinf(probe["errors"]["f16"]):
            yield "the range probe (values f16 holds, sums it does not)", signs, ref, probe
            return


def measured_precision(v) -> None:
    """A validation's every output read (each set, the repeated call on set 1, the in-place call with set 2's
    values), then the range probes: recorded in ``info``; the verdict, if any, is given after the other checks."""
    judged = [(rec.what, rec.signature, rec.summary) for rec in v.sets]
    judged.append(("the repeated call on input set 1", v.sets[0].signature, v.again))
    if v.inplace is not None:
        judged.append(("new values in the same buffers (input set 2)", v.sets[1].signature, v.inplace))
    v.info.update(measure(v, judged, v.kept(0)[0], range_probe=True,
                          probed=[sum(rec.signature is not None for rec in v.sets), len(v.sets)]))


def timed_precision(p) -> None:
    """A profile's timed outputs, each against its own set's signatures (a precision turned on only while timed
    or captured)."""
    measured = measure(p, p.judged, p.x0, range_probe=False)
    if measured.get("measured_precision"):
        raise Finding(verdicts.PRECISION, text(measured, p.problem))


def timed_range_probe(p) -> None:
    """f16's range, probed as a timed call (the sealed calls are done with its buffers): the mantissa probes
    cannot tell f16 from TF32, and the validation's range probes ran on another instance, untimed."""
    measured = measure(p, [], p.x0, range_probe=True, timed=True)
    if measured.get("measured_precision"):
        raise Finding(verdicts.PRECISION, text(measured, p.problem))
