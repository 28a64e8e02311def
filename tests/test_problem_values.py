"""The compiler and the SOL models read a problem through ``run_vocabulary.problem.Problem``: a loaded problem, a
``ProblemValue`` made in code (the warm-up, a file traced by its path) and a bare module each give what the
protocol promises, with one default per field."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from dsl_compiler.frontend.reference import TraceError, load_reference
from evals.problems import load_problem
from run_vocabulary.problem import ALL_PRECISIONS, DEFAULT_PRECISIONS, STRICT_PRECISIONS, Problem, ProblemValue
from sol_models import counting, search

GEMM = Path(__file__).parent / "data" / "sol" / "gemm.py"


def _module(name: str = "tiny") -> types.ModuleType:
    import torch

    module = types.ModuleType(name)
    module.Model, module.get_inputs, module.get_init_inputs = (lambda: torch.nn.Linear(2, 2)), (lambda: [torch.ones(1, 2)]), list
    return module


def test_a_value_made_in_code_and_a_loaded_problem_are_problems():
    value = ProblemValue(name="tiny", path="tiny.py", module=_module())
    assert isinstance(value, Problem) and isinstance(load_problem(GEMM), Problem)
    assert (value.tolerance, value.allowed_precisions, value.setup_error, value.source) == (1e-2, DEFAULT_PRECISIONS, "", "")
    assert not isinstance(_module(), Problem)  # a module is no problem: it names no tolerance nor precisions


def test_the_reference_of_a_problem_keeps_its_name_and_precisions():
    ref = load_reference(ProblemValue(name="strict", path="s.py", module=_module(), allowed_precisions=STRICT_PRECISIONS))
    assert (ref.name, ref.allowed_precisions) == ("strict", STRICT_PRECISIONS)
    bare = load_reference(_module("bare_module"))  # a module allows every precision, under its own name
    assert (bare.name, bare.allowed_precisions) == ("bare_module", ALL_PRECISIONS)
    with pytest.raises(TraceError, match="defines no `Model`"):
        load_reference(ProblemValue(name="empty", path="e.py", module=types.ModuleType("empty")))


def test_the_search_reads_the_precisions_a_problem_allows():
    assert search._precisions(None) == ALL_PRECISIONS
    assert search._precisions(ProblemValue(name="s", path="s.py", allowed_precisions=("f32",))) == ("f32",)
    assert search._precisions(ProblemValue(name="s", path="s.py", allowed_precisions=())) == STRICT_PRECISIONS
    assert search._precisions({"allowed_precisions": ["bf16"]}) == ("bf16",)


def test_a_problem_whose_setup_failed_is_never_counted():
    with pytest.raises(counting.ProblemLoadError, match="hung in get_inputs"):
        counting.count_problem(ProblemValue(name="x", path=str(GEMM), setup_error="hung in get_inputs"))


def test_the_warm_up_counts_a_problem_value(monkeypatch):
    seen = []
    monkeypatch.setattr(counting, "_warm", [])
    monkeypatch.setattr(counting, "count_problem", lambda problem, seed=0: seen.append(problem))
    counting.warm_up()
    (problem,) = seen
    assert isinstance(problem, Problem) and isinstance(problem.module, types.ModuleType)
    assert counting._warm == [True]
