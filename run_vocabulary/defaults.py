"""The defaults every command, run and evaluation starts from, in one place.

The stop rules' values are the paper's best replayed setting within its 40-attempt budget; the
tolerances are KernelBench's."""

from __future__ import annotations

MAX_ATTEMPTS = 40  # attempt cap of every run, whatever its policy: no run is unbounded
SOL_EPS = 2.5  # sol policy: stop once t_best <= (1 + eps) * t_SOL and the reference is beaten
PLATEAU_WINDOW = 12  # plateau policy (w): attempts in a row without gain after beating the reference
TOKEN_BUDGET = 400_000  # tokens policy: input + output tokens of a run
DEFAULT_TOLERANCE = 1e-2  # KernelBench v0 / v0.1 fp32 tolerance (atol = rtol)
STRICT_TOLERANCE = 1e-4  # KernelBench since Nov 2025
