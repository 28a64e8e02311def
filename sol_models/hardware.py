"""The GPU table: one TOML file per GPU under ``sol_models/hardware/`` (datasheet numbers, each
with its source), optionally overlaid by a measured profile under ``hardware/calibrated/<name>.json``
written by ``mucutlass calibrate``. Bounds use the measured ceilings when a profile exists, since
no kernel reaches the datasheet's peaks."""

from __future__ import annotations

import json
import tomllib
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dsl_compiler.precision import MATH_MODES as LANGUAGE_MATH_MODES

HARDWARE_DIR = Path(__file__).resolve().parent / "hardware"
CALIBRATED_DIR = HARDWARE_DIR / "calibrated"

# Math modes a bound can be asked for: "f32" is plain fp32 (SIMT, no tensor cores); "tf32x3" issues three TF32
# MMAs per product, so its peak is a third of TF32's (derived, never in a table).
MATH_MODES = ("f32", "tf32x3", "tf32", "bf16", "f16", "fp8")


def with_split_peaks(peaks: dict[str, float]) -> dict[str, float]:
    """``peaks`` with the peak of every split math mode (``dsl_compiler.precision.MATH_MODES``) whose MMA type it
    has: that type's peak over the MMAs per product."""
    out = dict(peaks)
    for mode in LANGUAGE_MATH_MODES.values():
        if mode.split and mode.instruction in peaks:
            out[mode.name] = peaks[mode.instruction] / mode.mma_passes
    return out

# Short names people type, mapped to table entries.
ALIASES = {
    "h100": "h100_sxm",
    "h100sxm": "h100_sxm",
    "h100-sxm": "h100_sxm",
    "h100-pcie": "h100_pcie",
    "h100pcie": "h100_pcie",
    "h200-sxm": "h200",
    "h200_sxm": "h200",
    "a100": "a100_sxm_80gb",
    "a100-80gb": "a100_sxm_80gb",
    "a100_sxm": "a100_sxm_80gb",
    "4090": "rtx4090",
    "rtx-4090": "rtx4090",
    "rtx_4090": "rtx4090",
    "l40": "l40s",
}


class UnknownGpuError(ValueError):
    """A GPU name that is not in the table; the message lists the known names."""


class GpuSpec(BaseModel):
    """One GPU's ceilings. ``peak_tflops`` holds dense peaks per math mode (absent: not supported);
    when ``calibrated`` is true, ``peak_tflops`` and ``dram_bw_gbps`` are measured values and the
    datasheet ones are kept in ``datasheet_peak_tflops`` / ``datasheet_dram_bw_gbps``."""

    model_config = ConfigDict(frozen=True)
    name: str
    full_name: str = ""
    arch: str = ""
    sm_count: int = Field(gt=0)
    boost_clock_mhz: float = Field(gt=0)
    dram_bw_gbps: float = Field(gt=0)
    l2_mb: float = Field(gt=0)
    smem_per_sm_kb: float = Field(gt=0)
    peak_tflops: dict[str, float]
    launch_latency_us: float = Field(ge=0)
    source: str
    calibrated: bool = False
    datasheet_peak_tflops: dict[str, float] = Field(default_factory=dict)
    datasheet_dram_bw_gbps: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _split_peaks(cls, data):
        if isinstance(data, dict):
            for key in ("peak_tflops", "datasheet_peak_tflops"):
                if isinstance(data.get(key), dict):
                    data = {**data, key: with_split_peaks(data[key])}
        return data

    def peak_flops(self, math: str) -> float:
        """Peak FLOP/s of a math mode; raises KeyError with the supported modes if absent."""
        if math not in self.peak_tflops:
            raise KeyError(
                f"{self.name} has no {math} peak; supported: {', '.join(sorted(self.peak_tflops))}"
            )
        return self.peak_tflops[math] * 1e12

    @property
    def dram_bw_bytes_per_s(self) -> float:
        return self.dram_bw_gbps * 1e9


def canonical_name(name: str) -> str:
    key = name.strip().lower()
    return ALIASES.get(key, key)


def known_gpus() -> list[str]:
    return sorted(p.stem for p in HARDWARE_DIR.glob("*.toml"))


@lru_cache(maxsize=None)
def _datasheet(name: str) -> GpuSpec:
    path = HARDWARE_DIR / f"{name}.toml"
    if not path.is_file():
        raise UnknownGpuError(f"unknown GPU {name!r}; known: {', '.join(known_gpus())}")
    try:
        data = tomllib.loads(path.read_text())
        return GpuSpec(**data)
    except (tomllib.TOMLDecodeError, ValidationError, TypeError) as exc:
        raise UnknownGpuError(f"{path}: not a valid GPU entry: {exc}") from exc


def calibrated_path(name: str, calibrated_dir: Path | str | None = None) -> Path:
    return Path(calibrated_dir or CALIBRATED_DIR) / f"{canonical_name(name)}.json"


def apply_profile(spec: GpuSpec, profile: dict) -> GpuSpec:
    """Overlay a measured profile (as written by ``calibrate``) on a datasheet entry."""
    measured_peaks = {k: float(v) for k, v in (profile.get("peak_tflops") or {}).items() if v}
    peaks = with_split_peaks({**spec.peak_tflops, **{k: v for k, v in measured_peaks.items() if k in spec.peak_tflops}})
    bw = float(profile.get("dram_bw_gbps") or spec.dram_bw_gbps)
    device = profile.get("device_name", "")
    when = profile.get("measured_at", "")
    return spec.model_copy(
        update={
            "peak_tflops": peaks,
            "dram_bw_gbps": bw,
            "calibrated": True,
            "datasheet_peak_tflops": dict(spec.peak_tflops),
            "datasheet_dram_bw_gbps": spec.dram_bw_gbps,
            "source": f"measured by mucutlass calibrate on {device or spec.full_name} {when}".strip()
            + f"; datasheet: {spec.source}",
        }
    )


def get_gpu(name: str = "h200", calibrated: bool = True, calibrated_dir: Path | str | None = None) -> GpuSpec:
    """The GPU's ceilings: measured ones when a calibrated profile is saved (and ``calibrated``),
    else the datasheet's. Raises UnknownGpuError for a name not in the table."""
    spec = _datasheet(canonical_name(name))
    if not calibrated:
        return spec
    path = calibrated_path(spec.name, calibrated_dir)
    if not path.is_file():
        return spec
    try:
        profile = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UnknownGpuError(f"{path}: unreadable calibrated profile ({exc}); re-run `mucutlass calibrate`") from exc
    return apply_profile(spec, profile)
