import json

import pytest

from sol_models.hardware import MATH_MODES, UnknownGpuError, get_gpu, known_gpus

TABLE = ["a100_sxm_80gb", "b200", "h100_pcie", "h100_sxm", "h200", "l40s", "rtx4090"]


def test_table_has_every_gpu_with_a_source():
    assert known_gpus() == TABLE
    for name in TABLE:
        spec = get_gpu(name, calibrated=False)
        assert spec.source and spec.sm_count > 0 and spec.dram_bw_gbps > 0
        assert {"f32", "tf32", "bf16", "f16"} <= set(spec.peak_tflops)
        assert set(spec.peak_tflops) <= set(MATH_MODES)
        # dense tensor-core peaks rise as precision narrows
        assert spec.peak_tflops["f32"] <= spec.peak_tflops["tf32"] < spec.peak_tflops["bf16"]


def test_h200_datasheet_numbers_and_aliases():
    spec = get_gpu("h200", calibrated=False)
    assert (spec.sm_count, spec.dram_bw_gbps, spec.smem_per_sm_kb) == (132, 4800, 228)
    assert spec.peak_tflops["tf32"] == pytest.approx(494.7)
    assert spec.peak_flops("bf16") == pytest.approx(989.4e12)
    assert get_gpu("H100", calibrated=False).name == "h100_sxm"
    assert "fp8" not in get_gpu("a100", calibrated=False).peak_tflops
    with pytest.raises(KeyError, match="no fp8 peak"):
        get_gpu("a100", calibrated=False).peak_flops("fp8")


def test_unknown_gpu_names_the_known_ones():
    with pytest.raises(UnknownGpuError, match="unknown GPU 'v100'.*h200"):
        get_gpu("v100")


def test_calibrated_profile_replaces_peaks_and_keeps_datasheet(tmp_path):
    profile = {"name": "h200", "device_name": "NVIDIA H200", "measured_at": "2026-11-30T12:00:00Z",
               "dram_bw_gbps": 4300.0, "peak_tflops": {"tf32": 360.0, "bf16": 780.0, "fp4": 1.0}}
    (tmp_path / "h200.json").write_text(json.dumps(profile))
    spec = get_gpu("h200", calibrated_dir=tmp_path)
    assert spec.calibrated
    assert spec.dram_bw_gbps == 4300.0
    assert spec.peak_tflops["tf32"] == 360.0 and spec.peak_tflops["bf16"] == 780.0
    assert spec.peak_tflops["f16"] == pytest.approx(989.4)  # not measured: datasheet kept
    assert "fp4" not in spec.peak_tflops  # unknown modes are ignored
    assert spec.datasheet_peak_tflops["tf32"] == pytest.approx(494.7)
    assert spec.datasheet_dram_bw_gbps == 4800
    assert "measured" in spec.source
    datasheet = get_gpu("h200", calibrated=False, calibrated_dir=tmp_path)
    assert not datasheet.calibrated and datasheet.peak_tflops["tf32"] == pytest.approx(494.7)


def test_unreadable_profile_is_a_clear_error(tmp_path):
    (tmp_path / "h200.json").write_text("{not json")
    with pytest.raises(UnknownGpuError, match="re-run `mucutlass calibrate`"):
        get_gpu("h200", calibrated_dir=tmp_path)
