import json
import subprocess
import sys
from pathlib import Path

import pytest

from mucutlass.cli import main

DATA = Path(__file__).parent / "data" / "sol"
ROOT = Path(__file__).resolve().parents[1]


def test_sol_file_json(capsys):
    assert main(["sol", str(DATA / "gemm.py"), "--json", "--datasheet"]) == 0
    out = json.loads(capsys.readouterr().out)
    report, work = out["report"], out["work"]
    assert work["flops"] == 2 * 1024 * 512 * 2048
    assert report["bound"] == "compute" and report["precision"] == "tf32"
    assert set(report["per_precision"]) == {"f32", "tf32x3", "tf32", "bf16", "f16", "fp8"}


def test_sol_file_table(capsys):
    assert main(["sol", str(DATA / "linear_gelu.py"), "--precision", "bf16", "--ops"]) == 0
    out = capsys.readouterr().out
    for text in ("FLOPs", "bytes fused", "bytes unfused", "intensity", "t_SOL (bf16)", "launch floor", "addmm"):
        assert text in out


def test_sol_folder_goes_on_past_broken_files(capsys):
    rc = main(["sol", str(DATA), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert out["summary"]["failed"] == 2
    assert out["summary"]["counted"] == out["summary"]["problems"] - 2 >= 9
    assert {Path(e["path"]).name for e in out["errors"]} == {"broken_import.py", "broken_forward.py"}
    assert all("\n" not in e["error"] for e in out["errors"])


def test_sol_folder_table_prints_one_line_per_broken_file(capsys):
    assert main(["sol", str(DATA)]) == 1
    captured = capsys.readouterr()
    err_lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(err_lines) == 2 and all(".py:" in line for line in err_lines)
    assert "gemm.py" in captured.out and "problems counted" in captured.out


def test_usage_errors(capsys):
    assert main(["sol", str(DATA / "gemm.py"), "--gpu", "v100"]) == 2
    assert "unknown GPU" in capsys.readouterr().err
    assert main(["sol", str(DATA / "gemm.py"), "--gpu", "a100", "--precision", "fp8"]) == 2
    assert main(["sol", str(DATA / "missing.py")]) == 2
    assert main(["sol", str(DATA / "broken_import.py")]) == 1
    assert "broken on purpose" in capsys.readouterr().err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the no-GPU message")
def test_calibrate_without_gpu_says_so(capsys):
    assert main(["calibrate", "--out", "/nonexistent/should-not-be-written.json"]) == 1
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_cli_module_does_not_import_torch():
    code = "import sys, sol_models.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.gpu
def test_calibrate_measures_this_gpu(tmp_path):
    from sol_models.calibrate import calibrate, save_profile
    from sol_models.hardware import get_gpu

    profile = calibrate("h200", precisions=("tf32", "bf16"), sizes=(2048,), runs=3)
    assert profile["dram_bw_gbps"] > 100 and profile["peak_tflops"]["bf16"] > profile["peak_tflops"]["tf32"] > 1
    save_profile(profile, tmp_path / "h200.json")
    assert get_gpu("h200", calibrated_dir=tmp_path).calibrated


def test_calibrate_glue_writes_a_profile_bounds_then_use(tmp_path, monkeypatch, capsys):
    # The measurements need a GPU; the glue around them (profile, save, CLI, get_gpu) does not.
    import types

    import torch

    import sol_models.calibrate as cal
    from sol_models.hardware import get_gpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda _i: types.SimpleNamespace(name="NVIDIA H200", multi_processor_count=132,
                                                         L2_cache_size=60 * 2**20))
    monkeypatch.setattr(cal, "measure_copy_bandwidth_gbps", lambda _torch, runs=9: (4300.0, 1.0))
    rates = {"f32": 51.0, "tf32": 360.0, "bf16": 790.0, "f16": 780.0}

    def fake_matmul(_torch, precision, n, runs=7):
        if precision == "fp8":
            raise RuntimeError("no fp8 here")
        return rates[precision] * (1.0 if n == 8192 else 0.95)

    monkeypatch.setattr(cal, "measure_matmul_tflops", fake_matmul)
    out = tmp_path / "h200.json"
    assert main(["calibrate", "--gpu", "h200", "--out", str(out), "--runs", "3"]) == 0
    assert "saved" in capsys.readouterr().out
    profile = json.loads(out.read_text())
    assert profile["peak_tflops"] == rates  # best size kept, fp8 left to the datasheet
    assert "fp8" in profile["detail"]["errors"]
    spec = get_gpu("h200", calibrated_dir=tmp_path)
    assert spec.calibrated and spec.peak_tflops["tf32"] == 360.0 and spec.dram_bw_gbps == 4300.0
    assert spec.peak_tflops["fp8"] == spec.datasheet_peak_tflops["fp8"]


PROGRAM = """program linear_gelu
input x: f32[128, 1024]
param w: f32[512, 1024] = "fc.weight"
param b: f32[512] = "fc.bias"
kernel fc = gemm(x, w^T) {
  math = tf32; tile = 128x128x32
  store y: f32 = gelu(acc + b[col])
}
output y
"""


def test_sol_program_reports_traffic_bound_and_estimate(tmp_path, capsys):
    prog = tmp_path / "lg.mcu"
    prog.write_text(PROGRAM)
    assert main(["sol", str(prog), "--json", "--datasheet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["work"]["source"] == "program"
    assert out["work"]["flops_tensor"] == 2 * 128 * 1024 * 512
    assert out["estimate"]["t_us"] > out["report"]["t_sol_us"]
    assert main(["sol", str(prog)]) == 0
    assert "estimate per step" in capsys.readouterr().out
    bad = tmp_path / "bad.mcu"
    bad.write_text(PROGRAM.replace("gemm(x, w^T)", "gemm(x, q^T)"))
    assert main(["sol", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "bad.mcu" in err and "q" in err
