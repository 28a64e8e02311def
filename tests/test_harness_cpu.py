"""The harness on the CPU: real validation in the worker, clear reasons for broken candidates,
programs through the interpreter, estimates instead of timings."""

import pytest

from evals.harness import Candidate, HarnessSettings, ReferenceTimings
from evals.problems import load_suite
from tests.adversarial.cases import HERE
from tests.adversarial.shared import shared_harness

HONEST = (HERE / "honest.py").read_text()


@pytest.fixture(scope="module")
def harness():
    return shared_harness(device="cpu", watchdog_s=10, n_input_sets=3)


@pytest.fixture(scope="module")
def smoke():
    return {p.name: p for p in load_suite("smoke")}


def test_candidate_is_program_or_source():
    with pytest.raises(ValueError):
        Candidate()
    with pytest.raises(ValueError):
        Candidate(program_json="{}", source="x")
    assert Candidate(source="x").kind == "python"


@pytest.mark.parametrize(
    "source, needle",
    [
        ("import torch\n", "defines no class ModelNew"),
        ("def f(:\n", "failed to import: SyntaxError"),
        (HONEST.replace("return torch.relu(self.fc(x))", "raise ValueError('nope')"), "the candidate raised ValueError: nope"),
        (HONEST.replace("return torch.relu(self.fc(x))", "return torch.relu(self.fc(x))[:, :3]"), "has shape [16, 3], expected [16, 64]"),
        (HONEST.replace("return torch.relu(self.fc(x))", "return torch.relu(self.fc(x)).double()"), "has dtype torch.float64"),
        (HONEST.replace("return torch.relu(self.fc(x))", "return torch.relu(self.fc(x)) / 0.0"), "non-finite"),
        (HONEST.replace("return torch.relu(self.fc(x))", "return (torch.relu(self.fc(x)), x)"), "returns 2 output(s)"),
        (HONEST.replace("return torch.relu(self.fc(x))", "return torch.relu(self.fc(x)) * 1.05"), "differ from the reference"),
    ],
    ids=["no-ModelNew", "syntax", "raises", "shape", "dtype", "non-finite", "arity", "wrong"],
)
def test_broken_candidates_get_clear_reasons(harness, smoke, source, needle):
    v = harness.validate(smoke["02_linear_relu_tiny"], Candidate.from_source(source))
    assert not v.correct
    assert needle in v.reason, v.reason
    assert not v.crashed


def test_correct_candidate_reports_errors_and_fresh_seeds(harness, smoke):
    p = smoke["02_linear_relu_tiny"]
    a = harness.validate(p, Candidate.from_source(HONEST))
    b = harness.validate(p, Candidate.from_source(HONEST))
    assert a.correct and b.correct and a.max_abs_error == 0.0
    assert len({s.seed for s in a.sets}) == 3
    assert {s.seed for s in a.sets} != {s.seed for s in b.sets}  # fresh seeds every call
    assert {c.name for c in a.checks} >= {"precision", "pytorch_only", "output_aliases", "unwritten_output",
                                         "input_dependence"}


def test_fixed_seed_and_tolerance_override(smoke):
    h = shared_harness(device="cpu", watchdog_s=10, n_input_sets=2, seed=123, tolerance=1e-4)
    # 1e-3 relative error passes the default 1e-2 but not the overriding 1e-4
    src = HONEST.replace("return torch.relu(self.fc(x))", "return torch.relu(self.fc(x)) * 1.001")
    v = h.validate(smoke["02_linear_relu_tiny"], Candidate.from_source(src))
    assert not v.correct and v.tolerance == 1e-4
    assert [s.seed for s in v.sets] == [123]
    loose = shared_harness(device="cpu", watchdog_s=10, n_input_sets=3).validate(
        smoke["02_linear_relu_tiny"], Candidate.from_source(src))
    assert loose.correct


def test_no_gpu_means_no_measured_timing(harness, smoke):
    p = smoke["02_linear_relu_tiny"]
    t = harness.profile(p, Candidate.from_source(HONEST))
    assert t.median_us is None and t.timing_source is None and "no GPU" in t.reason
    r = harness.reference_timings(p)
    assert isinstance(r, ReferenceTimings) and r.eager_fp32_us is None and "no GPU" in r.reason


def _linear_relu_program(smoke):
    ir = pytest.importorskip("dsl_compiler.ir")
    return ir.Program(
        name="linear_relu_tiny",
        decls=(
            ir.TensorDecl(kind="input", name="x", dtype="f32", shape=(16, 32)),
            ir.TensorDecl(kind="param", name="w", dtype="f32", shape=(64, 32), source="fc.weight"),
            ir.TensorDecl(kind="param", name="b", dtype="f32", shape=(64,), source="fc.bias"),
        ),
        steps=(
            ir.Kernel(
                name="fc",
                op=ir.GemmOp(a=ir.Operand(name="x"), b=ir.Operand(name="w", transpose=True)),
                config=ir.KernelConfig(math="tf32"),
                stores=(ir.Store(name="y", dtype="f32",
                                 expr=ir.Unary(fn="relu", arg=ir.Binary(fn="add", lhs=ir.Acc(),
                                                                       rhs=ir.Ref(name="b", index="col")))),),
            ),
        ),
        outputs=("y",),
    )


def test_program_candidate_through_the_interpreter(harness, smoke):
    pytest.importorskip("dsl_compiler.runtime")
    pytest.importorskip("dsl_compiler.interpreter")
    program = _linear_relu_program(smoke)
    v = harness.validate(smoke["02_linear_relu_tiny"], Candidate.from_program(program, backend="interpreter"))
    assert v.correct, v.reason
    assert v.precision == "tf32"


def test_program_timing_is_an_estimate_without_gpu(harness, smoke):
    pytest.importorskip("sol_models.estimate")
    program = _linear_relu_program(smoke)
    t = harness.profile(smoke["02_linear_relu_tiny"], Candidate.from_program(program), t_sol_us=1e-6)
    assert t.timing_source == "estimate" and t.median_us > 0
    assert any(c.name == "sol_ceiling" for c in t.checks)


def test_precision_outside_the_allowed_set_is_rejected_statically(smoke):
    program = _linear_relu_program(smoke)
    h = shared_harness(device="cpu", watchdog_s=10, n_input_sets=2, seed=123, tolerance=1e-4)
    bf16 = program.model_copy(update={"steps": (program.steps[0].model_copy(
        update={"config": program.steps[0].config.model_copy(update={"math": "bf16"})}),)})
    v = h.validate(smoke["02_linear_relu_tiny"], Candidate.from_program(bf16))
    assert not v.correct and v.reason.startswith("precision:") and v.precision == "bf16"


def test_settings_are_validated():
    with pytest.raises(ValueError):
        HarnessSettings(n_input_sets=0)
    with pytest.raises(ValueError):
        HarnessSettings(device="tpu")


def test_a_broken_reference_is_reported_as_the_problem(harness, tmp_path):
    from evals.problems import load_problem

    f = tmp_path / "bad_ref.py"
    f.write_text(
        "import torch\nimport torch.nn as nn\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        raise RuntimeError('reference broke')\n"
        "def get_inputs():\n    return [torch.rand(4)]\n"
        "def get_init_inputs():\n    return []\n"
    )
    v = harness.validate(load_problem(f), Candidate.from_source(HONEST))
    assert not v.correct and not v.crashed
    assert "bad_ref.py" in v.reason and "the reference failed" in v.reason and "reference broke" in v.reason
