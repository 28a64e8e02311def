"""The judge: validates and times candidates against a problem's reference, in processes of its own.

This is the package's one door for the rest of the product: the graph's nodes, the evaluation runner and
the command line use only the names below. Inside, ``client`` (the harness the caller holds; it never
imports torch) talks to the judge process (``process``), which runs every attempt in a fresh candidate
process (``candidate``) under a supervisor (``supervisor``, ``sandbox``), over the wire format of
``wire``; the runtime checks (``checks``), precision probes (``probes``), sealed calls (``sealed``), work
attribution (``attribution``) and timing (``timing``) are its own modules. docs/harness.md is the design
and threat model.
"""

import contextlib

from evals.judge.client import (
    Candidate,
    Harness,
    HarnessSettings,
    ReferenceTimings,
    SetResult,
    Timing,
    Validation,
    WorkerFailure,
)
from evals.judge.integrity import CheckResult, sol_ceiling_check


@contextlib.contextmanager
def tf32_mode(matmul: bool, cudnn: bool):
    """TF32 allowed (or not) in matmuls and in cuDNN convolutions, restored on exit: the mode the judge times
    PyTorch's variants under (``evals.judge.process.tf32_mode``), for callers that run them again."""
    from evals.judge.process import tf32_mode as judge_tf32_mode

    with judge_tf32_mode(matmul, cudnn):
        yield


def compare_to_reference(outs, refs, tolerance: float) -> dict:
    """The judge's comparison of outputs with the reference's (``evals.judge.compare.compare``: a non-finite value
    where the reference is finite, then any element outside atol = rtol = ``tolerance``), for callers that check
    outputs of their own (PyTorch's variants at a problem's tolerance). Imports torch when called, not before."""
    from evals.judge.compare import compare

    return compare(list(outs), list(refs), tolerance)


__all__ = ["Candidate", "CheckResult", "Harness", "HarnessSettings", "ReferenceTimings", "SetResult", "Timing",
           "Validation", "WorkerFailure", "compare_to_reference", "sol_ceiling_check", "tf32_mode"]
