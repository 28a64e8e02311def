"""KernelBench's strict rule (fp32 at 1e-4) in the error model and the offline tier: every precision's predicted
error (f16, bf16, tf32, tf32x3, f32) with the accumulation order charged, the first attempt the fastest precision
predicted to pass, and a precision that gave the problem a wrong result not retried."""

from __future__ import annotations

import textwrap

import pytest

from dsl_compiler.frontend import error_model
from dsl_compiler.frontend.error_model import MATHS, PASS_RATIO, fastest_passing, predict_all, predict_errors
from evals.problems import load_problem
from nodes.offline.policy import OfflineTier, attempt_fp32_math, attempt_math, failed_maths
from sol_models import search
from test_offline_policy import attempt, request

STRICT = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nTOLERANCE = 1e-4\n"


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MUCUTLASS_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def tier(tmp_path):
    return OfflineTier(record=search.ConfigRecord(tmp_path / "record.json"))


def _problem(tmp_path, name, body, head=STRICT):
    path = tmp_path / f"{name}.py"
    path.write_text(head + textwrap.dedent(body))
    return load_problem(path)


def _gemm(k: int, scale: float = 1.0, tail: str = "", data: str = "torch.randn({m}, {k}) * {s}, torch.randn({k}, {n})"):
    return f"""
    class Model(nn.Module):
        def forward(self, a, b):
            y = torch.matmul(a, b)
            return y{tail}
    def get_inputs():
        return [{data.format(m=64, k=k, n=256, s=scale)}]
    def get_init_inputs():
        return []
    """


def test_every_precision_is_predicted_fastest_first(tmp_path):
    problem = _problem(tmp_path, "k1024", _gemm(1024))
    errors = predict_all(problem, 1e-4)
    assert list(errors) == list(MATHS) == ["f16", "bf16", "tf32", "tf32x3", "f32"]
    # the operands' rounding orders them: f16 and tf32 keep 10 bits, bf16 7, the split 21, f32 all
    assert errors["bf16"].ratio > errors["f16"].ratio > 1 and errors["tf32"].ratio > 1
    assert errors["tf32x3"].ratio < errors["tf32"].ratio / 20
    # f32 is the accumulation order alone: a product in another fp32 order than the reference's
    assert errors["f32"].ratio == errors["f32"].order > 0 and all(e.order == errors["f32"].order for e in errors.values())
    # K = 1024 of unit normals: even two fp32 orders are beyond half the tolerance; K = 64: the split passes
    assert fastest_passing(errors, ("tf32", "tf32x3", "f32")) is None
    short = predict_errors(_problem(tmp_path, "k64", _gemm(64)), ("tf32", "tf32x3"), 1e-4)
    assert fastest_passing(short, ("tf32", "tf32x3")) == "tf32x3"


def test_the_accumulation_term_grows_with_the_reduction_length(tmp_path):
    """Two fp32 orders of K unit-normal products differ by about u sqrt(K^2 / 6): at 1e-4 a long reduction's
    fp32 reference is itself that far from any other fp32 computation, tf32x3 included."""
    short = predict_errors(_problem(tmp_path, "k256", _gemm(256)), ("tf32x3", "f32"), 1e-4)
    long = predict_errors(_problem(tmp_path, "k16384", _gemm(16384)), ("tf32x3", "f32"), 1e-4)
    assert long["f32"].order > 8 * short["f32"].order
    assert short["tf32x3"].passes and short["f32"].passes
    assert not long["tf32x3"].passes and not long["f32"].passes


def test_the_values_scale_and_the_epilogue_count(tmp_path):
    """atol = rtol = 1e-4: an output near zero is held to 1e-4 absolute, so operands 1e3 larger put errors 1e3
    larger there (the ratio grows), and 1e-3 smaller ones leave them far under it; an epilogue that cancels (each
    row less its mean) leaves values near zero made of large terms, a larger share of their tolerance."""
    plain = predict_errors(_problem(tmp_path, "plain", _gemm(2048)), ("f32",), 1e-4)["f32"]
    large = predict_errors(_problem(tmp_path, "large", _gemm(2048, scale=1e3)), ("f32",), 1e-4)["f32"]
    small = predict_errors(_problem(tmp_path, "small", _gemm(2048, scale=1e-3)), ("f32",), 1e-4)["f32"]
    centred = predict_errors(_problem(tmp_path, "centred", _gemm(2048, tail=" * 1e3 - (y * 1e3).mean(dim=1, keepdim=True)")),
                             ("f32",), 1e-4)["f32"]
    assert large.ratio > 10 * plain.ratio and small.passes and not plain.passes
    assert centred.ratio > plain.ratio


def test_exact_sums_are_charged_nothing(tmp_path):
    ints = _gemm(4096, data="torch.randint(-3, 4, ({m}, {k})).float(), torch.randint(-3, 4, ({k}, {n})).float()")
    errors = predict_errors(_problem(tmp_path, "ints", ints), ("tf32", "tf32x3", "f32"), 1e-4)
    assert all(e.ratio == 0.0 for e in errors.values())
    # a power of two keeps the grid coarse (still exact); integers of 12 bits put the sums past 2^24: they round
    scaled = ints.replace(".float(), torch", ".float() * 4096, torch")
    assert predict_errors(_problem(tmp_path, "scaled", scaled), ("f32",), 1e-4)["f32"].ratio == 0.0
    wide = ints.replace("randint(-3, 4,", "randint(-3000, 3001,")
    assert predict_errors(_problem(tmp_path, "wide", wide), ("f32",), 1e-4)["f32"].ratio > 0


