"""benchmarks/bench_offline.py end to end on the interpreter (no GPU: timings are estimates)."""

from __future__ import annotations

import importlib.util
import json

import pytest
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
    (json_path,) = tmp_path.glob("*-h200-offline-smoke.json")
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
    from run_vocabulary.records import AttemptRecord, RunSummary

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
    doc = json.loads(next(out.glob("*-offline-smoke.json")).read_text())
    assert doc["gpu"] == "NVIDIA H200" and doc["versions"] == {"torch": "x"}
    rows = {r["problem"]: r for r in doc["rows"]}
    linear = rows["02_linear_relu_tiny"]
    assert linear["speedup_vs_eager_fp32"] == 4.0 and linear["speedup_vs_eager_tf32"] == 2.0
    # the table's t_SOL is its own, from the datasheet's peaks (the run's 10 us came from the calibrated ones)
    from evals.problems import load_suite
    from sol_models.bounds import sol_report
    from sol_models.counting import count_problem
    from sol_models.hardware import get_gpu

    problem = next(p for p in load_suite("smoke") if p.name == "02_linear_relu_tiny")
    datasheet_us = sol_report(count_problem(problem), get_gpu("h200", calibrated=False), precision="tf32").t_sol_us
    assert linear["speedup_vs_compile"] == 1.5 and linear["t_sol_us"] == pytest.approx(datasheet_us)
    assert linear["sol_fraction"] == pytest.approx(datasheet_us / 50.0) and doc["sol_peaks"] == "datasheet"
    assert not rows["01_gemm_tiny"]["correct"] and "no finished run" in rows["01_gemm_tiny"]["why"]
    assert doc["summary"]["correct"] == 1 and doc["summary"]["total"] == 2


def test_rows_give_the_bound_of_the_kept_programs_precision():
    """An f16 kernel is held to the f16 bound: half TF32's on a compute-bound GEMM, the same on a memory-bound one."""
    from evals.problems import load_suite
    from run_vocabulary.records import AttemptRecord, RunSummary

    bench = load_bench()
    builtin = {p.name: p for p in load_suite("builtin")}
    square = builtin["01_gemm_square"]
    sol = bench._sol(square, "h200")
    f16, tf32 = sol["per_precision"]["f16"]["t_sol_us"], sol["per_precision"]["tf32"]["t_sol_us"]
    assert sol["bound"] == "compute" and f16 < 0.6 * tf32
    assert bench.sol_at_precision_us(tf32, sol, "f16") == pytest.approx(f16)
    assert bench.sol_at_precision_us(tf32, sol, "f16,tf32") == pytest.approx(f16)
    assert bench.sol_at_precision_us(tf32, sol, "tf32") == pytest.approx(tf32)
    assert bench.sol_at_precision_us(tf32, sol, None) == pytest.approx(tf32)

    def row(precision, t_us):
        attempt = AttemptRecord(index=1, correct=True, t_us=t_us, timing_source="gpu", precision=precision, reached="done")
        summary = RunSummary(problem=square.name, tier="offline", policy="fixed", backend="cutlass", gpu="h200",
                             attempts=[attempt], best_index=1, best_t_us=t_us, t_sol_us=tf32,
                             reference_us={"eager_tf32": 2 * tf32})
        return bench.problem_row(square, summary, sol, "h200")

    fast = row("f16", 0.8 * tf32)  # faster than the TF32 bound, slower than the f16 one: honest
    assert fast["precision"] == "f16" and fast["sol_fraction"] == pytest.approx(1.25)
    assert fast["t_sol_at_precision_us"] == pytest.approx(f16)
    assert fast["sol_fraction_at_precision"] == pytest.approx(f16 / (0.8 * tf32))
    slow = row("tf32", 2 * tf32)
    assert slow["sol_fraction_at_precision"] == slow["sol_fraction"] == pytest.approx(0.5)
    summary = bench.summarize([fast, slow])
    assert summary["geomean_sol_fraction"] == pytest.approx((1.25 * 0.5) ** 0.5)
    assert summary["geomean_sol_fraction_at_precision"] == pytest.approx((f16 / (0.8 * tf32) * 0.5) ** 0.5)
    assert summary["precisions"] == {"f16": 1, "tf32": 1}
    md = bench.to_markdown({"suite": "builtin", "gpu": "h200", "backend": "cutlass", "date": "d", "max_attempts": 1,
                            "policy": "fixed", "rows": [fast, slow], "summary": summary})
    assert "t_SOL at precision" in md and "| f16 |" in md and "1 f16, 1 tf32" in md


def test_prebuild_takes_the_first_candidates_and_the_best_of_each_other_precision(tmp_path, monkeypatch):
    from evals.problems import load_suite
    from nodes.offline.policy import OfflineTier

    monkeypatch.setenv("MUCUTLASS_RECORD", str(tmp_path / "record.json"))
    bench = load_bench()
    problem = {p.name: p for p in load_suite("builtin")}["11_linear_relu"]
    candidates = OfflineTier(use_record=False).candidates(problem, "h200")
    assert candidates[0].math == "f16"
    programs = bench.candidate_programs(problem, "h200", 1)  # the first, and the best TF32 one
    assert [{k.config.math for k in p.kernels} for p in programs] == [{"f16"}, {"tf32"}]
    programs = bench.candidate_programs(problem, "h200", 3)  # every precision among the first three already
    assert len(programs) == 3 and {"tf32"} in [{k.config.math for k in p.kernels} for p in programs]


