"""benchmarks/bench_offline.py end to end on the interpreter (no GPU: timings are estimates)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_offline", ROOT / "benchmarks" / "bench_offline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_geomean_skips_missing_values():
    bench = load_bench()
    assert bench.geomean([2.0, 8.0, None, 0.0]) == 4.0
    assert bench.geomean([]) is None


def test_bench_writes_table_and_summary(tmp_path, monkeypatch):
    monkeypatch.setenv("MUCUTLASS_RECORD", str(tmp_path / "record.json"))
    bench = load_bench()
    rc = bench.main(["--suite", "smoke", "--only", "02_linear_relu_tiny", "--backend", "interpreter",
                     "--max-attempts", "1", "--out", str(tmp_path)])
    assert rc == 0
    (json_path,) = tmp_path.glob("*-h200-offline.json")
    doc = json.loads(json_path.read_text())
    assert set(doc["summary"]) >= {"geomean_speedup_vs_eager_fp32", "geomean_speedup_vs_eager_tf32",
                                   "geomean_speedup_vs_compile", "geomean_sol_fraction", "correct", "total"}
    (row,) = doc["rows"]
    assert row["correct"] and row["tokens"] == 0 and row["timing_source"] == "estimate"
    assert row["ours_us"] > 0 and row["t_sol_us"] > 0
    assert "bound" in row["why"]  # a launch-bound toy is far from SOL, and the report says why
    md = json_path.with_suffix(".md").read_text()
    assert "| 02_linear_relu_tiny |" in md and "**geomean**" in md


def test_bad_suite_is_an_input_error(tmp_path, capsys):
    bench = load_bench()
    assert bench.main(["--suite", "no-such-suite", "--out", str(tmp_path)]) == 1
    assert "error:" in capsys.readouterr().err


def test_table_from_a_finished_evaluation(tmp_path, capsys):
    from evals.store import ResultsStore
    from graph.records import AttemptRecord, RunSummary

    store = ResultsStore(tmp_path / "results.sqlite")
    store.init_evaluation({"tiers": ["offline"], "policies": ["fixed"]}, {"gpu": "NVIDIA H200", "versions": {"torch": "x"}})
    attempt = AttemptRecord(index=1, program_text="", compile_ok=True, correct=True, t_us=50.0, timing_source="gpu",
                            precision="tf32", reached="done")
    store.finish_run(RunSummary(problem="smoke/02_linear_relu_tiny", tier="offline", policy="fixed", backend="cutlass",
                                gpu="h200", attempts=[attempt], best_index=1, best_t_us=50.0, t_sol_us=10.0,
                                reference_us={"eager_fp32": 200.0, "eager_tf32": 100.0, "compile": 75.0}))
    store.close()
    bench = load_bench()
    out = tmp_path / "out"
    assert bench.main(["--suite", "smoke", "--only", "02_linear_relu_tiny", "01_gemm_tiny", "--out", str(out),
                       "--from-eval", str(tmp_path / "results.sqlite")]) == 0
    doc = json.loads(next(out.glob("*-offline.json")).read_text())
    assert doc["gpu"] == "NVIDIA H200" and doc["versions"] == {"torch": "x"}
    rows = {r["problem"]: r for r in doc["rows"]}
    linear = rows["02_linear_relu_tiny"]
    assert linear["speedup_vs_eager_fp32"] == 4.0 and linear["speedup_vs_eager_tf32"] == 2.0
    assert linear["speedup_vs_compile"] == 1.5 and linear["sol_fraction"] == 0.2
    assert not rows["01_gemm_tiny"]["correct"] and "no finished run" in rows["01_gemm_tiny"]["why"]
    assert doc["summary"]["correct"] == 1 and doc["summary"]["total"] == 2
