"""The floor under a run's result (run_vocabulary.floor): PyTorch's fastest eligible variant is kept when it beats
ours; a variant is eligible when it was measured, its precision is allowed and its outputs pass the tolerance."""

from __future__ import annotations

import math

from run_vocabulary.floor import (VariantCheck, allowed_variants, cell, eligible_us, kept_result, pytorch_floor,
                                  reference_record, speedups, tolerance_text, variant_statuses)

REFS = {"eager_fp32": 400.0, "eager_tf32": 100.0, "compile": 120.0}
PASS = VariantCheck(passed=True, tolerance=1e-4, max_abs_error=2e-6, sets=3, source="gpu")
FAIL = VariantCheck(passed=False, tolerance=1e-4, max_abs_error=3e-3, sets=3, source="gpu",
                    text="1 of 3 input sets: output 0: 12 of 4096 elements differ")


def test_tf32_counts_only_where_the_problem_allows_it():
    # torch.compile is compiled and timed with TF32 allowed: an f32-only problem allows neither TF32 variant
    assert allowed_variants(("f32", "tf32", "bf16", "f16")) == ["eager_fp32", "eager_tf32", "compile"]
    assert allowed_variants(("f32",)) == ["eager_fp32"]
    assert pytorch_floor(REFS, ("f32", "tf32")) == ("eager_tf32", 100.0)
    assert pytorch_floor(REFS, ("f32",)) == ("eager_fp32", 400.0)


def test_unmeasured_or_broken_variants_are_skipped():
    assert pytorch_floor({"eager_fp32": 50.0, "eager_tf32": None, "compile": math.nan}, ("tf32",)) == ("eager_fp32", 50.0)
    assert pytorch_floor({}, ("tf32",)) is None
    kept = kept_result(80.0, {}, ("tf32",))
    assert kept.source == "ours" and not kept.fallback and kept.t_us == 80.0  # no GPU, no floor: ours as measured


def test_the_faster_is_kept_and_a_tie_is_ours():
    assert kept_result(90.0, REFS, ("tf32",)).source == "ours"
    assert kept_result(100.0, REFS, ("tf32",)).source == "ours"
    slow = kept_result(150.0, REFS, ("tf32",))
    assert slow.fallback and slow.source == "eager_tf32" and slow.t_us == 100.0 and slow.ours_us == 150.0
    none = kept_result(None, REFS, ("tf32",))
    assert none.fallback and none.source == "eager_tf32" and none.t_us == 100.0


def test_a_run_summary_records_the_fallback(tmp_path):
    """graph.runner.summarize fills RunSummary.fallback / kept_t_us from the problem's allowed precisions."""
    from graph.context import RunContext
    from graph.runner import summarize

    problem = tmp_path / "p.py"
    problem.write_text("import torch\nimport torch.nn as nn\nTOLERANCE = 1e-4\nALLOWED_PRECISIONS = ('f32',)\n"
                       "class Model(nn.Module):\n    def forward(self, x):\n        return x * 2\n"
                       "def get_inputs():\n    return [torch.rand(4)]\ndef get_init_inputs():\n    return []\n")
    ctx = RunContext(tier="offline", backend="interpreter")
    state = {"problem_path": str(problem), "best_t_us": 150.0, "reference_us": REFS, "attempts": []}
    summary = summarize(state, ctx, 1.0, 0.0, "")
    # TF32 is not allowed (torch.compile runs with it too): eager fp32's 400 us is the floor, our 150 us is kept
    assert summary.fallback == "" and summary.kept_t_us == 150.0 and summary.best_t_us == 150.0
    state["best_t_us"] = 600.0
    summary = summarize(state, ctx, 1.0, 0.0, "")
    assert summary.fallback == "eager_fp32" and summary.kept_t_us == 400.0


STRICT = ("f32", "tf32")  # what a problem at 1e-4 allows (run_vocabulary.problem.default_precisions)


def test_a_variant_that_fails_the_tolerance_is_no_floor_and_says_so():
    """KernelBench's fp32 rule: eager TF32 is faster but fails 1e-4, so the floor is torch.compile, which passes."""
    checks = {"eager_fp32": PASS, "eager_tf32": FAIL, "compile": PASS}
    assert pytorch_floor(REFS, STRICT, checks, 1e-4) == ("compile", 120.0)
    kept = kept_result(150.0, REFS, STRICT, checks, 1e-4)
    assert kept.fallback and kept.source == "compile" and kept.t_us == 120.0
    statuses = variant_statuses(REFS, checks, STRICT, 1e-4)
    assert statuses["eager_tf32"].label == "fails 1e-4" and not statuses["eager_tf32"].eligible
    assert statuses["compile"].label == "passes 1e-4" and statuses["compile"].eligible
    # every variant fails: no floor at all, ours (or nothing) is kept
    every = {"eager_fp32": FAIL, "eager_tf32": FAIL, "compile": FAIL}
    assert pytorch_floor(REFS, STRICT, every, 1e-4) is None
    assert kept_result(None, REFS, STRICT, every, 1e-4).source == "ours"


