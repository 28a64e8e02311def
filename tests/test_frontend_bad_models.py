"""Models the frontend cannot trace (branches and loops on tensor values, numbers read from tensors, masks) get
one line naming the construct and where it is, from the library and from `mucutlass trace`; never a traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

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
        return self.fc(keep)""", "indexing a tensor", None),
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


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_library_names_the_construct_and_its_line(tmp_path, name):
    _, words, line = CASES[name]
    result = trace_problem(load_problem(write_case(tmp_path, name)))
    assert result.program is None
    errors = [d for d in result.diagnostics if d.severity == "error"]
    assert errors and "\n" not in errors[0].message and words in errors[0].message
    if line:
        assert f"{name}.py:" in errors[0].message and f"`{line}`" in errors[0].message


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_command_prints_one_line_and_no_traceback(tmp_path, name):
    done = subprocess.run([sys.executable, "-m", "mucutlass", "trace", str(write_case(tmp_path, name))],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr and CASES[name][1] in lines[0]


def test_a_branch_inside_a_submodule_is_found_there(tmp_path):
    path = tmp_path / "nested.py"
    path.write_text(HEADER + textwrap.dedent("""
        class Gate(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(32, 32)

            def forward(self, x):
                if x.mean() > 0:
                    return torch.relu(self.fc(x))
                return self.fc(x)


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.pre = nn.Linear(32, 32)
                self.gate = Gate()

            def forward(self, x):
                return self.gate(self.pre(x))
        """))
    (error,) = [d for d in trace_problem(load_problem(path)).diagnostics if d.severity == "error"]
    assert "nested.py:" in error.message and "`if x.mean() > 0:`" in error.message
