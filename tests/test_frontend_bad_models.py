"""Models the frontend cannot take apart (branches and loops on tensor values, numbers read from tensors, masks) run
whole as one PyTorch step, with one line naming the construct and where it is, from the library and from
`mucutlass trace`; never a refusal, never a traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from dsl_compiler.frontend import trace_problem
from evals.problems import load_problem

HEADER = """
import torch
import torch.nn as nn

def get_inputs():
    return [torch.rand(8, 32)]

def get_init_inputs():
    return []
"""

# name -> (forward body, the words the line must hold, the source line it must quote or None)
CASES = {
    "branch_on_value": ("""
        if x.mean() > 0:
            return torch.relu(self.fc(x))
        return self.fc(x)""", "branch or loop on a tensor's value", "if x.mean() > 0:"),
    "loop_count_from_value": ("""
        for _ in range(int(x.sum().item()) % 3):
            x = self.fc(x)
        return x""", "Python number taken from a tensor's value", "for _ in range(int(x.sum().item()) % 3):"),
    "loop_over_rows": ("""
        out = []
        for row in x:
            out.append(self.fc(row) if row.max() > 0.5 else row)
        return torch.stack(out)""", "Python loop over a tensor's rows", "for row in x:"),
    "boolean_mask": ("""
        keep = x[x.sum(dim=1) > 16]
        return self.fc(keep)""", "advanced indexing", None),
}


def write_case(tmp_path, name):
    body, _, _ = CASES[name]
    source = HEADER + textwrap.dedent("""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(32, 32)

            def forward(self, x):""") + textwrap.indent(textwrap.dedent(body), " " * 8) + "\n"
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return path


def _whole_model_reasons(result) -> list[str]:
    """The reasons of a program that is the whole model as one module step (and nothing else)."""
    program = result.program
    assert program is not None and not program.kernels, [d.render() for d in result.diagnostics]
    steps = [(s.fn, {k.key: k.value for k in s.kwargs}.get("path")) for s in program.torch_steps]
    assert steps == [("module", "")]
    return [r.reason for r in result.coverage if r.reason]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_library_runs_the_model_whole_naming_the_construct_and_its_line(tmp_path, name):
    _, words, line = CASES[name]
    reasons = _whole_model_reasons(trace_problem(load_problem(write_case(tmp_path, name))))
    assert reasons and all("\n" not in r for r in reasons) and any(words in r for r in reasons)
    if line:
        assert any(f"{name}.py:" in r and f"`{line}`" in r for r in reasons)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_command_prints_the_whole_model_step_with_its_reason_and_no_traceback(tmp_path, name):
    done = subprocess.run([sys.executable, "-m", "mucutlass", "trace", str(write_case(tmp_path, name))],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert 'module(x0, path=""' in done.stdout and CASES[name][1] in done.stdout


NESTED = HEADER + textwrap.dedent("""
    class Gate(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(32, 32)

        def forward(self, x):
            if x.mean() > 0:
                return torch.relu(self.fc(x))
            return self.fc(x) - 1.0


    class Rows(nn.Module):
        def forward(self, x):
            return torch.stack([row * 2.0 if row.max() > 0.5 else row for row in x])


    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.pre = nn.Linear(32, 32)
            self.gate = Gate()
            self.rows = Rows()
            self.post = nn.Linear(32, 64)

        def forward(self, x):
            return self.post(self.rows(self.gate(self.pre(x))))
    """)


def test_a_submodule_torch_fx_cannot_follow_is_one_named_step_and_the_rest_gets_kernels(tmp_path):
    from dsl_compiler import interpreter, runtime

    path = tmp_path / "nested.py"
    path.write_text(NESTED)
    problem = load_problem(path)
    result = trace_problem(problem)
    program = result.program
    assert program is not None, [d.render() for d in result.diagnostics]
    assert [k.name for k in program.kernels] == ["pre", "post"]
    steps = [(s.fn, {k.key: k.value for k in s.kwargs}) for s in program.torch_steps]
    assert steps == [("module", {"path": "gate", "shape": (8, 32), "ranks": (2,)}),
                     ("module", {"path": "rows", "shape": (8, 32), "ranks": (2,)})]
    rows = {r.where: r for r in result.coverage if r.placement == "torch_step"}
    assert "nested.py:" in rows["gate"].reason and "`if x.mean() > 0:`" in rows["gate"].reason
    assert "loop over a tensor's rows" in rows["rows"].reason
    model = problem.make_model(seed=0)
    params = runtime.bind_params(program, model)
    modules = runtime.bind_modules(program, model)
    for sign in (1.0, -1.0):  # both sides of the branch, decided per call as PyTorch does
        x = torch.rand(8, 32) * sign
        with torch.no_grad():
            expected = model(x)
            (out,) = interpreter.run(program, [x], params, modules)
            loaded = runtime.load(program, "interpreter", params, modules=modules)(x)
        assert torch.allclose(out, expected, atol=1e-2, rtol=1e-2) and torch.equal(out, loaded)
    with pytest.raises(Exception, match="submodule is not bound"):
        interpreter.run(program, [x], params)


def test_the_command_prints_the_program_with_the_named_step(tmp_path):
    path = tmp_path / "nested.py"
    path.write_text(NESTED)
    done = subprocess.run([sys.executable, "-m", "mucutlass", "trace", str(path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert 'torch gate = module(pre_out, path="gate", shape=(8, 32), ranks=(2,))' in done.stdout


def test_a_branch_in_the_models_own_forward_runs_it_whole_with_one_line(tmp_path):
    path = tmp_path / "root.py"
    path.write_text(NESTED.replace("return self.post(self.rows(self.gate(self.pre(x))))",
                                   "return self.post(x) if x.sum() > 0 else self.post(self.pre(x))"))
    reasons = _whole_model_reasons(trace_problem(load_problem(path)))
    assert any("\n" not in r and "`return self.post(x) if x.sum() > 0" in r for r in reasons)


def test_the_exported_model_calls_its_own_submodule_for_the_named_step(tmp_path):
    import importlib.util

    from dsl_compiler.export import export_model_interpreted

    path = tmp_path / "nested.py"
    path.write_text(NESTED)
    problem = load_problem(path)
    program = trace_problem(problem).program
    out_path = export_model_interpreted(program, tmp_path / "model_new.py", problem_source=NESTED)
    spec = importlib.util.spec_from_file_location("model_new", out_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    new = module.ModelNew()
    reference = problem.make_model(seed=0)
    new.load_state_dict(reference.state_dict())
    x = -torch.rand(8, 32)
    with torch.no_grad():
        assert torch.allclose(new(x), reference(x), atol=1e-2, rtol=1e-2)


def test_tracing_a_model_with_parts_torch_fx_cannot_follow_prints_nothing(tmp_path, capfd):
    # torch.export prints the partial graph it gave up on and logs warnings, and ShapeProp prints a traceback for
    # `.item()` on meta tensors: a user saw what looks like a crash although the program is fine
    path = tmp_path / "nested.py"
    path.write_text(NESTED)
    result = trace_problem(load_problem(path))
    out, err = capfd.readouterr()
    assert result.program is not None
    assert err == "" and out == ""
    rows = [r for r in result.coverage if r.placement == "torch_step"]
    assert sorted(r.where for r in rows) == ["gate", "rows"]
    assert all(r.reason and "\n" not in r.reason for r in rows)
    assert "branch or loop on a tensor's value" in next(r.reason for r in rows if r.where == "gate")


def test_the_optimize_command_on_such_a_model_prints_no_traceback(tmp_path):
    path = tmp_path / "nested.py"
    path.write_text(NESTED)
    done = subprocess.run([sys.executable, "-m", "mucutlass", "optimize", str(path), "--backend", "interpreter",
                           "--max-attempts", "1", "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "def forward(" not in done.stderr and "meta tensors" not in done.stderr
    assert "2 PyTorch step(s)" in done.stderr


def test_only_the_tracing_thread_is_muted(capfd):
    import threading

    from dsl_compiler.frontend.reference import _stderr_muted_in_this_thread

    before = sys.stderr
    with _stderr_muted_in_this_thread():
        print("from the tracing thread", file=sys.stderr)
        other = threading.Thread(target=lambda: print("from another thread", file=sys.stderr))
        other.start()
        other.join()
    assert sys.stderr is before
    print("after the trace", file=sys.stderr)
    err = capfd.readouterr().err
    assert "from another thread" in err and "after the trace" in err and "from the tracing thread" not in err
