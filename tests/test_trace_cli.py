"""`mucutlass trace`: the frontend's program, its coverage, the ops left to PyTorch with reasons, the estimate."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

BUILTIN = "evals/suites/builtin"


def trace(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mucutlass", "trace", *args], capture_output=True, text=True, timeout=300)


def test_json_has_coverage_program_torch_ops_and_estimate():
    done = trace(f"{BUILTIN}/25_conv2d_residual_add.py", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["coverage"] == 1.0 and report["traced"] is True
    assert "conv2d(" in report["program"] and report["kernels"] == 1
    assert report["estimate"]["t_us"] > 0 and report["torch_ops"] == []


def test_ops_left_to_pytorch_are_listed_with_their_reason(tmp_path):
    path = tmp_path / "flip_after_linear.py"
    path.write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(256, 512)

            def forward(self, x):
                return torch.flip(self.fc(x), [0])  # a reordering: no kernel of the language

        def get_inputs():
            return [torch.rand(64, 256)]

        def get_init_inputs():
            return []
    """))
    done = trace(str(path))
    assert done.returncode == 0, done.stderr
    assert "coverage" in done.stdout and "flip" in done.stdout
    report = json.loads(trace(str(path), "--json").stdout)
    assert report["coverage"] > 0.5  # the GEMM is a kernel; the flip, left to PyTorch, is listed below
    (op,) = report["torch_ops"]
    assert op["target"] == "torch.flip" and op["reason"]


def test_a_scan_is_a_kernel_of_the_trace():
    done = trace("evals/suites/builtin-ops/38_cumsum_long_rows.py", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["coverage"] > 0 and report["torch_ops"] == []
    assert "cumsum(" in report["program"]


def test_an_untraceable_model_runs_whole_as_one_step_naming_the_construct(tmp_path):
    path = tmp_path / "data_dependent.py"
    path.write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                for _ in range(int(x.sum().item()) % 3):
                    x = x * 2
                return x

        def get_inputs():
            return [torch.rand(8, 8)]

        def get_init_inputs():
            return []
    """))
    done = trace(str(path))
    assert done.returncode == 0, done.stderr
    assert 'module(x0, path=""' in done.stdout and "coverage 0.0%" in done.stdout
    assert "a Python number taken from a tensor's value" in done.stdout and "Traceback" not in done.stderr


def test_missing_and_broken_files(tmp_path):
    assert trace(str(tmp_path / "nope.py")).returncode == 2
    folder = trace(str(tmp_path))
    assert folder.returncode == 2 and "one problem file" in folder.stderr
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nraise RuntimeError('boom')\n")
    done = trace(str(broken))
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_table_over_a_suite_has_a_row_per_problem_and_a_summary():
    done = trace("--suite", "smoke", "--json")
    assert done.returncode == 0, done.stderr
    table = json.loads(done.stdout)
    assert len(table["rows"]) == table["summary"]["problems"] == 5
    assert table["summary"]["traced"] == 5 and all(r["traced"] and r["coverage"] > 0.9 for r in table["rows"])


def test_a_table_over_a_folder_keeps_a_row_for_a_problem_that_crashes(tmp_path):
    head = "import torch\nimport torch.nn as nn\n\n"
    (tmp_path / "1_Linear.py").write_text(head + textwrap.dedent("""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(64, 32)

            def forward(self, x):
                return self.fc(x)

        def get_inputs():
            return [torch.randn(16, 64)]

        def get_init_inputs():
            return []
    """))
    (tmp_path / "2_Branch.py").write_text(head + textwrap.dedent("""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(64, 32)

            def forward(self, x):
                return self.fc(x) if x.sum() > 0 else -self.fc(x)

        def get_inputs():
            return [torch.randn(16, 64)]

        def get_init_inputs():
            return []
    """))
    (tmp_path / "3_Broken.py").write_text(head + "class Model(nn.Module):\n    pass\n\n"
                                          "def get_inputs():\n    raise RuntimeError('no inputs today')\n\n"
                                          "def get_init_inputs():\n    return []\n")
    done = trace("--kernelbench", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)["rows"]}
    assert rows["1_Linear"]["traced"] and rows["1_Linear"]["coverage"] == 1.0
    branch = rows["2_Branch"]
    assert branch["traced"] and branch["coverage"] == 0.0
    assert [op["target"] for op in branch["torch_ops"]] == ["Model (whole model)"]
    assert "branch" in branch["torch_ops"][0]["reason"]
    assert not rows["3_Broken"]["traced"] and "no inputs today" in rows["3_Broken"]["error"]
    text = trace("--kernelbench", str(tmp_path))
    assert text.returncode == 0 and "2 of 3 traced" in text.stdout and "Traceback" not in text.stdout + text.stderr


def test_a_table_over_bad_input_is_one_line_and_exit_2(tmp_path):
    for args in (["--suite", "no-such-suite"], ["--kernelbench", str(tmp_path / "missing")]):
        done = trace(*args)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