def test_a_slower_program_is_kept_as_a_fallback_to_pytorch(tmp_path):
    """The floor: where eager TF32 beats our best, the row keeps PyTorch's time, flags it as a fallback and
    computes the speedups from PyTorch's time (1.0x over eager TF32), never from ours."""
    from evals.store import ResultsStore
    from run_vocabulary.records import AttemptRecord, RunSummary

    store = ResultsStore(tmp_path / "results.sqlite")
    store.init_evaluation({"tiers": ["offline"], "policies": ["fixed"]}, {"gpu": "NVIDIA H200", "versions": {}})
    refs = {"eager_fp32": 400.0, "eager_tf32": 100.0, "compile": 120.0}
    slow = AttemptRecord(index=1, program_text="", compile_ok=True, correct=True, t_us=150.0, timing_source="gpu",
                         precision="f16", reached="done")
    fast = slow.model_copy(update={"t_us": 80.0})
    for name, attempt in (("smoke/02_linear_relu_tiny", slow), ("smoke/01_gemm_tiny", fast)):
        store.finish_run(RunSummary(problem=name, tier="offline", policy="fixed", backend="cutlass", gpu="h200",
                                    attempts=[attempt], best_index=1, best_t_us=attempt.t_us, reference_us=refs))
    store.close()
    bench = load_bench()
    out = tmp_path / "out"
    assert bench.main(["--suite", "smoke", "--only", "02_linear_relu_tiny", "01_gemm_tiny", "--out", str(out),
                       "--from-eval", str(tmp_path / "results.sqlite")]) == 0
    doc = json.loads(next(out.glob("*-offline-smoke.json")).read_text())
    rows = {r["problem"]: r for r in doc["rows"]}
    slow_row, fast_row = rows["02_linear_relu_tiny"], rows["01_gemm_tiny"]
    assert slow_row["fallback"] == "eager_tf32" and slow_row["kept_us"] == 100.0 and slow_row["ours_us"] == 150.0
    assert slow_row["speedup_vs_eager_tf32"] == 1.0 and slow_row["precision"] == "eager_tf32"
    assert slow_row["ours_vs_floor"] == pytest.approx(100.0 / 150.0)
    assert slow_row["why"].startswith("fallback: PyTorch eager with TF32")
    assert fast_row["fallback"] is None and fast_row["kept_us"] == 80.0 and fast_row["speedup_vs_eager_tf32"] == 1.25
    s = doc["summary"]
    assert s["fallbacks"] == ["02_linear_relu_tiny"] and s["ours_kept"] == 1
    assert s["slowest_vs_pytorch_best"] == pytest.approx(100.0 / 150.0)
    assert slow_row["fallback_cause"] == "slower than PyTorch" and fast_row["fallback_cause"] is None
    assert s["fallbacks_by_cause"] == {"slower than PyTorch": 1}
    md = next(out.glob("*-offline-smoke.md")).read_text()
    assert "**eager_tf32**" in md and "1 fallback(s)" in md and "Fallbacks by cause: slower than PyTorch 1." in md


def test_a_fallback_without_a_correct_program_names_the_judge_where_the_harness_failed():
    from run_vocabulary.records import AttemptRecord, RunSummary

    bench = load_bench()

    def summary(*attempts):
        return RunSummary(problem="p", tier="offline", policy="fixed", backend="cutlass", gpu="h200",
                          attempts=list(attempts))

    judge = AttemptRecord(index=1, compile_ok=True, judge_failed=True,
                          failure_reason="validate: the judge failed: OutOfMemoryError: ...")
    wrong = AttemptRecord(index=2, compile_ok=True, failure_reason="mismatch: max abs error 3.1")
    unbuilt = AttemptRecord(index=1, compile_ok=False, failure_reason="E201 at 3:5: unknown op")
    assert bench.fallback_cause(summary(wrong, judge), None) == "judge"
    assert bench.fallback_cause(summary(wrong), None) == "no correct program"
    assert bench.fallback_cause(summary(unbuilt), None) == "no compiled program"
    assert bench.fallback_cause(summary(wrong), 120.0) == "slower than PyTorch"


def test_kernel_count_and_build_estimate(tmp_path, capsys, monkeypatch):
    """--count-kernels: the programs --prebuild would build and their unique kernels (programs sharing a
    configuration and epilogue share one), spread one translation unit per core."""
    monkeypatch.setenv("MUCUTLASS_RECORD", str(tmp_path / "record.json"))
    bench = load_bench()
    assert bench.kernels_per_unit_for(40, 16) == 3 and bench.kernels_per_unit_for(400, 16) == 8
    assert bench.build_estimate_s(40, 16) == bench.UNIT_S + 2 * bench.KERNEL_IN_UNIT_S
    assert bench.build_estimate_s(0, 16) == 0.0
    # 400 kernels at 8 a unit: 50 units, 4 rounds on 16 cores
    assert bench.build_estimate_s(400, 16) == 4 * (bench.UNIT_S + 7 * bench.KERNEL_IN_UNIT_S)
    assert bench.main(["--suite", "smoke", "--max-attempts", "2", "--jobs", "4", "--count-kernels", "--out", str(tmp_path)]) == 0
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert doc["problems"] == 5 and doc["programs"] >= 5 and 1 <= doc["unique_kernels"] <= doc["programs"] + 5
    from evals.problems import load_suite

    problems = load_suite("smoke")
    programs = [prog for _, prog in bench.planned_programs(problems, "h200", 2)]
    assert len(bench.unique_kernels(programs + programs)) == doc["unique_kernels"]  # the same kernel counts once
