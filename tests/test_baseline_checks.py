"""PyTorch's variants checked at the problem's tolerance (evals.baseline_checks), on the CPU: the comparisons and
the runs' logic with fake outputs and fake runners (TF32 emulated by rounding the GEMM operands), the child
process's plumbing, and where the checks land (the run's record, the baseline table, the offline table)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from evals import baseline_checks as bc
from evals.problems import load_problem
from run_vocabulary.floor import VariantCheck, kept_result, pytorch_floor, reference_record

ROOT = Path(__file__).resolve().parent.parent

LONG_K = """
    import torch
    import torch.nn as nn
    TOLERANCE = 1e-4
    class Model(nn.Module):
        def forward(self, a, b):
            return torch.matmul(a, b)
    def get_inputs():
        return [torch.randn(32, 8192), torch.randn(8192, 32)]
    def get_init_inputs():
        return []
    """


def _problem(tmp_path, body=LONG_K, name="long_k"):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return load_problem(path)


def test_the_comparison_is_the_judges():
    """compare_tensors is the judge's rule, reached through its door (outputs moved to the reference's device first):
    the same verdicts and errors as evals.judge.compare.compare on a pass, a mismatch and a non-finite value."""
    from evals.judge.compare import compare

    g = torch.Generator().manual_seed(0)
    ref = torch.randn(4096, generator=g)
    cases = [ref + 1e-7, ref * (1 + 3e-4), ref.clone().index_fill_(0, torch.tensor([7]), float("inf")),
             torch.where(ref.abs() < 0.01, ref + 1e-3, ref), ref.clone()]
    for out in cases:
        mine, judge = bc.compare_tensors([out], [ref], 1e-4), compare([out], [ref], 1e-4)
        assert mine["correct"] == judge["correct"]
        assert mine["text"] == judge["text"]
        assert mine["max_abs_error"] == judge["max_abs_error"] and mine["max_rel_error"] == judge["max_rel_error"]


def test_checks_from_comparisons_and_from_fake_outputs():
    ref = [torch.ones(8, 8)]
    near, far = [torch.ones(8, 8) + 1e-6], [torch.ones(8, 8) * 1.01]
    checks = bc.compare_outputs({"eager_fp32": [near, near], "eager_tf32": [near, far],
                                 "compile": RuntimeError("inductor: no C++ compiler")}, [ref, ref], 1e-4, source="gpu")
    assert checks["eager_fp32"].passed and checks["eager_fp32"].sets == 2 and checks["eager_fp32"].source == "gpu"
    assert checks["eager_tf32"].passed is False and checks["eager_tf32"].text.startswith("1 of 2 input sets: output 0")
    assert abs(checks["eager_tf32"].max_abs_error - 0.01) < 1e-6
    assert checks["compile"].passed is None and "did not run: RuntimeError" in checks["compile"].text
    # a wrong shape, or a non-finite value where the reference is finite, fails (no error size for the latter)
    wrong = bc.compare_outputs({"eager_tf32": [[torch.ones(8, 4)]]}, [ref], 1e-4)["eager_tf32"]
    assert wrong.passed is False and "shape [8, 8]" in wrong.text
    nan = bc.compare_outputs({"eager_tf32": [[torch.full((8, 8), float("nan"))]]}, [ref], 1e-4)["eager_tf32"]
    assert nan.passed is False and nan.max_abs_error is None and "non-finite" in nan.text


def _tf32_runner(model, inputs):
    """eager TF32 as the tensor cores compute it: every GEMM operand rounded to TF32 (the error model's mode)."""
    from dsl_compiler.frontend.error_model import _Rounding

    with _Rounding("tf32"):
        return model(*inputs)


def test_check_variants_runs_each_variant_on_fresh_sets(tmp_path):
    """The GPU path's logic on the CPU: the reference is true fp32, eager fp32 matches it, TF32 (emulated) misses
    1e-4 after K = 8192 products, a variant that raises is left unchecked and the others go on."""
    problem = _problem(tmp_path)
    calls = []

    def broken(model, inputs):
        calls.append("compile")
        raise RuntimeError("recompile failed")

    checks = bc.check_variants(problem, device="cpu", sets=2,
                               runners={"eager_tf32": _tf32_runner, "compile": broken})
    assert checks["eager_fp32"].passed and checks["eager_fp32"].sets == 2 and checks["eager_fp32"].source == "cpu"
    assert checks["eager_tf32"].passed is False and checks["eager_tf32"].max_rel_error > 1e-4
    assert checks["compile"].passed is None and calls == ["compile"]  # not tried again on the second set
    record = reference_record({"eager_fp32": 900.0, "eager_tf32": 250.0, "compile": 200.0}, checks,
                              problem.allowed_precisions, problem.tolerance)
    assert [v for v, r in record.items() if r["eligible"]] == ["eager_fp32"]
    assert record["eager_tf32"]["label"] == "fails 1e-4" and record["compile"]["label"] == "not checked at 1e-4"
    # at 1e-2 TF32 over a short reduction passes (fixed seeds: a near-zero output of a random set can miss even 1e-2)
    short = _problem(tmp_path, LONG_K.replace("8192", "64"), "short_k")
    loose = bc.check_variants(short, 1e-2, device="cpu", seeds=(1, 2), model_seed=0, variants=("eager_tf32",),
                              runners={"eager_tf32": _tf32_runner})
    assert loose["eager_tf32"].passed and loose["eager_tf32"].tolerance == 1e-2


def test_without_a_gpu_nothing_is_checked(tmp_path, monkeypatch):
    """On the CPU every variant is the reference itself: a check there would say nothing, so none is made."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    checks = bc.check_variants(_problem(tmp_path))
    assert all(c.passed is None and "no GPU" in c.text for c in checks.values())


def test_variants_that_write_their_inputs_get_their_own_copies(tmp_path):
    problem = _problem(tmp_path, LONG_K.replace("return torch.matmul(a, b)", "return torch.matmul(a.mul_(2), b)")
                       .replace("8192", "64"), "writes")
    checks = bc.check_variants(problem, device="cpu", sets=1, variants=("eager_fp32", "eager_tf32"))
    assert checks["eager_fp32"].passed and checks["eager_tf32"].passed


def test_the_child_reports_json_and_its_failures_leave_variants_unchecked(tmp_path):
    problem = _problem(tmp_path)
    seen = {}

    def fake_run(cmd, **kw):
        seen["cmd"], seen["timeout"] = cmd, kw["timeout"]
        out = {"eager_fp32": VariantCheck(True, 1e-4, 1e-6, 1e-6, 3, "", "gpu").to_dict(),
               "eager_tf32": VariantCheck(False, 1e-4, 2e-3, 5e-3, 3, "3 of 3 input sets: ...", "gpu").to_dict()}
        return subprocess.CompletedProcess(cmd, 0, "warming up\n" + json.dumps(out) + "\n", "")

    checks = bc.checks_in_child(problem.path, 1e-4, ("eager_fp32", "eager_tf32"), timeout_s=5, run=fake_run)
    assert seen["cmd"][1:4] == ["-m", "evals.baseline_checks", problem.path] and seen["timeout"] == 5
    assert checks["eager_fp32"].passed and checks["eager_tf32"].passed is False
    assert checks["eager_tf32"].max_rel_error == 5e-3

    def dies(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 1, "", "Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory")

    def hangs(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])

    died = bc.checks_in_child(problem.path, 1e-4, ("compile",), run=dies)["compile"]
    assert died.passed is None and "OutOfMemoryError" in died.text
    hung = bc.checks_in_child(problem.path, 1e-4, ("compile",), timeout_s=7, run=hangs)["compile"]
    assert hung.passed is None and "past 7 s" in hung.text


def test_the_real_child_runs_and_says_why_it_checked_nothing_without_a_gpu(tmp_path):
    problem = _problem(tmp_path, LONG_K.replace("8192", "64"), "small")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the child would check for real")
    checks = bc.checks_in_child(problem.path, 1e-4, ("eager_fp32", "eager_tf32"), timeout_s=120)
    assert set(checks) == {"eager_fp32", "eager_tf32"}
    assert all(c.passed is None and "no GPU" in c.text for c in checks.values())
    # the command line on the CPU, named explicitly, checks for real
    out = subprocess.run([sys.executable, "-m", "evals.baseline_checks", problem.path, "--device", "cpu",
                          "--variants", "eager_fp32", "--sets", "1", "--json"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert json.loads(out.stdout.splitlines()[-1])["eager_fp32"]["passed"] is True


def test_checks_are_wanted_below_1e_3_by_default(monkeypatch):
    monkeypatch.delenv(bc.MODE_ENV, raising=False)
    assert bc.wanted(1e-4) and not bc.wanted(1e-2) and not bc.wanted(None)
    monkeypatch.setenv(bc.MODE_ENV, "on")
    assert bc.wanted(1e-2)
    monkeypatch.setenv(bc.MODE_ENV, "off")
    assert not bc.wanted(1e-4)


def test_services_record_the_checks_and_the_run_keeps_only_passing_variants(tmp_path, monkeypatch):
    """The run's setup: Services.reference_checks calls the child where the reference was timed and the tolerance
    is strict; the planner records each variant's standing; the floor and the speedups follow it."""
    from graph.context import Services
    from run_vocabulary.floor import eligible_us

    problem = _problem(tmp_path)
    refs = {"eager_fp32": 900.0, "eager_tf32": 250.0, "compile": 200.0}
    calls = []

    def fake_child(path, tolerance, variants):
        calls.append((path, tolerance, tuple(variants)))
        return {"eager_fp32": VariantCheck(True, tolerance, sets=3), "eager_tf32": VariantCheck(False, tolerance, sets=3),
                "compile": VariantCheck(True, tolerance, sets=3)}

    monkeypatch.setattr(bc, "checks_in_child", fake_child)
    monkeypatch.delenv(bc.MODE_ENV, raising=False)

    class Timed(Services):
        def reference_timings(self, path):
            return dict(refs)

    svc = Timed()
    checks = svc.reference_checks(problem.path)
    assert svc.reference_checks(problem.path) is checks and len(calls) == 1  # once per problem
    assert calls[0] == (problem.path, 1e-4, ("eager_fp32", "eager_tf32", "compile"))
    record = reference_record(refs, checks, problem.allowed_precisions, problem.tolerance)
    assert eligible_us(refs, record) == {"eager_fp32": 900.0, "compile": 200.0}
    assert kept_result(220.0, refs, problem.allowed_precisions, record, problem.tolerance).source == "compile"

    class Untimed(Services):  # no GPU: nothing timed, nothing checked
        def reference_timings(self, path):
            return {}

    assert Untimed().reference_checks(problem.path) == {} and len(calls) == 1


def test_the_baseline_row_and_table_show_a_failing_variant(tmp_path):
    import importlib.util

    from evals.harness_cli import baseline_row, summarize
    from evals.judge.client import ReferenceTimings

    problem = _problem(tmp_path)

    class FakeHarness:
        def reference_timings(self, problem):
            return ReferenceTimings(eager_fp32_us=40.0, eager_tf32_us=10.0, compile_us=12.0, timing_source="gpu")

    def checker(p, variants):
        assert variants == ["eager_fp32", "eager_tf32", "compile"]
        return {"eager_fp32": VariantCheck(True, 1e-4), "eager_tf32": VariantCheck(False, 1e-4),
                "compile": VariantCheck(True, 1e-4)}

    row = baseline_row(problem, FakeHarness(), "h200", checker=checker)
    assert row["best_us"] == 12.0  # not eager TF32's 10 us: it fails 1e-4
    assert row["eager_tf32_check"] == "fails 1e-4" and row["eager_tf32_eligible"] is False
    assert row["compile_check"] == "passes 1e-4"
    s = summarize([row])
    assert s["eager_tf32_fails"] == 1 and s["eager_tf32_geomean_sol_fraction"] is None
    assert s["eager_tf32_over_fp32_geomean_speedup"] is None
    spec = importlib.util.spec_from_file_location("bench_baselines", ROOT / "benchmarks" / "bench_baselines.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    md = mod.to_markdown({"source": "strict", "gpu": "h200", "gpu_name": "NVIDIA H200", "date": "2026-12-02",
                          "precision": "tf32", "versions": {"torch": "x"}, "rows": [row], "summary": s})
    assert "10.0 us, fails 1e-4" in md and "eager TF32 on 1" in md
    # without a checker and without a GPU the row says the TF32 variants were not checked, and they do not count
    unchecked = baseline_row(problem, FakeHarness(), "h200", checker=lambda p, v: {})
    assert unchecked["best_us"] == 40.0 and unchecked["eager_tf32_check"] == "not checked at 1e-4"


