"""The floor under a run's result (run_vocabulary.floor): PyTorch's fastest allowed variant is kept when it beats ours."""

from __future__ import annotations

import math

from run_vocabulary.floor import allowed_variants, kept_result, pytorch_floor

REFS = {"eager_fp32": 400.0, "eager_tf32": 100.0, "compile": 120.0}


def test_tf32_counts_only_where_the_problem_allows_it():
    assert allowed_variants(("f32", "tf32", "bf16", "f16")) == ["eager_fp32", "eager_tf32", "compile"]
    assert allowed_variants(("f32",)) == ["eager_fp32", "compile"]
    assert pytorch_floor(REFS, ("f32", "tf32")) == ("eager_tf32", 100.0)
    assert pytorch_floor(REFS, ("f32",)) == ("compile", 120.0)


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
    none = kept_result(None, REFS, ("f32",))
    assert none.fallback and none.source == "compile" and none.t_us == 120.0


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
    # TF32 is not allowed: torch.compile's 120 us is the floor, and it beats our 150 us
    assert summary.fallback == "compile" and summary.kept_t_us == 120.0 and summary.best_t_us == 150.0
    state["best_t_us"] = 60.0
    summary = summarize(state, ctx, 1.0, 0.0, "")
    assert summary.fallback == "" and summary.kept_t_us == 60.0
