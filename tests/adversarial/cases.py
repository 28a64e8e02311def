"""The adversarial set: each known-bad candidate and the check that must catch it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Case:
    file: str
    caught_by: str  # the verdict rule (evals.verdicts.RULES)
    stage: str = "validate"  # "validate" or "profile"
    cpu: bool = True  # whether the trick (and its catch) works on a CPU
    strict: bool = False  # judged at the strict tolerance (1e-4: f32/tf32 only)

    @property
    def path(self) -> Path:
        return HERE / self.file

    def source(self) -> str:
        return self.path.read_text()


CASES = [
    Case("zeros.py", "input_independent"),
    Case("cached_tensor.py", "input_independent"),
    Case("pointer_cache.py", "input_independent"),
    Case("calls_reference.py", "crash"),  # the candidate process holds no reference to find: it raises
    Case("partial_write.py", "mismatch"),
    Case("memorized_inputs.py", "input_independent"),
    Case("side_stream.py", "timing_tampered", stage="profile", cpu=False),
    Case("illegal_address.py", "crash"),  # CPU: a segfault; GPU: an illegal address
    Case("hang.py", "timeout"),
    Case("half_precision.py", "precision", strict=True),
    Case("pytorch_only.py", "pytorch_only"),
    Case("patched_timer.py", "input_independent"),  # its patched allclose runs in its own process only
]