def test_the_offline_table_counts_only_passing_variants(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_offline

    from run_vocabulary.records import AttemptRecord, RunSummary

    problem = _problem(tmp_path)
    refs = {"eager_fp32": 900.0, "eager_tf32": 250.0, "compile": 200.0}
    record = reference_record(refs, {"eager_fp32": VariantCheck(True, 1e-4), "eager_tf32": VariantCheck(False, 1e-4),
                                     "compile": VariantCheck(False, 1e-4)}, problem.allowed_precisions, 1e-4)
    best = AttemptRecord(index=1, correct=True, t_us=300.0, precision="tf32x3", timing_source="gpu",
                         program_text="")
    summary = RunSummary(problem="long_k", tier="offline", policy="fixed", backend="cutlass", gpu="h200",
                         attempts=[best], best_index=1, best_t_us=300.0, reference_us=refs, reference_checks=record)
    row = bench_offline.problem_row(problem, summary, {"t_sol_us": 100.0, "bound": "compute"}, "h200")
    # TF32 and compile are faster but fail 1e-4: ours (300 us) is kept over eager fp32's 900 us, no fallback
    assert row["fallback"] is None and row["kept_us"] == 300.0 and row["floor_variant"] == "eager_fp32"
    assert row["speedup_vs_eager_fp32"] == 3.0 and row["speedup_vs_eager_tf32"] is None
    assert row["speedup_vs_compile"] is None
    assert row["eager_tf32_excluded"] == "fails 1e-4" and "eager_fp32_excluded" not in row
    s = bench_offline.summarize([row])
    assert s["baseline_fails"]["eager_tf32"] == ["long_k"]
    assert abs(s["geomean_sol_fraction_pytorch_best"] - 100.0 / 900.0) < 1e-12
    md = bench_offline.to_markdown({"suite": "builtin-strict", "gpu": "h200", "backend": "cutlass", "date": "d",
                                    "max_attempts": 1, "policy": "fixed", "rows": [row], "summary": s})
    assert "| long_k | 900.0 | 250.0, fails 1e-4 | 200.0, fails 1e-4 |" in md
    # a run recorded before checks were kept: by the precision rule alone compile was the floor; the table, which
    # knows the problem's tolerance, counts no unchecked TF32 variant at 1e-4
    old = summary.model_copy(update={"reference_checks": {}})
    assert pytorch_floor(refs, ("f32", "tf32")) == ("compile", 200.0)
    old_row = bench_offline.problem_row(problem, old, {"t_sol_us": 100.0}, "h200")
    assert old_row["floor_variant"] == "eager_fp32" and old_row["speedup_vs_compile"] is None
    assert old_row["compile_excluded"] == "not checked at 1e-4"
