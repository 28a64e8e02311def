"""Programs with `module` steps (submodules torch.fx cannot follow, kept as one torch step) in the judge: the
candidate process builds its own instance of the problem's Model holding the reference's parameters, and the
steps call its submodules, as the exported ModelNew does. Right programs validate and time; wrong ones are still
caught; nothing but such a program's process is handed the problem's source."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dsl_compiler.frontend import trace_problem
from dsl_compiler.parser import parse
from dsl_compiler.printer import format_program
from evals.judge import verdicts
from evals.judge.client import Candidate
from evals.problems import load_problem, load_suite
from tests.adversarial.shared import shared_harness

GATED = Path(__file__).parent / "data" / "module_step" / "gated.py"


@pytest.fixture(scope="module")
def problem():
    return load_problem(GATED)


@pytest.fixture(scope="module")
def program_text(problem):
    result = trace_problem(problem)
    assert result.program is not None, [d.render() for d in result.diagnostics]
    assert [s.fn for s in result.program.torch_steps] == ["module", "module"]
    return format_program(result.program)


@pytest.fixture(scope="module")
def harness():
    return shared_harness(device="cpu", watchdog_s=60, n_input_sets=4, cpu_timing=True, timing_input_sets=2)


def candidate(text: str) -> Candidate:
    program, diags = parse(text)
    assert program is not None, [d.render() for d in diags]
    return Candidate.from_program(program)


def test_a_program_with_module_steps_validates_and_times(harness, problem, program_text):
    # the gate's weights come from the OS, not the seed: only the reference's parameters, loaded into the
    # candidate's own Model, reproduce it
    v = harness.validate(problem, candidate(program_text))
    assert v.correct and v.rule is None, v.reason
    assert len(v.sets) == 4 and all(s.correct for s in v.sets)
    t = harness.profile(problem, candidate(program_text))  # another model seed, another instance in the same process
    assert t.valid and t.timing_source == "cpu" and t.median_us > 0, (t.rule, t.reason)


@pytest.mark.parametrize("edit, rules", [
    # the two submodules called in the other order (errors this large may read as a low precision's)
    (lambda t: t.replace('path="gate"', 'path="@"').replace('path="rows"', 'path="gate"').replace('path="@"', 'path="rows"'),
     {verdicts.MISMATCH, verdicts.PRECISION}),
    # the kernel after the steps drops its bias
    (lambda t: t.replace("acc + post_bias[col]", "acc"), {verdicts.MISMATCH, verdicts.PRECISION}),
])
def test_a_wrong_program_with_module_steps_is_still_caught(harness, problem, program_text, edit, rules):
    text = edit(program_text)
    assert text != program_text
    v = harness.validate(problem, candidate(text))
    assert not v.correct and v.rule in rules, v.reason


@pytest.mark.parametrize("path", ["gate.nothing", "post.weight"])
def test_a_module_step_reaches_only_a_submodule_of_the_model(harness, problem, program_text, path):
    # a parameter is not a submodule ("" is the whole model: a step of PyTorch's work, flagged pytorch_only)
    v = harness.validate(problem, candidate(program_text.replace('path="gate"', f'path="{path}"')))
    assert not v.correct and v.rule == verdicts.CRASH and "no submodule at that path" in v.reason, v.reason
    assert "\n" not in v.reason


def test_a_layer_moved_from_a_kernel_into_a_module_step_is_flagged_as_pytorchs_work(harness, problem, program_text):
    program, _ = parse(program_text)
    kernels = {k.name: k for k in program.kernels}
    assert set(kernels) == {"pre", "post"}
    # `post` becomes the model's own Linear, run by PyTorch: still correct, but most FLOPs are not the program's
    head, post = program_text.split("kernel post", 1)
    text = head + 'torch post_out = module(rows, path="post", shape=(8, 64))\n\noutput post_out\n'
    text = "\n".join(line for line in text.splitlines() if "post_weight" not in line and "post_bias" not in line) + "\n"
    v = harness.validate(problem, candidate(text))
    assert v.correct and v.rule == verdicts.PYTORCH_ONLY, (v.rule, v.reason)
    assert v.info["candidate_work_share"] < 0.5


class _Attempt:
    instances, device, watchdog_s = 0, torch.device("cpu"), 10.0

    def __init__(self):
        self.requests = []
        self.proc = type("Proc", (), {"runner_pid": staticmethod(lambda: None)})()

    def request(self, op, payload, timeout_s=None):
        self.requests.append((op, payload))
        return {}


@pytest.mark.parametrize("which", ["module steps", "no module steps", "python"])
def test_only_a_program_with_module_steps_is_sent_the_problems_source(problem, program_text, which):
    from evals.judge.process import Judge

    if which == "module steps":
        cand = candidate(program_text)
    elif which == "no module steps":
        cand = Candidate.from_program(trace_problem(load_suite("smoke")[1]).program)
    else:
        cand = Candidate.from_source("class ModelNew: pass\n")
    attempt = _Attempt()
    Judge().load(attempt, problem, cand.worker_view(), model_seed=1, boot_timeout_s=5)
    (_, load), = [(op, p) for op, p in attempt.requests if op == "load"]
    if which == "module steps":
        assert load["problem"] == {"source": problem.source, "path": problem.path}
    else:
        assert "problem" not in load and problem.source not in repr(load)


def test_the_offline_tier_keeps_a_validated_program_with_module_steps(problem, tmp_path):
    import importlib.util
    import json
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "mucutlass", "optimize", str(GATED), "--backend", "interpreter",
                           "--max-attempts", "1", "--out", str(run_dir)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    (first,) = json.loads((run_dir / "attempts.json").read_text())
    assert first["correct"] and first["failure_reason"] is None and 'module(' in first["program_text"]
    assert not any("pytorch_only" in str(flag) for flag in first["flags"])
    assert summary["best_index"] == 1 and summary["fallback"] == "" and summary["kept_t_us"] == summary["best_t_us"]
    # the exported ModelNew is the problem's Model running the program, its submodules called by path
    spec = importlib.util.spec_from_file_location("gated_model_new", run_dir / "model_new.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reference = problem.make_model(seed=0)
    ours = module.ModelNew(*problem.module.get_init_inputs())
    ours.load_state_dict(reference.state_dict())
    for sign in (1.0, -1.0):
        x = torch.rand(8, 32) * sign
        with torch.no_grad():
            assert torch.allclose(ours(x), reference(x), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("device", ["cpu", "cpu:0", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_state_a_program_is_built_from_is_the_one_its_references_came_from(problem, device):
    # On a GPU the judge's device is `cuda` while its tensors report `cuda:0` (`cpu:0` and `cpu` are the
    # same two spellings of one device here). The references of each set, looked up by the inputs' device,
    # must come from the very instance whose state_dict the candidate is built from: another construction
    # of this Model draws other gate weights (os.urandom), and every set would differ.
    from evals.judge.process import Judge

    judge, attempt = Judge(), _Attempt()
    attempt.device, attempt.is_program = torch.device(device), True
    bundle = judge.take(problem, attempt.device, "validate", 3)
    judge._add_shuffled(problem, bundle)
    judge.build(attempt, problem, bundle.model_seed)
    (_, build), = attempt.requests
    candidate_model = problem.make_model(bundle.model_seed, attempt.device)
    candidate_model.load_state_dict(build["state_dict"], strict=True)
    pairs = [(x, refs) for _, x, refs in bundle.sets] + [bundle.shuffled]
    with torch.no_grad():
        for x, refs in pairs:
            assert torch.equal(candidate_model(*x), refs[0])
    assert len(judge.models) == 1  # one reference instance for the seed, however the device is spelled


def test_a_program_reading_a_plain_tensor_attribute_of_the_model_is_judged_with_it(harness):
    """A tensor the model holds as a plain attribute (outside its state_dict) is a param of the traced program; the
    judge hands it over with the state_dict, so the program validates; the same program reading a zero offset
    instead is wrong (the attribute's values are what it is judged against)."""
    problem = load_problem(Path(__file__).parent / "data" / "plain_attribute" / "offset_linear.py")
    program = trace_problem(problem).program
    assert "offset" in {d.source for d in program.params} and not program.torch_steps
    v = harness.validate(problem, Candidate.from_program(program))
    assert v.correct, v.reason
    unshifted = format_program(program).replace(' = "offset"', ' = "fc.bias"')
    w = harness.validate(problem, candidate(unshifted))
    assert not w.correct and w.rule == verdicts.MISMATCH, w.reason


def test_a_causal_attention_program_is_judged_correct_with_its_infinite_fill(harness):
    """The program crosses to the candidate as JSON: its -inf fill (and any infinite epilogue number) arrives as
    -inf, not as null (a null fill made every call raise)."""
    problem = load_problem(Path(__file__).resolve().parent.parent / "evals" / "suites" / "models" /
                           "19_causal_self_attention.py")
    program = trace_problem(problem).program
    assert any(s.fn == "fill_where" for s in program.torch_steps)
    from dsl_compiler import ir

    assert ir.Program.model_validate_json(program.model_dump_json()) == program
    v = harness.validate(problem, Candidate.from_program(program))
    assert v.correct, v.reason