def test_an_unchecked_tf32_variant_counts_only_at_loose_tolerances():
    """Data, not a guess: below 1e-3 a TF32 variant needs a passing check; eager fp32 (PyTorch's defaults, the
    reference KernelBench times) counts unchecked; at 1e-2 the precision rule alone stands, as before checks."""
    strict = variant_statuses(REFS, {}, STRICT, 1e-4)
    assert [v for v, s in strict.items() if s.eligible] == ["eager_fp32"]
    assert strict["eager_tf32"].label == "not checked at 1e-4"
    assert pytorch_floor(REFS, STRICT, {}, 1e-4) == ("eager_fp32", 400.0)
    assert pytorch_floor(REFS, STRICT, {}, 1e-2) == ("eager_tf32", 100.0)
    # a check that could not run (the child timed out) is no check
    unrun = {"eager_tf32": VariantCheck(passed=None, tolerance=1e-4, text="the check ran past 900 s")}
    assert pytorch_floor(REFS, STRICT, unrun, 1e-4) == ("eager_fp32", 400.0)
    # a failing check wins over a loose tolerance: a variant that fails 1e-2 does not count there either
    assert pytorch_floor(REFS, STRICT, {"eager_tf32": FAIL.__class__(passed=False, tolerance=1e-2)}, 1e-2) == \
        ("compile", 120.0)


def test_the_record_keeps_each_check_beside_its_time_and_decides_once():
    checks = {"eager_fp32": PASS, "eager_tf32": FAIL, "compile": PASS.to_dict()}  # dicts as a child prints them
    record = reference_record(REFS, checks, STRICT, 1e-4)
    assert set(record) == {"eager_fp32", "eager_tf32", "compile"}
    assert record["eager_tf32"]["eligible"] is False and record["eager_tf32"]["label"] == "fails 1e-4"
    assert record["eager_tf32"]["max_abs_error"] == 3e-3 and record["eager_tf32"]["sets"] == 3
    assert eligible_us(REFS, record) == {"eager_fp32": 400.0, "compile": 120.0}
    assert cell("eager_tf32", record) == "fails 1e-4" and cell("compile", record) == ""
    # speedups only over the variants that count
    assert speedups(50.0, REFS, record) == {"eager_fp32": 8.0, "eager_tf32": None, "compile": 2.4}
    # a record written before checks were kept: every measured time counts, as it was judged then
    assert eligible_us(REFS, {}) == REFS
    # an unmeasured variant has no entry
    assert set(reference_record({"eager_fp32": 5.0}, {}, STRICT, 1e-4)) == {"eager_fp32"}
    # the same record decides the floor again (from summary.reference_checks, as the tables do)
    assert pytorch_floor(REFS, STRICT, record, 1e-4) == ("compile", 120.0)


def test_tolerances_are_named_as_kernelbench_names_them():
    assert [tolerance_text(t) for t in (1e-4, 1e-2, 5e-3, 0.5, None)] == ["1e-4", "1e-2", "5e-3", "0.5", "its tolerance"]


def test_a_run_at_1e_4_keeps_only_a_passing_variant_and_its_speedups(tmp_path):
    """summarize and the judge node read the planner's record: eager TF32 fails 1e-4, so it is neither the floor
    nor a speedup's baseline; the stop rule's reference is the fastest variant that passes."""
    from graph.attempts import judge
    from graph.context import RunContext
    from graph.runner import summarize
    from graph.state import baselines_us
    from run_vocabulary.records import AttemptRecord

    problem = tmp_path / "p.py"
    problem.write_text("import torch\nimport torch.nn as nn\nTOLERANCE = 1e-4\n"
                       "class Model(nn.Module):\n    def forward(self, x):\n        return x * 2\n"
                       "def get_inputs():\n    return [torch.rand(4)]\ndef get_init_inputs():\n    return []\n")
    record = reference_record(REFS, {"eager_fp32": PASS, "eager_tf32": FAIL, "compile": PASS}, STRICT, 1e-4)
    state = {"problem_path": str(problem), "best_t_us": 110.0, "reference_us": REFS, "reference_checks": record,
             "attempts": [], "sol": {}}
    assert baselines_us(state) == {"eager_fp32": 400.0, "compile": 120.0}
    summary = summarize(state, RunContext(tier="offline", backend="interpreter"), 1.0, 0.0, "")
    assert summary.fallback == "" and summary.kept_t_us == 110.0  # not eager TF32's 100 us: it fails 1e-4
    assert summary.reference_checks["eager_tf32"]["label"] == "fails 1e-4"
    assert summary.baselines_us == {"eager_fp32": 400.0, "compile": 120.0}
    done = judge(state, AttemptRecord(index=1, correct=True, t_us=40.0), 0.0, [])
    attempt = done["attempts"][-1]
    assert attempt["speedup_vs_eager_fp32"] == 10.0 and attempt["speedup_vs_compile"] == 3.0
    assert attempt["speedup_vs_eager_tf32"] is None
