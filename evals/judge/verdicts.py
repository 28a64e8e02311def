"""The judge's verdict vocabulary: every rejected or flagged candidate carries one ``rule`` from
here and a one-line reason that starts with it (``"mismatch: output 0: ..."``).

Hard rules fail the attempt; flags (``pytorch_only``, ``sol_ceiling``) keep a correct result but
keep it out of headline numbers. When one call breaks several rules, ``PRECEDENCE`` picks the one
reported: the rule that explains the others comes first (a candidate that wrote into its inputs
will also mismatch; the write is the reason).
"""

from __future__ import annotations

from typing import Literal

Rule = Literal[
    "crash", "timeout", "output_type", "inputs_mutated", "mismatch", "nonfinite", "input_independent",
    "timed_call_wrong", "timing_tampered", "framework_state", "precision", "pytorch_only", "containment",
    "channel", "sol_ceiling",
]

CRASH: Rule = "crash"  # the process died, an illegal address, exited right after answering, raised
TIMEOUT: Rule = "timeout"  # a hang past the watchdog
OUTPUT_TYPE: Rule = "output_type"  # not a plain dense tensor of the expected dtype/shape/device, or a view of an input
INPUTS_MUTATED: Rule = "inputs_mutated"  # an input differs from the judge's copy after a call
MISMATCH: Rule = "mismatch"  # outside tolerance on some input set or repeated call
NONFINITE: Rule = "nonfinite"  # NaN or inf where the reference is finite
INPUT_INDEPENDENT: Rule = "input_independent"  # output does not follow the input (constants, caches)
TIMED_CALL_WRONG: Rule = "timed_call_wrong"  # a sampled timed call's output is wrong
TIMING_TAMPERED: Rule = "timing_tampered"  # patched timers, side streams, GPU time below the wall-clock bound
FRAMEWORK_STATE: Rule = "framework_state"  # default dtype, autocast, matmul precision, cuDNN flags, grad mode
PRECISION: Rule = "precision"  # computes in a precision the problem does not allow (measured or static)
PYTORCH_ONLY: Rule = "pytorch_only"  # less than half of the work in kernels the candidate brought (a flag)
CONTAINMENT: Rule = "containment"  # writes into protected folders, escaped processes, memory limit
CHANNEL: Rule = "channel"  # a reply not bound to the pending request, or stray bytes on the channel
SOL_CEILING: Rule = "sol_ceiling"  # faster than physically possible (a flag)

RULES: tuple[Rule, ...] = (
    CRASH, TIMEOUT, OUTPUT_TYPE, INPUTS_MUTATED, MISMATCH, NONFINITE, INPUT_INDEPENDENT, TIMED_CALL_WRONG,
    TIMING_TAMPERED, FRAMEWORK_STATE, PRECISION, PYTORCH_ONLY, CONTAINMENT, CHANNEL, SOL_CEILING,
)
FLAG_RULES: frozenset[str] = frozenset({PYTORCH_ONLY, SOL_CEILING})
HARD_RULES: frozenset[str] = frozenset(RULES) - FLAG_RULES

# Which rule a verdict names when several were broken at once: the cause before its symptoms.
PRECEDENCE: tuple[Rule, ...] = (
    CHANNEL, CRASH, TIMEOUT, CONTAINMENT, FRAMEWORK_STATE, TIMING_TAMPERED, OUTPUT_TYPE, INPUTS_MUTATED,
    INPUT_INDEPENDENT, NONFINITE, MISMATCH, TIMED_CALL_WRONG, PRECISION, PYTORCH_ONLY, SOL_CEILING,
)


def is_rule(name: str) -> bool:
    return name in RULES


def first_rule(names) -> str | None:
    """The rule of highest precedence among ``names`` (None when none is a rule)."""
    present = set(names)
    return next((r for r in PRECEDENCE if r in present), None)


def reason(rule: str, text: str) -> str:
    """``"rule: text"`` on one line (what every verdict's ``reason`` looks like)."""
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; the vocabulary is {', '.join(RULES)}")
    return f"{rule}: {' '.join(str(text).split())}"


def rule_of(reason_text: str) -> str | None:
    """The rule a reason starts with (None when it starts with none)."""
    head = (reason_text or "").split(":", 1)[0].strip()
    return head if head in RULES else None