def test_the_first_attempt_at_1e_4_is_the_fastest_precision_predicted_to_pass(tmp_path, tier):
    """A problem that allows f16 at 1e-4 on data f16 holds exactly (small integers, sums under 2^11): f16 is
    predicted to pass, and on a compute-bound GEMM it is estimated fastest: the first attempt; on unit normals
    nothing 16-bit passes and TF32 misses: tf32x3."""
    allowed = "ALLOWED_PRECISIONS = ('f32', 'tf32', 'f16')\n"
    ints = """
    class Model(nn.Module):
        def forward(self, a, b):
            return torch.matmul(a, b)
    def get_inputs():
        return [torch.randint(-1, 2, (4096, 1024)).float(), torch.randint(-1, 2, (1024, 4096)).float()]
    def get_init_inputs():
        return []
    """
    exact = _problem(tmp_path, "exact", ints, head=STRICT + allowed)
    assert predict_errors(exact, ("f16",), 1e-4)["f16"].ratio == 0.0
    first = tier.write(request(exact))
    assert "math = f16" in first.program_text
    normal = _problem(tmp_path, "normal", _gemm(4096), head=STRICT + allowed)
    first = tier.write(request(normal))
    assert "math = tf32x3" in first.program_text and "math = f16" not in first.program_text


def test_a_wrong_tf32_result_at_1e_4_is_not_retried(tmp_path, tier):
    """TF32 predicted to pass (integer data it holds exactly) but wrong on the GPU: the next program is the same
    fused program in tf32x3, not a TF32 program with its epilogue in PyTorch; a wrong tf32x3 result then earns
    the program's own fallbacks."""
    ints = _gemm(512, tail=" * 0.5 + 1.0",
                 data="torch.randint(-3, 4, ({m}, {k})).float(), torch.randint(-3, 4, ({k}, {n})).float()")
    problem = _problem(tmp_path, "ints", ints)
    first = tier.write(request(problem))
    assert "math = tf32\n" in first.program_text + "\n" and "tf32x3" not in first.program_text
    wrong = attempt(1, first.program_text, reached="validate", correct=False, t_us=None, precision="tf32",
                    failure_reason="validate: input set 2: outputs differ from the reference beyond 1e-4")
    assert attempt_fp32_math(wrong) == "tf32" and attempt_math(wrong) is None
    assert failed_maths([wrong], 1e-4) == ("tf32",) and failed_maths([wrong], 1e-2) == ()
    second = tier.write(request(problem, [wrong]))
    assert "math = tf32x3" in second.program_text
    from dsl_compiler.parser import parse

    program, _ = parse(second.program_text)
    assert not program.torch_steps  # still fused: the tf32x3 plan earned no fallback from TF32's failure
    assert {c.math for c in tier.candidates(problem, "h200", [wrong])} == {"tf32x3"}
    wrong_again = attempt(2, second.program_text, reached="validate", correct=False, t_us=None, precision="tf32x3",
                          failure_reason="validate: input set 1: outputs differ from the reference beyond 1e-4")
    third = tier.write(request(problem, [wrong, wrong_again]))
    program, _ = parse(third.program_text)
    assert "math = tf32x3" in third.program_text and program.torch_steps  # the epilogue goes to PyTorch


def test_at_1e_2_a_wrong_tf32_result_is_the_programs(tmp_path, tier):
    problem = _problem(tmp_path, "loose", _gemm(512, tail=" * 0.5 + 1.0"), head=STRICT.replace("1e-4", "1e-2"))
    first = tier.write(request(problem, allowed=("f32", "tf32")))
    wrong = attempt(1, first.program_text, reached="validate", correct=False, t_us=None, precision="tf32",
                    failure_reason="validate: input set 1: outputs differ")
    second = tier.write(request(problem, [wrong], allowed=("f32", "tf32")))
    assert "tf32x3" not in second.program_text  # TF32 stays; the program's epilogue falls back


def test_a_wrong_16_bit_result_drops_both_16_bit_maths():
    text = "input x: f32[64, 64]\nkernel k = gemm(x, x^T) {\n  math = f16\n  store y: f32 = acc\n}\noutput y\n"
    wrong = attempt(1, text, reached="validate", correct=False, t_us=None, failure_reason="validate: mismatch")
    assert failed_maths([wrong], 1e-2) == ("f16", "bf16")
    assert failed_maths([attempt(1, text)], 1e-2) == ()  # a correct one drops nothing
    assert PASS_RATIO == error_model.PASS_RATIO


def test_the_error_model_table_marks_the_fastest_admitted_math(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import bench_error_model

    row = bench_error_model.problem_row(_problem(tmp_path, "k64", _gemm(64)))
    assert row["fastest_passing"] == "tf32x3" and row["first_attempt"] == "tf32x3"
    assert not row["f16_admitted"] and row["tf32x3_admitted"] and row["f32"] == row["order"]
    doc = {"suite": "s", "date": "d", "pass_ratio": PASS_RATIO, "rows": [row],
           "summary": bench_error_model.summarize([row])}
    md = bench_error_model.to_markdown(doc)
    assert "| k64 | 1e-4 | (" in md and "**" in md and "tf32x3 1" in md
