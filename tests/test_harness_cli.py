"""`mucutlass bench` and `mucutlass suite`: exit codes, output, and a light import."""

import json
import subprocess
import sys

from mucutlass.cli import main


def test_cli_module_imports_nothing_heavy():
    code = "import sys, evals.harness_cli; print(any(m in sys.modules for m in ('torch', 'evals.judge.client')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_suite_list_and_show(capsys):
    assert main(["suite", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["builtin"]["problems"] >= 28 and rows["smoke"]["problems"] == 5
    assert main(["suite", "show", "smoke"]) == 0
    assert "smoke/01_gemm_tiny" in capsys.readouterr().out
    assert main(["suite", "show", "nope"]) == 1
    assert "unknown suite" in capsys.readouterr().err
    # `suite list NAME` lists that suite's problems, as `suite show NAME` does
    capsys.readouterr()
    assert main(["suite", "show", "smoke"]) == 0
    shown = capsys.readouterr().out
    assert main(["suite", "list", "smoke"]) == 0
    assert capsys.readouterr().out == shown and "smoke/01_gemm_tiny" in shown


def test_bench_without_gpu_prints_the_bound(capsys):
    import torch

    assert main(["bench", "evals/suites/smoke/01_gemm_tiny.py", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    row = doc["rows"][0]
    assert row["problem"] == "01_gemm_tiny"
    if not torch.cuda.is_available():
        assert row.get("eager_fp32_us") is None
    assert row["t_sol_us"] is None or row["t_sol_us"] > 0


def test_bench_errors(capsys, tmp_path):
    assert main(["bench"]) == 2
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n")
    assert main(["bench", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "bad.py" in err and "missing Model" in err and "Traceback" not in err


def test_baseline_rows_summary_and_markdown():
    import importlib.util
    from pathlib import Path

    from evals.judge.client import ReferenceTimings
    from evals.harness_cli import baseline_row, summarize
    from evals.metrics import geomean
    from evals.problems import load_suite

    class FakeHarness:  # the reference timings a GPU would give
        def reference_timings(self, problem):
            return ReferenceTimings(eager_fp32_us=40.0, eager_tf32_us=10.0, compile_us=8.0, timing_source="gpu")

    problem = load_suite("smoke")[0]
    row = baseline_row(problem, FakeHarness(), "h200")
    assert row["best_us"] == 8.0
    if row["t_sol_us"]:
        assert abs(row["compile_sol_fraction"] - row["t_sol_us"] / 8.0) < 1e-12
    s = summarize([row, dict(row)])
    assert abs(s["eager_tf32_over_fp32_geomean_speedup"] - 4.0) < 1e-12
    assert geomean([1.0, 4.0, None, 0.0]) == 2.0
    spec = importlib.util.spec_from_file_location("bench_baselines", Path("benchmarks/bench_baselines.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    md = mod.to_markdown({"source": "smoke", "gpu": "h200", "gpu_name": "NVIDIA H200", "date": "2026-11-30",
                          "precision": "tf32", "versions": {"torch": "x"}, "rows": [row], "summary": s})
    assert "| smoke/01_gemm_tiny |" in md and "8.000 us" in md and "best of three" in md
