"""A problem as every library sees it: the fields a loaded problem (``evals.problems.Problem``) has, as a
Protocol, and the one rule for the precisions a problem allows when it names none.

Imports nothing of ours, so the compiler (``dsl_compiler``) and the SOL models (``sol_models``) type against it
without depending on the evaluations."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Protocol, runtime_checkable

from run_vocabulary.defaults import DEFAULT_TOLERANCE

ALL_PRECISIONS: tuple[str, ...] = ("f32", "tf32", "bf16", "f16")
STRICT_PRECISIONS: tuple[str, ...] = ("f32", "tf32")


def default_precisions(tolerance: float) -> tuple[str, ...]:
    """Half-precision inputs fail 1e-4 against an fp32 reference; TF32 passes it on most problems."""
    return ALL_PRECISIONS if tolerance >= DEFAULT_TOLERANCE else STRICT_PRECISIONS


# what a problem allows that names neither precisions nor a tolerance: the default tolerance's
DEFAULT_PRECISIONS: tuple[str, ...] = default_precisions(DEFAULT_TOLERANCE)


@runtime_checkable
class Problem(Protocol):
    """A KernelBench-format problem, loaded: ``module`` defines ``Model``, ``get_inputs`` and ``get_init_inputs``."""

    name: str
    path: str
    source: str
    module: ModuleType
    tolerance: float  # atol = rtol of the comparison with the reference
    allowed_precisions: tuple[str, ...]  # the math precisions a candidate may compute in
    setup_error: str  # why its setup failed where it was checked ("" when it did not): never run it then


@dataclass(frozen=True)
class ProblemValue:
    """A problem made in code rather than loaded from a suite (a warm-up, a file traced by its path): the
    ``Problem`` protocol's fields, with its defaults. ``module`` None: whoever needs it imports ``path``."""

    name: str
    path: str
    module: ModuleType | None = None
    source: str = ""
    tolerance: float = DEFAULT_TOLERANCE
    allowed_precisions: tuple[str, ...] = DEFAULT_PRECISIONS
    setup_error: str = ""
