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
    path = tmp_path / "softmax_after_linear.py"
    path.write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(256, 512)

            def forward(self, x):
                return torch.softmax(self.fc(x), dim=0)

        def get_inputs():
            return [torch.rand(64, 256)]

        def get_init_inputs():
            return []
    """))
    done = trace(str(path))
    assert done.returncode == 0, done.stderr
    assert "coverage" in done.stdout and "softmax" in done.stdout
    report = json.loads(trace(str(path), "--json").stdout)
    assert 0.5 < report["coverage"] < 1.0
    (op,) = report["torch_ops"]
    assert op["target"] == "torch.softmax" and op["reason"]


def test_an_untraceable_model_gets_one_line_naming_the_construct(tmp_path):
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
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot trace" in lines[0] and "Traceback" not in done.stderr


def test_missing_and_broken_files(tmp_path):
    assert trace(str(tmp_path / "nope.py")).returncode == 2
    folder = trace(str(tmp_path))
    assert folder.returncode == 2 and "one problem file" in folder.stderr
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nraise RuntimeError('boom')\n")
    done = trace(str(broken))
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
