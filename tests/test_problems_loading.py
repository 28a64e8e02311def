"""Problem loading: files, folders, KernelBench checkouts, suites, and clear one-line errors."""

from pathlib import Path

import pytest
import torch

from evals.problems import (
    ProblemError,
    load_folder,
    load_kernelbench,
    load_problem,
    load_problems,
    load_suite,
    parse_ids,
    suite_index,
)

GOOD = """
import torch
import torch.nn as nn

M, N = 8, 4

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, N)

    def forward(self, x):
        return self.fc(x)

def get_inputs():
    return [torch.rand(M, N)]

def get_init_inputs():
    return [N]
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_load_good_file_defaults(tmp_path):
    p = load_problem(write(tmp_path / "7_Small.py", GOOD))
    assert p.name == "7_Small" and p.problem_id == 7 and p.level is None
    assert p.tolerance == 1e-2
    assert p.allowed_precisions == ("f32", "tf32", "bf16", "f16")
    assert p.source == GOOD


def test_constants_override_defaults(tmp_path):
    p = load_problem(write(tmp_path / "a.py", GOOD + "\nTOLERANCE = 1e-4\n"))
    assert p.tolerance == 1e-4 and p.allowed_precisions == ("f32", "tf32")
    q = load_problem(write(tmp_path / "b.py", GOOD + "\nALLOWED_PRECISIONS = ('f32',)\n"))
    assert q.allowed_precisions == ("f32",)


def test_same_seed_same_model_and_inputs(tmp_path):
    p = load_problem(write(tmp_path / "a.py", GOOD))
    m1, m2 = p.make_model(3), p.make_model(3)
    assert torch.equal(m1.fc.weight, m2.fc.weight)
    assert not torch.equal(m1.fc.weight, p.make_model(4).fc.weight)
    x1, x2, x3 = p.make_inputs(1), p.make_inputs(1), p.make_inputs(2)
    assert torch.equal(x1[0], x2[0]) and not torch.equal(x1[0], x3[0])


def test_spec_round_trip(tmp_path):
    p = load_problem(write(tmp_path / "a.py", GOOD + "\nTOLERANCE = 1e-3\n"))
    q = type(p).from_spec(p.to_spec())
    assert q.name == p.name and q.tolerance == 1e-3 and q.allowed_precisions == p.allowed_precisions
    assert torch.equal(q.make_model(0).fc.weight, p.make_model(0).fc.weight)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("import torch\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n", "missing Model"),
        (GOOD.replace("def get_inputs", "def other_inputs"), "missing get_inputs"),
        (GOOD.replace("def get_init_inputs", "def other"), "missing get_init_inputs"),
        ("import not_a_module_xyz\n", "failed to import: ModuleNotFoundError"),
        ("def f(:\n", "syntax error"),
        ("raise RuntimeError('boom\\nsecond line')\n", "RuntimeError: boom second line"),
        (GOOD + "\nTOLERANCE = -1\n", "TOLERANCE must be a positive number"),
        (GOOD + "\nALLOWED_PRECISIONS = ('fp8',)\n", "ALLOWED_PRECISIONS"),
        ("import sys\nsys.exit(3)\n", "SystemExit"),
    ],
)
def test_bad_files_give_one_line_errors_naming_the_file(tmp_path, text, needle):
    f = write(tmp_path / "broken.py", text)
    with pytest.raises(ProblemError) as err:
        load_problem(f)
    msg = str(err.value)
    assert "broken.py" in msg and needle in msg and "\n" not in msg


def test_missing_and_wrong_kind_paths(tmp_path):
    for path, needle in [(tmp_path / "nope.py", "no such file"), (tmp_path, "is a folder"),
                         (write(tmp_path / "x.txt", "hi"), "not a Python file")]:
        with pytest.raises(ProblemError, match=needle):
            load_problem(path)


def test_folder_orders_by_kernelbench_id(tmp_path):
    for name in ["10_B.py", "2_A.py", "1_C.py", "__init__.py", "_helper.py"]:
        write(tmp_path / name, GOOD)
    assert [p.name for p in load_folder(tmp_path)] == ["1_C", "2_A", "10_B"]
    with pytest.raises(ProblemError, match="no such folder"):
        load_folder(tmp_path / "does_not_exist")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProblemError, match="no problem files"):
        load_folder(tmp_path / "empty")


def test_kernelbench_checkout_selection(tmp_path):
    level = tmp_path / "KernelBench" / "level2"
    for i in range(1, 6):
        write(level / f"{i}_Prob{i}.py", GOOD)
    write(level / "2_Prob2_OLD.py", "raise RuntimeError('superseded')\n")  # KernelBench keeps old versions
    got = load_kernelbench(tmp_path, 2, "2-3,5")
    assert [(p.level, p.problem_id) for p in got] == [(2, 2), (2, 3), (2, 5)]
    assert got[0].key == "L2/2"
    assert len(load_kernelbench(level, 2)) == 5  # the level folder itself works too
    with pytest.raises(ProblemError, match="no problem with id 9"):
        load_kernelbench(tmp_path, 2, [1, 9])
    with pytest.raises(ProblemError, match="no level3 folder"):
        load_kernelbench(tmp_path, 3, "1")
    sel = load_problems(kernelbench=tmp_path, level=2, ids="4")
    assert [p.problem_id for p in sel] == [4]
    (tmp_path / "KernelBench" / "level1").mkdir()  # a level folder holding no problem is no selection
    with pytest.raises(ProblemError, match="level1: no KernelBench problems in this folder"):
        load_kernelbench(tmp_path, 1)
    with pytest.raises(ProblemError, match="selects no problem"):
        load_kernelbench(tmp_path, 2, ",")


def test_parse_ids():
    assert parse_ids("1-3, 7") == [1, 2, 3, 7]
    assert parse_ids([3, 1, 3]) == [1, 3]
    assert parse_ids(None) is None
    for bad in ("a-b", "5-2"):
        with pytest.raises(ProblemError):
            parse_ids(bad)


def test_load_problems_needs_exactly_one_source(tmp_path):
    with pytest.raises(ProblemError, match="exactly one"):
        load_problems()
    with pytest.raises(ProblemError, match="--level"):
        load_problems(kernelbench=tmp_path)


def test_unknown_suite():
    with pytest.raises(ProblemError, match="unknown suite 'nope'.*builtin"):
        load_suite("nope")


def test_smoke_suite_runs_on_cpu():
    problems = load_suite("smoke")
    assert len(problems) == 5
    for p in problems:
        model = p.make_model(0)
        out = model(*p.make_inputs(0))
        assert torch.isfinite(out).all() and out.abs().sum() > 0


def test_builtin_suite_is_well_formed():
    """Every builtin problem loads, states its tolerance and precisions, and has the right
    output shape (checked on the meta device, so no real compute)."""
    problems = load_suite("builtin")
    assert 28 <= len(problems) <= 40
    names = [p.name for p in problems]
    assert len(set(names)) == len(names)
    for p in problems:
        assert "TOLERANCE" in p.source and "ALLOWED_PRECISIONS" in p.source, p.name
        with torch.device("meta"):
            model = p.make_model(0)
            inputs = p.make_inputs(0)
            out = model(*inputs)
        assert out.numel() > 0, p.name
        assert all(x.dtype == torch.float32 for x in inputs if isinstance(x, torch.Tensor)), p.name
    strict = load_suite("builtin-strict")
    assert all(p.tolerance == 1e-4 and set(p.allowed_precisions) <= {"f32", "tf32"} for p in strict)
    assert {"builtin", "builtin-large", "builtin-strict", "smoke"} <= set(suite_index())


def test_builtin_large_suite_is_well_formed():
    """The KernelBench-scale suite: at least 20 problems, each stating its tolerance and precisions,
    with the right output shape on the meta device; it holds the shapes the offline tier must not
    hand back to PyTorch (K, N and channel counts that are not 16 bytes, a 1x1 conv, a batched GEMM)."""
    problems = load_suite("builtin-large")
    assert len(problems) >= 20
    assert len({p.name for p in problems}) == len(problems)
    shapes = []
    for p in problems:
        assert "TOLERANCE" in p.source and "ALLOWED_PRECISIONS" in p.source, p.name
        with torch.device("meta"):
            model = p.make_model(0)
            inputs = p.make_inputs(0)
            out = model(*inputs)
        assert out.numel() > 0, p.name
        shapes.append([tuple(x.shape) for x in inputs])
    channels = {s[0][1] for s in shapes if len(s[0]) == 4}
    assert 3 in channels and 6 in channels  # convs whose input channels are under 16 bytes
    assert any(2949 in s[0] for s in shapes)  # a GEMM K that is not 16-byte aligned
    # the builtin suite is unchanged by it
    assert len(load_suite("builtin")) == 31


def test_the_kernelbench_rule_judges_fp32_problems_at_1e_4_and_16_bit_ones_at_1e_2(tmp_path):
    from evals.problems import apply_tolerance_rule, load_problem, load_suite

    head = "import torch\nimport torch.nn as nn\nTOLERANCE = 1e-2\nclass Model(nn.Module):\n    def forward(self, x):\n        return x * 2\n"
    (tmp_path / "fp32.py").write_text(head + "def get_inputs():\n    return [torch.rand(8, 8)]\ndef get_init_inputs():\n    return []\n")
    (tmp_path / "half.py").write_text(head + "def get_inputs():\n    return [torch.rand(8, 8).half()]\ndef get_init_inputs():\n    return []\n")
    fp32, half = (load_problem(tmp_path / n) for n in ("fp32.py", "half.py"))
    assert apply_tolerance_rule([fp32, half], "default") and fp32.tolerance == half.tolerance == 1e-2
    apply_tolerance_rule([fp32, half], "kernelbench")
    assert fp32.tolerance == 1e-4 and set(fp32.allowed_precisions) == {"f32", "tf32"}
    assert half.tolerance == 1e-2 and "f16" in half.allowed_precisions
    strict = load_suite("builtin-large-strict")
    assert len(strict) == len(load_suite("builtin-large"))
    assert all(p.tolerance == 1e-4 and set(p.allowed_precisions) <= {"f32", "tf32"} for p in strict)
