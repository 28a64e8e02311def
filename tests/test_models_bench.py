"""benchmarks/bench_models.py: the models suite's table from a finished evaluation, with coverage per problem."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("bench_models", ROOT / "benchmarks" / "bench_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_table_has_times_coverage_correctness_and_reasons(tmp_path):
    from run_vocabulary.records import AttemptRecord, RunSummary
    from evals.store import ResultsStore

    store = ResultsStore(tmp_path / "results.sqlite")
    store.init_evaluation({"tiers": ["offline"], "policies": ["fixed"], "max_attempts": 1}, {"gpu": "NVIDIA H200"})
    attempt = AttemptRecord(index=1, program_text="", compile_ok=True, correct=True, t_us=100.0, timing_source="gpu",
                            precision="tf32", reached="done")
    store.finish_run(RunSummary(problem="models/01_mlp", tier="offline", policy="fixed", backend="cutlass", gpu="h200",
                                attempts=[attempt], best_index=1, best_t_us=100.0, t_sol_us=10.0,
                                reference_us={"eager_fp32": 400.0, "eager_tf32": 150.0, "compile": 130.0}))
    store.close()
    out = tmp_path / "out"
    assert load_bench().main(["--from-eval", str(tmp_path / "results.sqlite"), "--out", str(out)]) == 0
    doc = json.loads(next(out.glob("*-models.json")).read_text())
    rows = {r["problem"]: r for r in doc["rows"]}
    assert len(rows) >= 14
    mlp = rows["01_mlp"]
    assert mlp["correct"] and mlp["speedup_vs_eager_tf32"] == 1.5 and mlp["coverage"] == 1.0 and mlp["kernels"] == 3
    lenet = rows["02_lenet5"]  # no finished run: a failed row that still carries its coverage
    assert not lenet["correct"] and "no finished run" in lenet["why"] and lenet["coverage"] >= 0.9
    mobilenet = rows["11_mobilenetv2_inverted_residual"]
    assert any("BatchNorm2d" in left for left in mobilenet["left_to_pytorch"])
    assert doc["summary"]["coverage_met"] == len(rows)
    fire, inception = rows["09_squeezenet_fire"], rows["10_inception_module"]
    assert (fire["slice_stores"], fire["cat_steps"], inception["slice_stores"], inception["cat_steps"]) == (2, 0, 4, 0)
    assert (rows["08_densenet_dense_block"]["slice_stores"], rows["08_densenet_dense_block"]["cat_steps"]) == (6, 0)
    md = next(out.glob("*-models.md")).read_text()
    assert "| 01_mlp |" in md and "100%" in md and "**geomean**" in md and "## Reasons, per problem" in md
