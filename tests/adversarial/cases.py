"""The adversarial set: each known-bad candidate and the check that must catch it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Case:
    file: str
    caught_by: str  # a check name, or "mismatch", "crash", "cuda_error", "timeout"
    stage: str = "validate"  # "validate" or "profile"
    cpu: bool = True  # whether the trick (and its catch) works on a CPU
    strict: bool = False  # judged at the strict tolerance (1e-4: f32/tf32 only)

    @property
    def path(self) -> Path:
        return HERE / self.file

    def source(self) -> str:
        return self.path.read_text()


CASES = [
    Case("zeros.py", "input_dependence"),
    Case("cached_tensor.py", "input_dependence"),
    Case("pointer_cache.py", "input_dependence"),
    Case("calls_reference.py", "calls_reference"),
    Case("partial_write.py", "unwritten_output"),
    Case("memorized_inputs.py", "input_dependence"),
    Case("side_stream.py", "side_stream", stage="profile", cpu=False),
    Case("illegal_address.py", "crash"),  # CPU: a segfault; GPU: an illegal address ("cuda_error")
    Case("hang.py", "timeout"),
    Case("half_precision.py", "precision", strict=True),
    Case("pytorch_only.py", "pytorch_only"),
    Case("patched_timer.py", "tampering"),
]
