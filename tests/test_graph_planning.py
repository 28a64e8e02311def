"""Planning: ROI ranking bolder with a large gap, nomination from the SOL report, the best
program's features and what was tried."""

from __future__ import annotations

import math

from dsl_compiler.ir import GemmOp, Kernel, KernelConfig, Operand, Program, Ref, Store, TensorArg, TensorDecl, TorchStep
from graph.planning import ProgramFeatures, nominate, plan, rank, roi
from run_vocabulary.problem import STRICT_PRECISIONS
from run_vocabulary.records import AttemptRecord, Hypothesis

SOL = {"t_sol_us": 10.0, "bound": "compute"}


def test_roi_formula():
    # below a gap of 5 the exponent is 1: plain gain / risk
    assert roi(2.0, 1.6, gap=3.0) == 2.0 / 1.6
    # gap 50: exponent 1 + log10(10) = 2
    assert math.isclose(roi(2.0, 1.6, gap=50.0), 4.0 / 1.6)
    assert roi(2.0, 1.0, gap=None) == 2.0


def test_large_gap_favours_bold_hypotheses():
    bold = Hypothesis(title="bold", expected_gain=3.0, risk=2.5)
    safe = Hypothesis(title="safe", expected_gain=1.3, risk=1.0)
    assert [h.title for h in rank([bold, safe], gap=1.5)] == ["safe", "bold"]
    assert [h.title for h in rank([bold, safe], gap=200.0)] == ["bold", "safe"]
    ranked = rank([bold, safe], gap=200.0)
    assert ranked[0].roi == roi(3.0, 2.5, 200.0)


def program(math_=None, tile=None, torch_relu=False, cluster=(1, 1, 1)):
    kernel = Kernel(name="k", op=GemmOp(a=Operand(name="x"), b=Operand(name="w", transpose=True)),
                    config=KernelConfig(math=math_, tile=tile, cluster=cluster),
                    stores=(Store(name="h", dtype="f32", expr=Ref(name="x")),))
    steps = (kernel,) + ((TorchStep(outputs=("y",), fn="relu", args=(TensorArg(name="h"),)),) if torch_relu else ())
    return Program(decls=(TensorDecl(kind="input", name="x", dtype="f32", shape=(8, 8)),
                          TensorDecl(kind="param", name="w", dtype="f32", shape=(8, 8), source="w")),
                   steps=steps, outputs=("y" if torch_relu else "h",))


def ok(i, t, hypothesis=""):
    return AttemptRecord(index=i, correct=True, t_us=t, hypothesis=hypothesis, reached="done")


def test_first_attempt_and_repair():
    assert nominate(SOL, [], ProgramFeatures(), STRICT_PRECISIONS)[0].title == "a first correct program"
    failed = AttemptRecord(index=1, diagnostics=["program.mcu:3:1: error[tile]: bad tile\n  hint: x"])
    hyp = nominate(SOL, [failed], ProgramFeatures(), STRICT_PRECISIONS)
    assert hyp[0].title == "repair the last program" and "error[tile]: bad tile" in hyp[0].rationale


def test_nominations_follow_the_program():
    f32 = ProgramFeatures.of(program(torch_relu=True))
    titles = [h.title for h in nominate(SOL, [ok(1, 400.0)], f32, ("f32", "tf32", "bf16"))]
    assert "tf32 math" in titles and "fuse relu into the epilogue" in titles and "bf16 operands" in titles
    assert "cluster 2x1x1" in titles
    tf32 = ProgramFeatures.of(program(math_="tf32", tile=(128, 256, 32), cluster=(2, 1, 1)))
    titles = [h.title for h in nominate(SOL, [ok(1, 40.0)], tf32, ("f32", "tf32"))]
    assert "tf32 math" not in titles and "cluster 2x1x1" not in titles and not any("fuse" in t for t in titles)
    assert not any("bf16" in t for t in titles)  # not allowed by the tolerance


def test_gains_are_capped_by_the_gap_and_tried_ones_dropped():
    feats = ProgramFeatures.of(program())
    hyps = nominate(SOL, [ok(1, 20.0)], feats, STRICT_PRECISIONS)  # gap 2: no change can promise more than 2x
    assert all(h.expected_gain <= 2.0 for h in hyps)
    tried = nominate(SOL, [ok(1, 400.0, hypothesis="tf32 math"), ok(2, 300.0)], feats, STRICT_PRECISIONS)
    assert "tf32 math" not in [h.title for h in tried]


def test_plan_ranks_and_prefers_tier_proposals():
    feats = ProgramFeatures.of(program(torch_relu=True))
    ranked = plan(SOL, [ok(1, 1000.0)], feats, STRICT_PRECISIONS)
    assert ranked[0].title == "tf32 math"  # the biggest gain at a gap of 100
    assert all(a.roi >= b.roi for a, b in zip(ranked, ranked[1:]))
    own = [Hypothesis(title="a", expected_gain=1.1, risk=1.0), Hypothesis(title="b", expected_gain=1.5, risk=1.0)]
    assert [h.title for h in plan(SOL, [ok(1, 1000.0)], feats, STRICT_PRECISIONS, proposed=own)] == ["b", "a"]
